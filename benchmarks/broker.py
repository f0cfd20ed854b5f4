"""Our broker against Debian's mosquitto, in the same run, with the neutral C load generator of ../shared/bench.

    .venv/bin/python benchmarks/broker.py [--reps 3] [--count 200000] [--conns 10000] [--only fanin,fanout,lat,conns]
    .venv/bin/python benchmarks/broker.py --acl [--reps 3] [--count 100000]
    .venv/bin/python benchmarks/broker.py --metrics [--reps 5] [--count 200000]
    .venv/bin/python benchmarks/broker.py --builds [--qos 0,1] [--reps 3] [--count 200000]

--builds: fan-in, 64 B, mosquitto against our broker twice, pure Python (MQTT_CLI_PURE=1) and the compiled build
(`make install`'s mypyc build must be there), runs interleaved; prints compiled/pure and both against mosquitto.

--metrics: fan-in QoS 0, 64 B, our broker with the metrics endpoint on and scraped every second (GET /metrics
with Prometheus's Accept header, from this process) against the same broker with it off, runs interleaved; the
issue's target is a ratio of at least 0.98.

--acl: fan-in (1 publisher to 1 subscriber on bench/#) and fan-out (1 publisher to 10 subscribers), QoS 1, 64 B,
each broker with an ACL of 1,000 `pattern` lines (999 that match nothing the load generator publishes, and
`pattern readwrite bench/#` last, so every check goes through them all in mosquitto's list) and the same broker
without one: four brokers, runs interleaved, mqttload driven directly (not matrix.sh, which runs every QoS).

Both brokers run pinned to CPU 0 (mosquitto with ../shared/bench/mosquitto.conf, our `mqtt serve` with the same
limits: --max-queued-messages 0 --max-inflight 0), the generator on CPU 1; `matrix.sh` interleaves the runs so
both see the same machine. Prints, for each test, the medians and our figure as a ratio of mosquitto's, with the
issue's target, and the broker's CPU time per delivered message (the steadier figure on a loaded machine: the
rate follows how much of CPU 0 each broker gets); writes the raw JSON lines to benchmarks/results/broker-DATE.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(os.environ.get("MQTT_BENCH_DIR", ROOT.parent / "shared" / "bench"))  # set it from a git worktree
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"

# (test key) -> (figure, target ratio ours/mosquitto, higher is better)
TARGETS = {
    ("fanin", 0, 64): ("delivered_per_s", 0.5, True),
    ("fanin", 1, 64): ("delivered_per_s", 0.75, True),
    ("fanin", 2, 64): ("delivered_per_s", 0.75, True),
    ("fanout", 0, 64): ("delivered_per_s", 0.5, True),
    ("fanout", 1, 64): ("delivered_per_s", 0.5, True),
    ("lat", 1, 64): ("p99_us", 2.0, False),
}


def key(row: dict[str, object]) -> tuple[object, ...]:
    if row.get("mode") == "thru":
        return (row["pattern"], row["qos"], row["size"])
    if row.get("mode") == "lat":
        return ("lat", row["qos"], row["size"])
    return ("conns", row.get("count"), None)


def median(rows: list[dict[str, object]], field: str) -> float:
    values = [float(r[field]) for r in rows if isinstance(r.get(field), int | float)]  # type: ignore[arg-type]
    return statistics.median(values) if values else float("nan")


def cpu_per_message(rows: list[dict[str, object]]) -> float:
    """Median of the broker's CPU time (user + system, as mqttload reads it) per delivered message, in µs."""
    values = []
    for r in rows:
        cpu, delivered = r.get("broker_cpu_s"), r.get("delivered")
        if isinstance(cpu, int | float) and isinstance(delivered, int) and delivered:
            values.append(1e6 * cpu / delivered)
    return statistics.median(values) if values else float("nan")


def kb_per_conn(rows: list[dict[str, object]]) -> float:
    values = []
    for r in rows:
        held, before, n = r.get("rss_held_kb"), r.get("rss_before_kb"), r.get("connected")
        if isinstance(held, int | float) and isinstance(before, int | float) and n:
            values.append((held - before) / float(n))  # type: ignore[arg-type]
    return statistics.median(values) if values else float("nan")


ACL_PATTERNS = 1000


def acl_file(path: Path) -> Path:
    """1,000 pattern lines binding the client id, the one granting what mqttload publishes last."""
    # mqttload sends no user name, and patterns with %u do not apply to such clients: %c only.
    lines = [f"pattern {('readwrite', 'read', 'write')[i % 3]} tenants/%c/device{i}/#" for i in range(999)]
    lines.append("pattern readwrite bench/#")
    assert len(lines) == ACL_PATTERNS
    path.write_text("\n".join(lines) + "\n")
    return path


