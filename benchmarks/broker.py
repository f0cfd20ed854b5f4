"""Our broker against Debian's mosquitto, in the same run, under the same load.

    .venv/bin/python benchmarks/broker.py [--reps 3] [--count 200000] [--conns 10000] [--only fanin,fanout,lat,conns]
    .venv/bin/python benchmarks/broker.py --builds [same options]
    .venv/bin/python benchmarks/broker.py --acl [--reps 3] [--count 100000]
    .venv/bin/python benchmarks/broker.py --metrics [--reps 5] [--count 200000]
    .venv/bin/python benchmarks/broker.py --quick          # every test once, briefly (make bench-quick)

The load is `mqtt bench`, or the C generator mqttload when MQTTLOAD_DIR names its source (benchmarks/_loadgen.py).
Both brokers run pinned to CPU 0 (mosquitto with _loadgen.MOSQUITTO_SETTINGS, our `mqtt serve` with the same
limits: --max-queued-messages 0 --max-inflight 0), the generator on CPU 1; _loadgen.matrix interleaves the runs so
every broker sees the same machine. Prints, for each test of --only (fan-in and fan-out at QoS 0/1/2, 64 B and
1 KiB; p99 latency at 1,000 msg/s; kB per idle connection), the medians and our figure as a ratio of mosquitto's
with issue #20's goal (marked * when met), the most messages any run lost (the goal is 0), and each broker's CPU
time per delivered message (the steadier figure on a loaded machine: the rate follows how much of CPU 0 each
broker gets); writes the raw JSON lines to benchmarks/results/broker-DATE.jsonl.

--builds: the same matrix for mosquitto and our broker twice, pure Python (MQTT_CLI_PURE=1) and the compiled
build (`make install`'s mypyc build must be there), interleaved; prints both builds' ratios to mosquitto.

--metrics: fan-in QoS 0, 64 B, our broker with the metrics endpoint on and scraped every second (GET /metrics
with Prometheus's Accept header, from this process) against the same broker with it off, runs interleaved; the
issue's target is a ratio of at least 0.98.

--acl: fan-in (1 publisher to 1 subscriber on bench/#) and fan-out (1 publisher to 10 subscribers), QoS 1, 64 B,
each broker with an ACL of 1,000 `pattern` lines (999 that match nothing the load generator publishes, and
`pattern readwrite bench/#` last, so every check goes through them all in mosquitto's list) and the same broker
without one: four brokers, runs interleaved (not the whole matrix, which runs every QoS).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _against import AgainstError, prepare
from _loadgen import MOSQUITTO, MOSQUITTO_SETTINGS, LoadGen, matrix, mosquitto_conf, pin
from _results import results_dir

ROOT = Path(__file__).resolve().parent.parent

# Issue #20's goals: (test key) -> (unit, goal ratio ours/mosquitto, higher is better). Every fan-in and fan-out
# row at least mosquitto's rate (fan-out QoS 0 1.5x), p99 latency at 1,000 msg/s QoS 1 at most 1.5x; idle
# connections at most CONNS_KB each (absolute); nothing lost.
TARGETS = {
    **{("fanin", qos, size): ("rate", 1.0, True) for qos in (0, 1, 2) for size in (64, 1024)},
    ("fanout", 0, 64): ("rate", 1.5, True),
    ("fanout", 1, 64): ("rate", 1.0, True),
    ("lat", 1, 64): ("p99", 1.5, False),
}
CONNS_KB = 5.0


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
        cpu, delivered = r.get("broker_cpu_s"), r.get("delivered", r.get("received"))  # thru, lat
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
    """1,000 pattern lines binding the client id, the one granting what the load generator publishes last."""
    # The load generators send no user name, and patterns with %u do not apply to such clients: %c only.
    lines = [f"pattern {('readwrite', 'read', 'write')[i % 3]} tenants/%c/device{i}/#" for i in range(999)]
    lines.append("pattern readwrite bench/#")
    assert len(lines) == ACL_PATTERNS
    path.write_text("\n".join(lines) + "\n")
    return path


def acl_mode(args: argparse.Namespace, work: Path, load: LoadGen) -> int:
    """Ours and mosquitto, each with and without the ACL; prints medians and the cost of the ACL for each."""
    import socket

    acl = acl_file(work / "acl")
    base = MOSQUITTO_SETTINGS
    if os.geteuid() == 0:
        base += "user root\n"  # else mosquitto becomes user mosquitto, who cannot read the ACL in our directory
    targets = {}
    for label, port, with_acl in [
        ("mosquitto", 18870, False), ("mosquitto+acl", 18871, True), ("ours", 18872, False), ("ours+acl", 18873, True)
    ]:  # fmt: skip
        if label.startswith("mosquitto"):
            conf = work / f"{label}.conf"
            conf.write_text(f"listener {port} 127.0.0.1\n{base}" + (f"acl_file {acl}\n" if with_acl else ""))
            cmd = [*pin(0), MOSQUITTO, "-c", str(conf)]
        else:
            cmd = [
                *pin(0),
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
        loads = {"fanin": 1, "fanout": 10}  # subscribers of the one publisher
        labels = list(targets)
        for rep_no in range(args.reps):
            for test, subs in loads.items():
                for k in range(len(labels)):
                    label = labels[(k + rep_no) % len(labels)]  # the order rotates each rep, as matrix() does
                    port = targets[label][0]
                    row = load.thru(port, pattern=test, pubs=1, subs=subs, qos=1, size=64, count=args.count,
                                    broker_pid=procs[label].pid)  # fmt: skip
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
    out_path = results_dir() / f"{name}-{time.strftime('%Y-%m-%d')}.jsonl"
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


def metrics_mode(args: argparse.Namespace, load: LoadGen) -> int:
    """Fan-in QoS 0 with the metrics endpoint on (scraped every second) and off; prints medians and the ratio."""
    import threading
    import urllib.request

    metrics_port = 18876
    serve = [
        *pin(0), sys.executable, "-m", "mqtt_cli", "serve", "--max-queued-messages", "0",
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
                row = load.thru(port, pattern="fanin", pubs=1, subs=1, qos=0, size=64, count=args.count,
                                broker_pid=procs[label].pid)  # fmt: skip
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


def builds_mode(args: argparse.Namespace, work: Path, load: LoadGen) -> int:
    """The whole matrix (--only) for mosquitto and our broker twice, pure Python (MQTT_CLI_PURE=1) and compiled
    (make install's mypyc build), interleaved; prints each build against mosquitto."""
    sys.path.insert(0, str(ROOT))
    from mqtt_cli import buildmode

    if not Path(buildmode.STAMP).exists():
        print("benchmarks/broker.py --builds: no compiled build (make install with a C compiler)", file=sys.stderr)
        return 2
    # The environment picks the build: the compiled one only runs when MQTT_CLI_PURE is not set at all.
    plain = {k: v for k, v in LoadGen.env().items() if k != buildmode.ENV_PURE}
    targets = {
        "mosquitto": (18877, mosquitto_command(work, 18877)),
        "pure": (18878, serve_command(18878)),
        "compiled": (18879, serve_command(18879)),
    }
    env = {"pure": {**plain, buildmode.ENV_PURE: "1"}, "compiled": plain}
    return matrix_mode(args, work, load, targets, "broker-builds", env)


def against_mode(args: argparse.Namespace, work: Path, load: LoadGen) -> int:
    """The matrix (--only) for this checkout's broker and REF's (benchmarks/_against.py: archived into the work
    directory, compiled there when this checkout runs compiled), in rotating order, with the
    same load generator; prints this checkout's medians as a ratio of REF's (rates: higher is better; p99 and CPU
    per message: lower is better)."""
    try:
        tree = prepare(args.against, work / "against")
    except AgainstError as e:
        print(f"benchmarks/broker.py --against: {e}", file=sys.stderr)
        return 2
    env = LoadGen.env()
    targets = {args.against: (18880, serve_command(18880)), "this": (18881, serve_command(18881))}
    rows = matrix(load, targets, reps=args.reps, only=args.only.split(","), count=args.count, conns=args.conns,
                  out=work / "results.jsonl", lat_seconds=args.lat_seconds,
                  env={args.against: {**env, "PYTHONPATH": str(tree)}, "this": env})  # fmt: skip
    out_path = save_rows("broker-against", rows)
    groups: dict[tuple[object, ...], dict[str, list[dict[str, object]]]] = {}
    for row in rows:
        groups.setdefault(key(row), {}).setdefault(str(row["label"]), []).append(row)
    print(f"{'test':<26}{args.against[:12]:>12}{'this':>12}{'this/ref':>10}  CPU us/msg ref, this")
    for k in sorted(groups, key=_order):
        by = groups[k]
        field = "p99_us" if k[0] == "lat" else "delivered_per_s"
        if k[0] == "conns":
            ref, this = kb_per_conn(by.get(args.against, [])), kb_per_conn(by.get("this", []))
        else:
            ref, this = median(by.get(args.against, []), field), median(by.get("this", []), field)
        cpu = [cpu_per_message(by.get(lb, [])) for lb in targets] if k[0] != "conns" else []
        print(f"{test_label(k):<26}{ref:>12,.1f}{this:>12,.1f}{this / ref if ref else math.nan:>10.3f}  "
              + ", ".join(f"{c:.2f}" for c in cpu))  # fmt: skip
    print(f"load: {load.name}; load average {os.getloadavg()[0]:.2f} at the end; raw results: {out_path}")
    return 0


def mosquitto_command(work: Path, port: int) -> list[str]:
    conf = work / f"mosquitto-{port}.conf"
    conf.write_text(mosquitto_conf(port))
    return [*pin(0), MOSQUITTO, "-c", str(conf)]


def serve_command(port: int) -> list[str]:
    """Our broker with mosquitto's limits (start it with LoadGen.env(): this checkout first on the path, or with
    PYTHONPATH naming another tree). -P: `-m` would otherwise put the working directory (this checkout) first on
    the path, before PYTHONPATH, and run this checkout's broker whatever PYTHONPATH says."""
    return [*pin(0), sys.executable, "-P", "-m", "mqtt_cli", "serve", "--port", str(port), "--max-queued-messages", "0",
            "--max-inflight", "0", "--sys-interval", "0"]  # fmt: skip


def matrix_mode(
    args: argparse.Namespace,
    work: Path,
    load: LoadGen,
    targets: dict[str, tuple[int, list[str]]],
    name: str,
    env: dict[str, dict[str, str]] | None = None,
) -> int:
    """Runs the matrix on `targets` (label -> port, command; mosquitto first) and prints the table of goals."""
    rows = matrix(load, targets, reps=args.reps, only=args.only.split(","), count=args.count, conns=args.conns,
                  out=work / "results.jsonl", lat_seconds=args.lat_seconds,
                  env=env or {label: LoadGen.env() for label in targets})  # fmt: skip
    out_path = save_rows(name, rows)
    print_goals(rows, list(targets))
    print(f"load: {load.name}; load average {os.getloadavg()[0]:.2f} at the end; raw results: {out_path}")
    return 0


def test_label(k: tuple[object, ...]) -> str:
    if k[0] == "conns":
        return f"idle conns {k[1]} kB each"
    if k[0] == "lat":
        return f"lat 1000/s QoS{k[1]} p99 us"
    return f"{k[0]} QoS{k[1]} {k[2]} B /s"


def print_goals(rows: list[dict[str, object]], labels: list[str]) -> None:
    """One line per test: the medians of every target, each of ours as a ratio of mosquitto's (the first label)
    with the issue's goal and whether it is met, the most lost in any run, and the broker CPU per message."""
    base, ours = labels[0], labels[1:]
    groups: dict[tuple[object, ...], dict[str, list[dict[str, object]]]] = {}
    for row in rows:
        groups.setdefault(key(row), {}).setdefault(str(row["label"]), []).append(row)
    head = f"{'test':<26}" + "".join(f"{lb:>12}" for lb in labels)
    head += "".join(f"{lb + '/' + base[:4]:>15}" for lb in ours) + f"{'goal':>8}  lost  CPU us/msg " + " ".join(labels)
    print(head)
    met = total = 0
    for k in sorted(groups, key=_order):
        by = groups[k]
        if k[0] == "conns":
            values = [kb_per_conn(by.get(lb, [])) for lb in labels]
            goal: tuple[str, float, bool] | None = ("kB", CONNS_KB, False)
        else:
            field = "p99_us" if k[0] == "lat" else "delivered_per_s"
            values = [median(by.get(lb, []), field) for lb in labels]
            goal = TARGETS.get(k)
        line = f"{test_label(k):<26}" + "".join(f"{v:>12,.{2 if k[0] == 'conns' else 0}f}" for v in values)
        marks = []
        for v in values[1:]:
            if k[0] == "conns":  # an absolute goal: kB per connection
                ok = goal is not None and v <= goal[1]
                line += f"{v / values[0] if values[0] else math.nan:>14.2f}" + ("*" if ok else " ")
            else:
                ratio = v / values[0] if values[0] else math.nan
                ok = goal is not None and (ratio >= goal[1] if goal[2] else ratio <= goal[1])
                line += f"{ratio:>14.2f}" + ("*" if ok and goal is not None else " ")
            marks.append(ok)
        if goal is None:
            line += f"{'':>8}"
        else:
            total += len(marks)
            met += sum(marks)
            unit = " kB" if goal[0] == "kB" else ""
            line += f"{('>=' if goal[2] else '<=') + format(goal[1], 'g') + unit:>8}"
        lost = max([int(r.get("lost", 0) or 0) for lb in ours for r in by.get(lb, [])] or [0])  # type: ignore[call-overload]
        line += f"  {lost:<5}"
        if k[0] != "conns":  # the broker's CPU time per delivery: steadier than a rate on a loaded machine
            line += " ".join(f"{cpu_per_message(by.get(lb, [])):.2f}" for lb in labels)
        print(line)
    print(f"goals met (*): {met} of {total} (ours/mosquitto ratios; kB per idle connection absolute; lost must be 0)")


def _order(k: tuple[object, ...]) -> tuple[int, int, int]:
    kind = {"fanin": 0, "fanout": 1, "lat": 2, "conns": 3}.get(str(k[0]), 4)
    return (kind, int(k[2] or 0) if kind < 3 else 0, int(k[1] or 0))  # type: ignore[call-overload]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--conns", type=int, default=10_000)
    parser.add_argument("--only", default="fanin,fanout,lat,conns")
    parser.add_argument("--acl", action="store_true", help="QoS 1 fan-in/fan-out with 1,000 ACL patterns vs none")
    parser.add_argument("--metrics", action="store_true", help="fan-in QoS 0 with the metrics endpoint scraped vs off")
    parser.add_argument("--builds", action="store_true", help="the matrix for mosquitto, our pure and compiled builds")
    parser.add_argument("--against", metavar="REF", help="this checkout's broker against REF's (a commit or branch)")
    parser.add_argument("--lat-seconds", type=float, default=10, help="seconds of each latency run")
    parser.add_argument("--quick", action="store_true", help="every test once, briefly (reps 1, 2,000 messages)")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.count, args.conns, args.lat_seconds = 1, 2_000, 200, 2
    unknown = set(args.only.split(",")) - {"fanin", "fanout", "lat", "conns"}
    if unknown:
        parser.error(f"--only: unknown test {sorted(unknown)[0]!r} (fanin, fanout, lat, conns)")
    work = Path(tempfile.mkdtemp(prefix="mqtt-bench-"))
    load = LoadGen(work)
    if args.acl:
        return acl_mode(args, work, load)
    if args.metrics:
        return metrics_mode(args, load)
    if args.builds:
        return builds_mode(args, work, load)
    if args.against:
        return against_mode(args, work, load)
    targets = {"mosquitto": (18860, mosquitto_command(work, 18860)), "ours": (18861, serve_command(18861))}
    return matrix_mode(args, work, load, targets, "broker")


if __name__ == "__main__":
    raise SystemExit(main())
