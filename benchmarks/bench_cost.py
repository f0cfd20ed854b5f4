"""`mqtt bench`'s own CPU time per message (#38), this checkout against another commit, alternately.

    .venv/bin/python benchmarks/bench_cost.py [--against REF] [--reps 3] [--only q0,q1,r1k] [--pure]
    .venv/bin/python benchmarks/bench_cost.py --quick     # one rep, small counts (make bench-quick)

Rates need a quiet machine; the bench's CPU time per message does much less (what the other processes on the
machine cost it is their share of its caches): this measures that, so that a change to the bench's hot paths can
be judged on a loaded machine. Each scenario runs `mqtt bench pubsub -c 1 --subs 1 -s 64 --workers 1` against a
fresh mosquitto (benchmarks/_loadgen.py's settings), mosquitto pinned to --broker-core and the bench to
--gen-core as in bench_vs_c.py, and takes `gen_cpu_s` (the bench's processes on a CPU from the start to the
end: user and system time, the kernel's work for its sockets included) over the messages sent:

* q0: QoS 0, --count messages as fast as possible; q1: the same at QoS 1 (window 100);
* r1k: QoS 1 at 1,000 msg/s for --seconds: each message alone (a timerfd paces), as at 10,000 msg/s on a quiet
  machine, so its wake-ups count.

--against REF: the same with REF's `mqtt_cli` (`git archive` into a temporary directory; the build that runs is
pure Python there, and here with --pure), the two alternating within each rep, the order swapped every rep.
Also prints the in-process cost of the per-message work (core/benchwire.py: scanning deliveries, building
PUBLISH packets) for this checkout, µs per message, best of 5. Output: one JSON line per run, on standard output
and in --out (default benchmarks/results/bench_cost-DATE.jsonl), then medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _loadgen import MOSQUITTO, mosquitto_conf  # noqa: E402
from _results import results_dir  # noqa: E402
from bench_vs_c import Pinning, cpu_model  # noqa: E402

from tests.brokers import free_port, wait_for_port  # noqa: E402


def scenarios(count: int, seconds: int) -> dict[str, list[str]]:
    return {
        "q0": ["-q", "0", "-I", "0", "-L", str(count)],
        "q1": ["-q", "1", "-I", "0", "-L", str(count // 2)],
        "r1k": ["-q", "1", "--rate", "1000", "--duration", str(seconds)],
    }


def run_one(tree: Path, load: list[str], pure: bool, pin: Pinning, tmp: Path) -> dict[str, Any]:
    port = free_port()
    conf = tmp / f"m{port}.conf"
    conf.write_text(mosquitto_conf(port))
    broker = subprocess.Popen(
        pin.broker_cmd([MOSQUITTO, "-c", str(conf)]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    out = tmp / "cost.json"
    out.unlink(missing_ok=True)
    try:
        wait_for_port(port, broker, 10)
        cmd = [sys.executable, "-m", "mqtt_cli", "bench", "pubsub", "-c", "1", "--subs", "1", "-s", "64",
               "--inflight", "100", "--workers", "1", *load, "-h", "127.0.0.1", "-p", str(port),
               "--broker-pid", str(broker.pid), "--quiet", "--json", str(out)]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(tree), MQTT_CLI_PURE="1" if pure else "0")
        proc = subprocess.run(pin.gen_cmd(cmd), capture_output=True, text=True, timeout=600, env=env, cwd=tree)
    finally:
        broker.terminate()
        broker.wait(timeout=15)
    if not out.exists():
        raise RuntimeError(f"mqtt bench: exit {proc.returncode}: {proc.stderr[-800:]}")
    f: dict[str, Any] = json.loads(out.read_text())
    return f


def in_process(pure: bool) -> dict[str, float]:
    """µs per message of core/benchwire.py's work in this checkout (a child process, so that the build is chosen
    afresh): a subscriber's scan of 64 and of 1 PUBLISH a read, a publisher's batch of 64 and of 1."""
    code = """