def acl_mode(args: argparse.Namespace, work: Path) -> int:
    """Ours and mosquitto, each with and without the ACL; prints medians and the cost of the ACL for each."""
    import socket

    acl = acl_file(work / "acl")
    base = (BENCH / "mosquitto.conf").read_text()
    if os.geteuid() == 0:
        base += "user root\n"  # else mosquitto becomes user mosquitto, who cannot read the ACL in our directory
    targets = {}
    for label, port, with_acl in [
        ("mosquitto", 18870, False), ("mosquitto+acl", 18871, True), ("ours", 18872, False), ("ours+acl", 18873, True)
    ]:  # fmt: skip
        if label.startswith("mosquitto"):
            conf = work / f"{label}.conf"
            conf.write_text(
                base.replace("listener 1883", f"listener {port}") + (f"acl_file {acl}\n" if with_acl else "")
            )
            cmd = ["taskset", "-c", "0", MOSQUITTO, "-c", str(conf)]
        else:
            cmd = [
                "taskset",
                "-c",
                "0",
                sys.executable,
                "-m",
                "mqtt_cli",
                "serve",
                "--port",
                str(port),
                "--max-queued-messages",
                "0",
                "--max-inflight",
                "0",
                "--sys-interval",
                "0",
                "--allow-anonymous",
            ]
            cmd += ["--acl-file", str(acl)] if with_acl else []  # fmt: skip
        targets[label] = (port, cmd)
    procs = {}
    rows: list[dict[str, object]] = []
    try:
        for label, (port, cmd) in targets.items():
            procs[label] = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or procs[label].poll() is not None:
                        raise SystemExit(f"benchmarks/broker.py: {label} did not start") from None
                    time.sleep(0.1)
        loads = {
            "fanin": ["--fanin", "--pubs", "1", "--subs", "1"],
            "fanout": ["--fanout", "--pubs", "1", "--subs", "10"],
        }
        labels = list(targets)
        for rep_no in range(args.reps):
            for test, shape in loads.items():
                for k in range(len(labels)):
                    label = labels[(k + rep_no) % len(labels)]  # the order rotates each rep, as matrix.sh does
                    port = targets[label][0]
                    cmd = ["taskset", "-c", "1", str(work / "bench" / "mqttload"), "thru", *shape, "--qos", "1",
                           "--size", "64", "--count", str(args.count), "--timeout", "300", "--port", str(port),
                           "--broker-pid", str(procs[label].pid)]  # fmt: skip
                    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
                    row = json.loads(out.splitlines()[-1]) if out else {"error": "no output"}
                    row.update(
                        label=label, rep=rep_no + 1, test=test, acl_patterns=ACL_PATTERNS if "acl" in label else 0
                    )
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    finally:
        stop_brokers(procs)
    out_path = save_rows("broker-acl", rows)
    print(f"{'QoS 1, 64 B':<14}{'mosquitto':>12}{'+ACL':>12}{'ratio':>7}{'ours':>12}{'+ACL':>12}{'ratio':>7}"
          f"{'ours+ACL/mosq+ACL':>19}")  # fmt: skip
    for test in loads:
        med = {
            lb: median([r for r in rows if r["test"] == test and r["label"] == lb], "delivered_per_s") for lb in labels
        }
        m, ma, o, oa = med["mosquitto"], med["mosquitto+acl"], med["ours"], med["ours+acl"]
        print(f"{test:<14}{m:>12,.0f}{ma:>12,.0f}{ma / m:>7.2f}{o:>12,.0f}{oa:>12,.0f}{oa / o:>7.2f}{oa / ma:>19.2f}")
    lost = [r for r in rows if r.get("lost") or r.get("error")]
    print(f"runs with losses or errors: {len(lost)}; raw results: {out_path}")
    return 0


