"""`mqtt bench` as the yardstick: rates at QoS 0/1/2 and latency at 1,000 and 10,000 msg/s against one mosquitto,
the broker and the load generator each pinned to a core of their own; with a C load generator beside it when one
is named.

    .venv/bin/python benchmarks/bench_vs_c.py [--reps 3] [--count 100000] [--seconds 5] [--only thru,lat]
                                              [--broker-core 0] [--gen-core 1] [--no-pin] [--out FILE] [--quick]

MQTTLOAD_DIR: a directory holding the source of the neutral C load generator mqttload (`mqttload thru` and
`mqttload lat`), built in a temporary directory as benchmarks/_loadgen.py does. Without it the script runs
`mqtt bench` alone. Scenarios, 1 publisher and 1 subscriber,
64 B payloads, each tool back to back within a rep (the order alternates from rep to rep), on a fresh mosquitto
(no queue or inflight caps, persistence off) on a free port:

* thru-q0, thru-q1, thru-q2: --count messages as fast as possible (QoS 1/2 window 100): deliveries/s.
* lat-1000, lat-10000: QoS 1 at 1,000 and 10,000 msg/s for --seconds: latency p50/p99/p999 (µs). `mqtt bench`
  runs twice: with the kernel's receive times (its default) and with `--clock user` (the time recv() returned, as
  the C tool takes it), which shows how much of a tail is the generator's own.

Both tools get the broker's pid, so each line carries the generator's and the broker's CPU use: a generator near
100 % of its core was the limit, not the broker. Every line names the CPU (`lscpu`'s model name). Output: one
JSON line per measurement on standard output and in --out (default benchmarks/results/bench_vs_c-DATE.jsonl),
then a table of medians (docs/PERFORMANCE.md, #38).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _loadgen import MOSQUITTO, LoadGen, mosquitto_conf  # noqa: E402
from _results import cpu_model, results_dir  # noqa: E402

from tests.brokers import free_port, wait_for_port  # noqa: E402

SCENARIOS = {"thru-q0": ("thru", 0, 0), "thru-q1": ("thru", 1, 0), "thru-q2": ("thru", 2, 0),
             "lat-1000": ("lat", 1, 1000), "lat-10000": ("lat", 1, 10000)}  # fmt: skip
FIELDS = ("delivered_per_s", "p50_us", "p99_us", "p999_us", "gen_cpu_pct", "broker_cpu_pct")
USER_CLOCK = "mqtt bench --clock user"
EXTRA = ("clock", "sent", "lost", "samples", "gen_wait_pct", "broker_wait_pct")



class Pinning:
    def __init__(self, broker_core: int, gen_core: int, enabled: bool) -> None:
        self.on = enabled and shutil.which("taskset") is not None and (os.cpu_count() or 1) > max(broker_core, gen_core)
        self.broker, self.gen = broker_core, gen_core

    def broker_cmd(self, cmd: list[str]) -> list[str]:
        return ["taskset", "-c", str(self.broker), *cmd] if self.on else cmd

    def gen_cmd(self, cmd: list[str]) -> list[str]:
        return ["taskset", "-c", str(self.gen), *cmd] if self.on else cmd


def start_broker(tmp: Path, pin: Pinning) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    conf = tmp / f"m{port}.conf"
    conf.write_text(mosquitto_conf(port))
    proc = subprocess.Popen(
        pin.broker_cmd([MOSQUITTO, "-c", str(conf)]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )  # taskset execs the broker: proc.pid is its pid
    wait_for_port(port, proc, 10)
    return proc, port


def run_ours(kind: str, qos: int, rate: int, port: int, pid: int, args: argparse.Namespace, pin: Pinning,
             tmp: Path, clock: str) -> dict[str, Any]:  # fmt: skip
    out = tmp / "ours.json"
    out.unlink(missing_ok=True)
    load = (
        ["-I", "0", "-L", str(args.count)] if kind == "thru" else ["--rate", str(rate), "--duration", str(args.seconds)]
    )
    cmd = [sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "-c", "1", "--subs", "1", "-q", str(qos), "-s", "64",
           "--inflight", "100", "--workers", str(args.workers), *load, "-h", "127.0.0.1", "-p", str(port),
           "--broker-pid", str(pid), "--clock", clock, "--quiet", "--json", str(out)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(pin.gen_cmd(cmd), capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    if not out.exists():
        raise RuntimeError(f"mqtt bench: exit {proc.returncode}: {proc.stderr[-800:]}")
    f = json.loads(out.read_text())
    f.pop("histogram", None)
    return f


def run_c(tool: str, kind: str, qos: int, rate: int, port: int, pid: int, args: argparse.Namespace,
          pin: Pinning) -> dict[str, Any]:  # fmt: skip
    if kind == "thru":
        load = ["thru", "--fanin", "--pubs", "1", "--subs", "1", "--count", str(args.count)]
    else:
        load = ["lat", "--rate", str(rate), "--seconds", str(args.seconds)]
    cmd = [tool, *load, "--qos", str(qos), "--size", "64", "--port", str(port), "--broker-pid", str(pid)]
    proc = subprocess.run(pin.gen_cmd(cmd), capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{Path(tool).name}: exit {proc.returncode}: {proc.stderr[-800:]}")
    f = json.loads(lines[-1])
    if kind == "lat" and "delivered_per_s" not in f:
        f["delivered_per_s"] = round(f.get("received", 0) / args.seconds, 1)
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--count", type=int, default=100_000, help="messages per throughput run")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per latency run")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    ap.add_argument("--workers", type=int, default=1, help="mqtt bench --workers (default 1: one core)")
    ap.add_argument("--broker-core", type=int, default=0)
    ap.add_argument("--gen-core", type=int, default=1)
    ap.add_argument("--no-pin", action="store_true", help="no taskset")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true", help="one rep, 5,000 messages, 1 s: does it run (make bench-quick)")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.count, args.seconds = 1, 5_000, 1
    pin = Pinning(args.broker_core, args.gen_core, not args.no_pin)
    model = cpu_model()
    today = datetime.date.today().isoformat()
    out_path = args.out or results_dir() / f"bench_vs_c-{today}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    for name in names:
        if name not in SCENARIOS:
            sys.exit(f"--only {name}: no such scenario (one of {', '.join(SCENARIOS)})")
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmpdir, out_path.open("a") as sink:
        tmp = Path(tmpdir)
        tool = LoadGen(tmp).mqttload  # built from $MQTTLOAD_DIR, or None: `mqtt bench` alone
        tools = ["mqtt bench", USER_CLOCK, *(["mqttload"] if tool else [])]
        for rep in range(args.reps):
            for name in names:
                kind, qos, rate = SCENARIOS[name]
                order = tools if rep % 2 == 0 else tools[::-1]
                for which in order:
                    if which == USER_CLOCK and kind == "thru":
                        continue  # the clock changes latency only
                    broker, port = start_broker(tmp, pin)
                    try:
                        if which in ("mqtt bench", USER_CLOCK):
                            clock = "user" if which == USER_CLOCK else "kernel"
                            f = run_ours(kind, qos, rate, port, broker.pid, args, pin, tmp, clock)
                        else:
                            assert tool is not None
                            f = run_c(tool, kind, qos, rate, port, broker.pid, args, pin)
                    finally:
                        broker.terminate()
                        broker.wait(timeout=15)
                    line = {"bench": "bench_vs_c", "date": today, "cpu": model, "pinned": pin.on, "rep": rep,
                            "scenario": name, "tool": which, "qos": qos, "rate": rate,
                            **{k: f.get(k) for k in (*FIELDS, *EXTRA)}}  # fmt: skip
                    print(json.dumps(line), flush=True)
                    sink.write(json.dumps(line) + "\n")
                    results.setdefault((name, which), []).append(f)
    print(f"\n{model}; medians of {args.reps}; broker core {pin.broker}, generator core {pin.gen}"
          if pin.on else f"\n{model}; medians of {args.reps}; not pinned")  # fmt: skip
    print("| scenario | tool | delivered/s | p50 µs | p99 µs | p999 µs | gen CPU % | broker CPU % |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        for which in tools:
            runs = results.get((name, which), [])
            if not runs:
                continue
            cells = [_median(runs, k) for k in FIELDS]
            print(f"| {name} | {which} | " + " | ".join(cells) + " |")


def _median(runs: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
    if not values:
        return "-"
    m = statistics.median(values)
    return f"{m:,.0f}" if abs(m) >= 100 else f"{m:.1f}"


if __name__ == "__main__":
    main()