import json, time
from mqtt_cli.core.benchwire import Latencies, Publishes, Receiver
N = 128_000
out = {}
for qos in (0, 1):
    p = Publishes(b"bench/1", qos, False, 4, 64, 1)
    for per in (64, 1):
        data = p.build(per, time.time_ns())
        best = best_build = 1e9
        for _ in range(5):
            r = Receiver(4, Latencies())
            now = time.time_ns()
            t = time.process_time()
            for _ in range(N // per):
                r.feed(data, now, True)
            best = min(best, time.process_time() - t)
            t = time.process_time()
            for _ in range(N // per):
                p.build(per, now)
            best_build = min(best_build, time.process_time() - t)
        out[f"scan_q{qos}_{per}_per_read_us"] = round(best * 1e6 / N, 3)
        out[f"build_q{qos}_{per}_per_send_us"] = round(best_build * 1e6 / N, 3)
print(json.dumps(out))
"""
    env = dict(os.environ, PYTHONPATH=str(REPO), MQTT_CLI_PURE="1" if pure else "0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    figures: dict[str, float] = json.loads(proc.stdout)
    return figures


def build_name(pure: bool) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO), MQTT_CLI_PURE="1" if pure else "0")
    probe = "from mqtt_cli import buildmode; print(buildmode.BUILD)"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO)
    return proc.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", help="a git commit or branch whose `mqtt bench` to compare with")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--count", type=int, default=100_000, help="QoS 0 messages (QoS 1: half)")
    ap.add_argument("--seconds", type=int, default=5, help="seconds of the paced run")
    ap.add_argument("--only", default="q0,q1,r1k")
    ap.add_argument("--pure", action="store_true", help="this checkout as pure Python (MQTT_CLI_PURE=1)")
    ap.add_argument("--broker-core", type=int, default=0)
    ap.add_argument("--gen-core", type=int, default=1)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true", help="one rep, 5,000 messages, 1 s: does it run")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.count, args.seconds = 1, 5_000, 1
    all_scenarios = scenarios(args.count, args.seconds)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    for name in names:
        if name not in all_scenarios:
            sys.exit(f"--only {name}: no such scenario (one of {', '.join(all_scenarios)})")
    pin = Pinning(args.broker_core, args.gen_core, not args.no_pin)
    today = datetime.date.today().isoformat()
    out_path = args.out or results_dir() / f"bench_cost-{today}.jsonl"
    head = {"bench": "bench_cost", "date": today, "cpu": cpu_model(), "pinned": pin.on}
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmpdir, out_path.open("a") as sink:
        tmp = Path(tmpdir)

        def emit(line: dict[str, Any]) -> None:
            print(json.dumps(line), flush=True)
            sink.write(json.dumps(line) + "\n")

        here = f"this checkout ({build_name(args.pure)})"
        emit({**head, "what": "in_process", "tree": here, **in_process(args.pure)})
        trees: list[tuple[str, Path, bool]] = [(here, REPO, args.pure)]
        if args.against:
            other = tmp / "against"
            other.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.against, "mqtt_cli"],
                                     capture_output=True, check=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(other)], input=archive, check=True)
            trees.append((f"{args.against} (pure Python)", other, True))
        for rep in range(args.reps):
            for name in names:
                for label, tree, pure in trees if rep % 2 == 0 else trees[::-1]:
                    f = run_one(tree, all_scenarios[name], pure, pin, tmp)
                    per_msg = f["gen_cpu_s"] * 1e6 / max(1, f["sent"])
                    results.setdefault((name, label), []).append(per_msg)
                    emit({**head, "what": "run", "rep": rep, "scenario": name, "tree": label,
                          "gen_cpu_us_per_msg": round(per_msg, 2), "load": round(os.getloadavg()[0], 1),
                          **{k: f.get(k) for k in ("sent", "lost", "delivered_per_s", "p50_us", "p99_us",
                                                   "gen_cpu_pct", "broker_cpu_pct", "clock")}})  # fmt: skip
                    time.sleep(0.2)
    print(f"\n{head['cpu']}; medians of {args.reps}; load average now {os.getloadavg()[0]:.1f}")
    print("| scenario | tree | bench CPU µs per message |")
    print("|---|---|---:|")
    for name in names:
        for label, _, _ in trees:
            runs = results.get((name, label), [])
            if runs:
                print(f"| {name} | {label} | {statistics.median(runs):.2f} |")


if __name__ == "__main__":
    main()