def stop_brokers(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM every broker still running, and wait for it."""
    for proc in procs.values():
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(10)


def save_rows(name: str, rows: list[dict[str, object]]) -> Path:
    """Appends the raw rows to benchmarks/results/NAME-DATE.jsonl (kept with the figures they gave)."""
    out_path = ROOT / "benchmarks" / "results" / f"{name}-{time.strftime('%Y-%m-%d')}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return out_path


def start_broker(label: str, port: int, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    import socket

    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"benchmarks/broker.py: {label} did not start") from None
            time.sleep(0.1)


def metrics_mode(args: argparse.Namespace, work: Path) -> int:
    """Fan-in QoS 0 with the metrics endpoint on (scraped every second) and off; prints medians and the ratio."""
    import threading
    import urllib.request

    metrics_port = 18876
    serve = [
        "taskset", "-c", "0", sys.executable, "-m", "mqtt_cli", "serve", "--max-queued-messages", "0",
        "--max-inflight", "0", "--sys-interval", "0",
    ]  # fmt: skip
    targets = {
        "metrics off": (18874, [*serve, "--port", "18874"]),
        "metrics on": (18875, [*serve, "--port", "18875", "--metrics-listen", f"127.0.0.1:{metrics_port}"]),
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    rows: list[dict[str, object]] = []
    stop = threading.Event()
    scrapes = [0]

    def scrape() -> None:
        accept = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"}
        while not stop.wait(1.0):
            request = urllib.request.Request(f"http://127.0.0.1:{metrics_port}/metrics", headers=accept)
            with urllib.request.urlopen(request, timeout=5) as answer:
                answer.read()
            scrapes[0] += 1

    scraper = threading.Thread(target=scrape, daemon=True)
    try:
        for label, (port, cmd) in targets.items():
            procs[label] = start_broker(label, port, cmd)
        scraper.start()
        labels = list(targets)
        for rep_no in range(args.reps):
            for k in range(len(labels)):
                label = labels[(k + rep_no) % len(labels)]
                port = targets[label][0]
                cmd = ["taskset", "-c", "1", str(work / "bench" / "mqttload"), "thru", "--fanin", "--pubs", "1",
                       "--subs", "1", "--qos", "0", "--size", "64", "--count", str(args.count), "--timeout", "300",
                       "--port", str(port), "--broker-pid", str(procs[label].pid)]  # fmt: skip
                out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
                row = json.loads(out.splitlines()[-1]) if out else {"error": "no output"}
                row.update(label=label, rep=rep_no + 1, test="fanin-qos0-metrics")
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    finally:
        stop.set()
        stop_brokers(procs)
    out_path = save_rows("broker-metrics", rows)
    med = {lb: median([r for r in rows if r["label"] == lb], "delivered_per_s") for lb in targets}
    off, on = med["metrics off"], med["metrics on"]
    print(f"fan-in QoS 0, 64 B: metrics off {off:,.0f}/s, on (scraped every 1 s, {scrapes[0]} scrapes) {on:,.0f}/s, "
          f"ratio {on / off:.3f} (target >= 0.98)")  # fmt: skip
    print(f"raw results: {out_path}")
    return 0


def builds_mode(args: argparse.Namespace, work: Path) -> int:
    """Fan-in, 64 B, at each QoS of --qos: mosquitto, our broker as pure Python (MQTT_CLI_PURE=1) and compiled
    (make install's mypyc build), runs interleaved; prints medians, compiled/pure and each against mosquitto."""

    sys.path.insert(0, str(ROOT))
    from mqtt_cli import buildmode

    if not Path(buildmode.STAMP).exists():
        print("benchmarks/broker.py --builds: no compiled build (make install with a C compiler)", file=sys.stderr)
        return 2
    serve = [
        "taskset", "-c", "0", sys.executable, "-m", "mqtt_cli", "serve", "--max-queued-messages", "0",
        "--max-inflight", "0", "--sys-interval", "0",
    ]  # fmt: skip
    conf = work / "mosquitto.conf"
    conf.write_text((BENCH / "mosquitto.conf").read_text().replace("listener 1883", "listener 18877"))
    pure_env = {**os.environ, buildmode.ENV_PURE: "1"}
    compiled_env = {k: v for k, v in os.environ.items() if k != buildmode.ENV_PURE}
    targets = {
        "mosquitto": (18877, ["taskset", "-c", "0", MOSQUITTO, "-c", str(conf)], None),
        "pure": (18878, [*serve, "--port", "18878"], pure_env),
        "compiled": (18879, [*serve, "--port", "18879"], compiled_env),
    }
    qos_levels = [int(q) for q in args.qos.split(",")]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    rows: list[dict[str, object]] = []
    try:
        for label, (port, cmd, env) in targets.items():
            procs[label] = start_broker(label, port, cmd, env)
        labels = list(targets)
        for rep_no in range(args.reps):
            for qos in qos_levels:
                for k in range(len(labels)):
                    label = labels[(k + rep_no) % len(labels)]  # the order rotates each rep
                    port = targets[label][0]
                    cmd = ["taskset", "-c", "1", str(work / "bench" / "mqttload"), "thru", "--fanin", "--pubs", "1",
                           "--subs", "1", "--qos", str(qos), "--size", "64", "--count", str(args.count),
                           "--timeout", "300", "--port", str(port), "--broker-pid", str(procs[label].pid)]  # fmt: skip
                    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
                    row = json.loads(out.splitlines()[-1]) if out else {"error": "no output"}
                    row.update(label=label, rep=rep_no + 1, test=f"fanin-qos{qos}-builds")
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    finally:
        stop_brokers(procs)
    out_path = save_rows("broker-builds", rows)
    print(f"{'fan-in 64 B':<14}{'mosquitto':>12}{'pure':>12}{'compiled':>12}{'compiled/pure':>15}"
          f"{'pure/mosq':>11}{'compiled/mosq':>15}")  # fmt: skip
    for qos in qos_levels:
        test = f"fanin-qos{qos}-builds"
        ran = [r for r in rows if r["test"] == test]
        med = {lb: median([r for r in ran if r["label"] == lb], "delivered_per_s") for lb in targets}
        m, p, c = med["mosquitto"], med["pure"], med["compiled"]
        print(f"{'QoS ' + str(qos):<14}{m:>12,.0f}{p:>12,.0f}{c:>12,.0f}{c / p:>15.2f}{p / m:>11.2f}{c / m:>15.2f}")
    lost = [r for r in rows if r.get("lost") or r.get("error")]
    print(f"runs with losses or errors: {len(lost)}; raw results: {out_path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--conns", type=int, default=10_000)
    parser.add_argument("--only", default="fanin,fanout,lat,conns")
    parser.add_argument("--acl", action="store_true", help="QoS 1 fan-in/fan-out with 1,000 ACL patterns vs none")
    parser.add_argument("--metrics", action="store_true", help="fan-in QoS 0 with the metrics endpoint scraped vs off")
    parser.add_argument("--builds", action="store_true", help="fan-in: mosquitto, our pure and our compiled build")
    parser.add_argument("--qos", default="0", help="--builds: the QoS levels to run (comma-separated)")
    args = parser.parse_args()
    if not (BENCH / "matrix.sh").exists():
        print(f"benchmarks/broker.py: {BENCH} is missing (the shared load generator)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="mqtt-bench-"))
    shutil.copytree(BENCH, work / "bench")
    subprocess.run(["make", "-s", "-C", str(work / "bench"), "mqttload"], check=True)
    if args.acl:
        return acl_mode(args, work)
    if args.metrics:
        return metrics_mode(args, work)
    if args.builds:
        return builds_mode(args, work)
    conf = work / "mosquitto.conf"
    conf.write_text((BENCH / "mosquitto.conf").read_text().replace("listener 1883", "listener 18860"))
    ours = (
        f"taskset -c 0 {sys.executable} -m mqtt_cli serve --port 18861 "
        "--max-queued-messages 0 --max-inflight 0 --sys-interval 0"
    )
    out = ROOT / "benchmarks" / "results" / f"broker-{time.strftime('%Y-%m-%d')}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = work / "results.jsonl"
    cmd = [
        "bash", str(work / "bench" / "matrix.sh"),
        "--target", f"mosquitto:18860:taskset -c 0 {MOSQUITTO} -c {conf}",
        "--target", f"ours:18861:{ours}",
        "--reps", str(args.reps), "--only", args.only, "--count", str(args.count), "--conns", str(args.conns),
        "--out", str(raw),
    ]  # fmt: skip
    subprocess.run(cmd, check=False, cwd=ROOT, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    with out.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    groups: dict[tuple[object, ...], dict[str, list[dict[str, object]]]] = {}
    for row in rows:
        groups.setdefault(key(row), {}).setdefault(str(row["label"]), []).append(row)
    print(f"{'test':<24}{'mosquitto':>14}{'ours':>14}{'ratio':>8}{'target':>9}  lost"
          f"{'CPU us/msg mosq':>17}{'ours':>7}{'ratio':>7}")  # fmt: skip
    for k, by in groups.items():
        m, o = by.get("mosquitto", []), by.get("ours", [])
        if k[0] == "conns":
            mk, ok = kb_per_conn(m), kb_per_conn(o)
            print(f"{'conns ' + str(k[1]):<24}{mk:>11.2f} kB{ok:>11.2f} kB{ok / mk:>8.2f}{'<=10 kB':>9}")
            continue
        field, target, higher = TARGETS.get(k, ("delivered_per_s" if k[0] != "lat" else "p99_us", None, k[0] != "lat"))
        mv, ov = median(m, field), median(o, field)
        ratio = ov / mv if mv else float("nan")
        lost = max([int(r.get("lost", 0)) for r in o] or [0])  # type: ignore[call-overload]
        goal = "" if target is None else (f">={target}" if higher else f"<={target}")
        label = f"{k[0]} QoS{k[1]} {k[2]}B" + (" p99" if k[0] == "lat" else "")
        cpu = ""
        if k[0] != "lat":  # the broker's CPU time per delivery: steadier than the rate on a loaded machine
            mc, oc = cpu_per_message(m), cpu_per_message(o)
            cpu = f"{mc:>17.2f}{oc:>7.2f}{mc / oc if oc else float('nan'):>7.2f}"
        print(f"{label:<24}{mv:>14,.0f}{ov:>14,.0f}{ratio:>8.2f}{goal:>9}  {lost:<4}{cpu}")
    print(f"raw results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
