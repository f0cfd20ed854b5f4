"""`mqtt bench` against the C generator `mqttload`, in the same run, against one mosquitto.

    .venv/bin/python benchmarks/bench_accuracy.py [--mqttload PATH | --bench-src DIR] [--count 200000]
                                                  [--reps 1] [--only fanin0,fanin1,lat,conn] [--conns 20000]
    .venv/bin/python benchmarks/bench_accuracy.py --quick     # small counts (make bench-quick)

mqttload is built from its source (--bench-src, default $MQTTLOAD_DIR) in a temporary directory (gcc -O2;
nothing of it is copied into this repository) unless --mqttload names a binary. Without either, only `mqtt
bench`'s figures are measured and printed (the ratios need mqttload). mosquitto runs with benchmarks/_loadgen.py's
settings (no queue or inflight caps, persistence off) on a free port. Scenarios, each tool back to back:

* fanin0 / fanin1: fan-in 1 publisher -> 1 subscriber, QoS 0 / 1, 64 B, --count messages as fast as possible
  (`mqttload thru --fanin`, `mqtt bench pubsub -c 1 --subs 1 -I 0 -L COUNT --workers 2`; window 100 both).
  Goal: our published_per_s >= 0.5x (QoS 0) and >= 0.75x (QoS 1) mqttload's.
* lat: 1,000 msg/s QoS 1 64 B for 5 s (`mqttload lat`, `mqtt bench pubsub --rate 1000 --duration 5`).
  Goal: p50 and p99 within 15 % of mqttload's.
* conn: `mqtt bench conn -c CONNS` held; the resident memory of the bench's processes (parent and workers) minus
  that of the same command with 10 connections, per connection. Goal: <= 10 kB.

Prints one JSON line per measurement and a summary; figures go to docs/PERFORMANCE.md (`mqtt bench`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _loadgen import ENV_C_TOOL, mosquitto_conf  # noqa: E402
from _results import cpu_model  # noqa: E402

from tests.brokers import MOSQUITTO, free_port, wait_for_port  # noqa: E402

BENCH = [sys.executable, "-m", "mqtt_cli", "bench"]


def build_mqttload(src: Path, tmp: Path) -> Path:
    out = tmp / "mqttload"
    subprocess.run(["gcc", "-O2", "-o", str(out), str(src / "mqttload.c")], check=True)
    return out


def start_broker(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    conf = tmp / f"m{port}.conf"
    conf.write_text(mosquitto_conf(port))
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, proc, 10)
    return proc, port


def run_json(cmd: list[str], timeout: float = 300) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{cmd}: no JSON (exit {proc.returncode}): {proc.stderr[-500:]}")
    return json.loads(lines[-1])


def ours(port: int, tmp: Path, *args: str) -> dict[str, Any]:
    out = tmp / "ours.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([*BENCH, *args, "-p", str(port), "-h", "127.0.0.1", "--quiet", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)  # fmt: skip
    if not out.exists():
        raise RuntimeError(f"bench {args}: exit {proc.returncode}: {proc.stderr[-800:]}")
    f = json.loads(out.read_text())
    f.pop("histogram", None)
    return f


def rss_kb(pid: int) -> int:
    """VmRSS of a process and all its descendants."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                children = (task / "children").read_text().split()
                todo += [int(c) for c in children]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def held_rss(port: int, conns: int, workers: int) -> tuple[int, int]:
    """(connected, kB resident) of `bench conn -c conns` once every connection is up."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [*BENCH, "conn", "-c", str(conns), "--workers", str(workers), "--duration", "600", "-p", str(port),
           "-h", "127.0.0.1", "--parallel", "256"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=REPO)
    connected = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            tick = json.loads(line)
            connected = tick["connected"]
            if (tick["connected"] + tick["failed"] >= conns and tick["elapsed"] > 1) or time.monotonic() > deadline:
                break
        time.sleep(1)
        return connected, rss_kb(proc.pid)
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def ratio(ours: dict[str, Any], theirs: dict[str, Any], field: str) -> float | None:
    """Ours over mqttload's figure, or None without mqttload (or without a figure)."""
    if not theirs.get(field) or ours.get(field) is None:
        return None
    return round(float(ours[field]) / float(theirs[field]), 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mqttload")
    ap.add_argument("--bench-src", default=os.environ.get(ENV_C_TOOL), help=f"mqttload's source (${ENV_C_TOOL})")
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--only", default="fanin0,fanin1,lat,conn")
    ap.add_argument("--conns", type=int, default=20_000)
    ap.add_argument("--lat-seconds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2,000 messages, 2 s of latency, 200 connections")
    a = ap.parse_args()
    if a.quick:
        a.count, a.lat_seconds, a.conns = 2_000, 2, 200
    only = set(a.only.split(","))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        mqttload = a.mqttload or (str(build_mqttload(Path(a.bench_src), tmp)) if a.bench_src else None)
        if mqttload is None:
            print(f"no mqttload (--mqttload, --bench-src or {ENV_C_TOOL}): mqtt bench's figures alone, no ratios")
        for rep in range(a.reps):
            for qos in (0, 1):
                if f"fanin{qos}" not in only:
                    continue
                broker, port = start_broker(tmp)
                try:
                    thru = ["thru", "--fanin", "--pubs", "1", "--subs", "1", "--qos", str(qos), "--size", "64"]
                    c = run_json([mqttload, *thru, "--port", str(port), "--count", str(a.count)]) if mqttload else {}
                    o = ours(port, tmp, "pubsub", "-c", "1", "--subs", "1", "-q", str(qos), "-s", "64", "-I", "0",
                             "-L", str(a.count), "--workers", "2")  # fmt: skip
                finally:
                    broker.terminate()
                    broker.wait()
                r = {"test": f"fanin_qos{qos}", "rep": rep,
                     "mqttload": {k: c.get(k) for k in ("sent", "delivered", "lost", "published_per_s",
                                                         "delivered_per_s")},
                     "ours": {k: o.get(k) for k in ("sent", "delivered", "lost", "published_per_s", "delivered_per_s",
                                                    "p50_us", "p99_us")},
                     "ratio_published": ratio(o, c, "published_per_s"),
                     "ratio_delivered": ratio(o, c, "delivered_per_s")}  # fmt: skip
                print(json.dumps(r), flush=True)
                results.append(r)
            if "lat" in only:
                broker, port = start_broker(tmp)
                try:
                    c = run_json([mqttload, "lat", "--port", str(port), "--rate", "1000", "--seconds",
                                  str(a.lat_seconds), "--qos", "1", "--size", "64"]) if mqttload else {}  # fmt: skip
                    o = ours(port, tmp, "pubsub", "-c", "1", "--subs", "1", "-q", "1", "-s", "64", "--rate", "1000",
                             "--duration", str(a.lat_seconds), "--workers", "2")  # fmt: skip
                finally:
                    broker.terminate()
                    broker.wait()
                r = {"test": "lat_qos1_1000", "rep": rep,
                     "mqttload": {k: c.get(k) for k in ("sent", "received", "p50_us", "p90_us", "p99_us", "max_us")},
                     "ours": {k: o.get(k) for k in ("sent", "delivered", "lost", "p50_us", "p90_us", "p99_us",
                                                    "max_us")},
                     "ratio_p50": ratio(o, c, "p50_us"),
                     "ratio_p99": ratio(o, c, "p99_us")}  # fmt: skip
                print(json.dumps(r), flush=True)
                results.append(r)
            if "conn" in only:
                broker, port = start_broker(tmp)
                try:
                    small_n, small = held_rss(port, 10, 2)
                    big_n, big = held_rss(port, a.conns, 2)
                finally:
                    broker.terminate()
                    broker.wait()
                r = {"test": "conn", "rep": rep, "conns": a.conns, "connected": big_n, "rss_kb_10": small,
                     "rss_kb_held": big, "kb_per_conn": round((big - small) / max(1, big_n - small_n), 2)}  # fmt: skip
                print(json.dumps(r), flush=True)
                results.append(r)
    cpu = cpu_model()
    print(json.dumps({"cpu": cpu, "nproc": os.cpu_count(), "mosquitto": shutil.which("mosquitto") or MOSQUITTO}))


if __name__ == "__main__":
    main()
