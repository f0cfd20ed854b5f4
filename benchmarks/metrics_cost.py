"""What the metrics endpoint costs the broker: fan-in QoS 0 with it on and scraped every second, against off.

    .venv/bin/python benchmarks/metrics_cost.py [--rounds 6] [--count 200000] [--scrapes 300]
    .venv/bin/python benchmarks/metrics_cost.py --quick     # 1 round of 2,000 messages, 20 scrapes

Two `mqtt serve` processes (the same limits as benchmarks/broker.py's, pinned to CPU 0), one with
--metrics-listen; benchmarks/_loadgen.py's load generator (CPU 1) runs fan-in, 1 publisher to 1 subscriber, QoS
0, 64 B. Three arms a round, their order rotating: "on" (a scraper thread of this process, CPU 1, GETs /metrics
every second with Prometheus's Accept header), "on idle" (the same broker, not scraped: what separates the cost
of scraping from the difference between two processes) and "off" (the other broker). The scraper is quiet
outside "on" runs (both brokers share CPU 0, so scraping the idle one would slow the other).

Printed, same run: the median delivered/s of each arm and their ratio (the issue's target: >= 0.98), the
broker's CPU time per delivered message in each arm (read from /proc around each run: steadier than the
rate on a loaded machine), and the CPU time of one scrape (--scrapes back-to-back GETs of the "on" broker once
the rounds are done, CPU from /proc/PID/stat) as a share of the CPU the broker spends in a second of fan-in.
Raw rows go to benchmarks/results/metrics-cost-DATE.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import LoadGen, pin
from broker import median, save_rows, start_broker, stop_brokers

ACCEPT = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"}
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def scrape(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, headers=ACCEPT), timeout=10) as answer:
        return len(answer.read())


class Scraper:
    """GET /metrics once a second while `active` is set."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.active = threading.Event()
        self.stop = threading.Event()
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.active.wait(0.1):
                continue
            scrape(self.url)
            self.count += 1
            self.stop.wait(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="on/off pairs (at least 6 for a median worth reading)")
    parser.add_argument("--count", type=int, default=200_000, help="messages per run")
    parser.add_argument("--scrapes", type=int, default=300, help="back-to-back scrapes timed for the cost of one")
    parser.add_argument("--quick", action="store_true", help="1 round of 2,000 messages, 20 scrapes")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.count, args.scrapes = 1, 2_000, 20
    work = Path(tempfile.mkdtemp(prefix="mqtt-metrics-cost-"))
    load = LoadGen(work)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the scraper beside the generator, off the brokers' CPU
    metrics_port = 18886
    serve = [
        *pin(0), sys.executable, "-m", "mqtt_cli", "serve", "--max-queued-messages", "0",
        "--max-inflight", "0", "--sys-interval", "0",
    ]  # fmt: skip
    targets = {
        "off": (18884, [*serve, "--port", "18884"]),
        "on": (18885, [*serve, "--port", "18885", "--metrics-listen", f"127.0.0.1:{metrics_port}"]),
    }
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    scraper = Scraper(url)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    rows: list[dict[str, object]] = []
    per_scrape = float("nan")
    size = 0
    try:
        for label, (port, cmd) in targets.items():
            procs[label] = start_broker(label, port, cmd, LoadGen.env())
        scraper.thread.start()
        arms = ["on", "on idle", "off"]
        for round_no in range(args.rounds):
            for k in range(len(arms)):
                label = arms[(k + round_no) % len(arms)]
                broker = "off" if label == "off" else "on"
                port = targets[broker][0]
                if label == "on":
                    scraper.active.set()
                try:
                    row = load.thru(port, pattern="fanin", pubs=1, subs=1, qos=0, size=64, count=args.count,
                                    broker_pid=procs[broker].pid)  # fmt: skip
                except RuntimeError as e:
                    row = {"error": str(e)}
                scraper.active.clear()
                row.update(label=label, round=round_no + 1, test="fanin-qos0-metrics-cost")
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
        scraper.stop.set()
        scraper.thread.join(5)
        pid = procs["on"].pid
        size = scrape(url)
        before = cpu_seconds(pid)
        for _ in range(args.scrapes):
            scrape(url)
        per_scrape = (cpu_seconds(pid) - before) / args.scrapes
    finally:
        scraper.stop.set()
        stop_brokers(procs)
    out_path = save_rows("metrics-cost", [*rows, {"test": "scrape-cpu", "scrapes": args.scrapes,
                                       "cpu_s_per_scrape": per_scrape, "bytes": size}])  # fmt: skip

    def cpu_per_message(label: str) -> float:
        values = [float(r["broker_cpu_s"]) / float(r["delivered"])  # type: ignore[arg-type]
                  for r in rows if r["label"] == label and r.get("delivered") and "broker_cpu_s" in r]  # fmt: skip
        return statistics.median(values) if values else float("nan")

    def busy(label: str) -> float:  # share of a core the broker used during fan-in
        return median([r for r in rows if r["label"] == label], "broker_cpu_pct") / 100

    def per_round(a: str, b: str, field: str) -> list[float]:
        out = []
        for n in range(1, args.rounds + 1):
            got = {r["label"]: r for r in rows if r["round"] == n}
            x, y = got.get(a, {}), got.get(b, {})
            if field == "cpu":
                if x.get("delivered") and y.get("delivered") and "broker_cpu_s" in x and "broker_cpu_s" in y:
                    out.append((float(x["broker_cpu_s"]) / float(x["delivered"]))  # type: ignore[arg-type]
                               / (float(y["broker_cpu_s"]) / float(y["delivered"])))  # type: ignore[arg-type]
            elif x.get(field) and y.get(field):
                out.append(float(x[field]) / float(y[field]))  # type: ignore[arg-type]
        return out

    def spread(values: list[float]) -> str:
        if not values:
            return "n/a"
        return f"{statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"

    rate = {lb: median([r for r in rows if r["label"] == lb], "delivered_per_s") for lb in arms}
    cpu = {lb: cpu_per_message(lb) for lb in arms}
    print(f"fan-in QoS 0, 64 B, {args.rounds} rounds of {args.count:,} messages, {scraper.count} scrapes during 'on'")
    print("  delivered/s (median): " + ", ".join(f"{lb} {rate[lb]:,.0f}" for lb in arms))
    print(f"  per-round ratio of rates, on/off: {spread(per_round('on', 'off', 'delivered_per_s'))} (target >= 0.98); "
          f"on/on idle: {spread(per_round('on', 'on idle', 'delivered_per_s'))}")  # fmt: skip
    print("  broker CPU per message (median): " + ", ".join(f"{lb} {cpu[lb] * 1e6:.2f} us" for lb in arms))
    print(f"  per-round ratio of CPU per message, on/off: {spread(per_round('on', 'off', 'cpu'))}; "
          f"on/on idle (the scrapes alone): {spread(per_round('on', 'on idle', 'cpu'))}; "
          f"on idle/off (two processes): {spread(per_round('on idle', 'off', 'cpu'))}")  # fmt: skip
    share = per_scrape / busy("on") if busy("on") else float("nan")
    print(f"  one scrape ({size:,} B): {per_scrape * 1e3:.2f} ms of broker CPU; one a second = "
          f"{per_scrape * 100:.2f}% of a core, {share * 100:.2f}% of the CPU the broker got in a second of fan-in "
          f"here ({busy('on') * 100:.0f}% of a core: the rest of the time it waited for one)")  # fmt: skip
    print(f"raw results: {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
