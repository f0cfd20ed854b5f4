"""`mqtt bridge` against mosquitto's built-in bridge, in the same run: forwarding rate between two mosquittos.

    .venv/bin/python benchmarks/bridge.py [--reps 3] [--count 100000] [--size 64] [--qos 0,1] [--idle 3]
                                          [--modes flood,backlog,embedded] [--protocol 311|5] [--profile-ours DIR]

Each measurement starts two fresh Debian mosquittos on 127.0.0.1 (free ports, their own config files in a
temporary directory; benchmarks/_loadgen.py's settings: no queue or inflight caps, persistence off):

* "mosquitto": the first (local) broker's config has a `connection` section bridging to the second (remote)
  with `topic bench/# out QOS`, `cleansession false` (a persistent bridge, like ours), otherwise mosquitto's
  defaults (try_private true: the bridge flag on 3.1.1; notifications on);
* "ours": both brokers plain, and `python -m mqtt_cli bridge --local ... --remote ... -t 'bench/# out QOS'`
  between them (its defaults: persistent sessions on both sides, QoS 2 journal in a temporary --state-dir).

Both bridges speak the same MQTT version on both sides: --protocol 311 (the default; mosquitto's bridge default,
the bridge flag on both) or 5 (`bridge_protocol_version mqttv50`; ours with no-local).

`mosquitto_sub -q QOS -F '%U %p'` on the remote broker (subscribed to bench/# before anything is sent) records
every arrival with its time; once a probe message has crossed the bridge, `mosquitto_pub -l -q QOS -M 100`
publishes COUNT messages of SIZE bytes (each carrying its sequence number) into the local broker on bench/0;
its standard input stays open until the subscriber has everything or has seen nothing new for --idle seconds
(mosquitto_pub -l disconnects at end of input with QoS 1 messages still in flight). Two modes (--modes):

* flood: the bridges forward while the publisher publishes. The publisher's own pace bounds this one: its
  window of 100 unacknowledged messages waits on a local broker that shares 2 cores with four other processes.
  (Measured 2026-11-23: the same flood with mosquitto_sub on the local broker and no bridge at all arrives at
  0.87x the rate through mosquitto's bridge; a 60-line Python relay using half our bridge's CPU scores 0.98-1.01.)
* backlog (QoS 1 only): the remote broker is stopped (SIGSTOP) before the publisher starts and let go
  (SIGCONT) once a subscriber on the local broker has seen all COUNT messages: the bridge then forwards a
  backlog of COUNT messages, held by the local broker, the bridge and the sockets between, with no publisher
  running. This is the forwarding rate itself. (QoS 0 is left out: both bridges bound what they keep for a
  side that does not read, and drop the rest by design.)

* embedded: the flood, with our broker (`mqtt serve`, [[bridge]] `bench/# out QOS` to the remote mosquitto,
  the same persistent session, protocol version and restart timeout as mosquitto's `connection`; no queue or
  in-flight caps, as the bench's mosquitto.conf) as the local broker, against mosquitto with its bridge. No
  third process: this is the comparison issue #19 asks for (goal >= 1.0x at QoS 0 and 1). The CPU column is
  then the whole local broker's.

Rate = distinct messages received at the remote / (last arrival - first arrival) (duplicates are counted
apart); lost = COUNT - distinct sequence numbers received. A run ends when COUNT messages (duplicates included)
have arrived, after --idle seconds without arrivals, or --timeout seconds after the flood started (backlog: after
the remote was let go).

Nothing is pinned: with two brokers, a bridge and two clients on a 2-core machine, any pinning would decide
the result; both bridges see the same scheduler. Within each repetition the two bridges run back to back, the
order alternating. Prints medians and ours / mosquitto; appends raw JSON lines to
benchmarks/results/bridge-DATE.jsonl and the summary to benchmarks/results/bridge-DATE.txt.

`--profile-ours DIR`: one extra run of our bridge per QoS with py-spy attached to it (`pip install py-spy` into
the venv; attaching needs ptrace rights), writing DIR/ours-qosQ.raw (py-spy's collapsed stacks) and
DIR/ours-qosQ.txt (the functions with the most own and total time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _loadgen import MOSQUITTO, MOSQUITTO_SETTINGS
from _results import results_dir

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
EXTRA_OURS: list[str] = ["--quiet", *os.environ.get("BRIDGE_BENCH_ARGS", "").split()]
TARGETS = {0: 0.5, 1: 1.0}  # ours / mosquitto, issue #6
TARGETS_EMBEDDED = {0: 1.0, 1: 1.0}  # our broker with an embedded bridge / mosquitto with its bridge, issue #19


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {port}")


PROTOCOL = "311"  # --protocol: the MQTT version both bridges speak on both sides
MAX_INFLIGHT: int | None = None  # --max-inflight: the brokers' max_inflight_messages instead of the bench's 0


def base_conf() -> str:
    lines = MOSQUITTO_SETTINGS.splitlines()
    if MAX_INFLIGHT is not None:
        lines = [ln for ln in lines if not ln.startswith("max_inflight_messages")]
        lines.append(f"max_inflight_messages {MAX_INFLIGHT}")
    if os.geteuid() == 0:
        lines.append("user root")
    return "\n".join(lines)


def mosquitto_bridge_conf(remote_port: int, qos: int) -> str:
    return "\n".join(
        [
            "connection benchbridge",
            f"address {HOST}:{remote_port}",
            f"topic bench/# out {qos}",
            "cleansession false",
            "clientid benchbridge",
            "try_private true",
            f"bridge_protocol_version {'mqttv50' if PROTOCOL == '5' else 'mqttv311'}",
            "restart_timeout 1 5",
        ]
    )


BRIDGE_CONF_SHOWN = "; ".join(
    mosquitto_bridge_conf(0, 9).replace(f"{HOST}:0", "REMOTE").replace("out 9", "out QOS").splitlines()
)


def start_mosquitto(work: Path, name: str, extra: str = "") -> tuple[subprocess.Popen[Any], int]:
    for _ in range(5):
        port = free_port()
        conf = work / f"{name}.conf"
        conf.write_text(f"listener {port} {HOST}\n{base_conf()}\n{extra}\n")
        log = (work / f"{name}.log").open("ab")
        proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=log, stderr=log, cwd=work)
        try:
            wait_port(port, proc)
            return proc, port
        except RuntimeError:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    raise RuntimeError(f"mosquitto {name} did not start: {(work / f'{name}.log').read_text()[-1000:]}")


def embedded_conf(port: int, remote_port: int, qos: int) -> str:
    """Our broker with the bench's limits (no queue or in-flight caps) and a [[bridge]] that mirrors
    mosquitto_bridge_conf: the same rule, a persistent session, the same protocol version, restart 1 5."""
    version = "5" if PROTOCOL == "5" else "3.1.1"
    return (
        f'[[listener]]\nurl = "mqtt://{HOST}:{port}"\n\n[limits]\nmax_queued_messages = 0\nmax_inflight = 0\n\n'
        # qos0_queue: no cap that matters, as the bench's mosquitto has none (its default, 10,000, drops a flood)
        f'[[bridge]]\nname = "benchbridge"\ntopics = ["bench/# out {qos}"]\nrestart_timeout = [1.0, 5.0]\n'
        f"qos0_queue = 100000000\n\n"
        f'[bridge.remote]\nurl = ["mqtt://{HOST}:{remote_port}"]\nclient_id = "benchbridge"\n'
        f'protocol_version = "{version}"\n'
    )


def start_ours_embedded(work: Path, remote_port: int, qos: int) -> tuple[subprocess.Popen[Any], int]:
    """`mqtt serve` as the local broker, its embedded bridge to the remote mosquitto."""
    for _ in range(5):
        port = free_port()
        conf = work / "ours.toml"
        conf.write_text(embedded_conf(port, remote_port, qos))
        log = (work / "ours.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "mqtt_cli", "serve", "--config", str(conf)], cwd=ROOT,
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_port(port, proc)
            return proc, port
        except RuntimeError:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    raise RuntimeError(f"mqtt serve did not start: {(work / 'ours.log').read_text()[-1000:]}")


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 15) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return proc.returncode


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (all its threads), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def line_count(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def run_one(
    kind: str,
    qos: int,
    count: int,
    size: int,
    idle: float,
    timeout: float = 60,
    profile: Path | None = None,
    mode: str = "flood",
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"mqtt-bridge-bench-{kind}-"))
    procs: dict[str, subprocess.Popen[Any] | None] = {
        "bridge": None, "sub": None, "pub": None, "spy": None, "tap": None,
    }  # fmt: skip
    stopped: subprocess.Popen[Any] | None = None  # backlog: the remote broker while SIGSTOPped
    load_before = os.getloadavg()[0]
    remote, rport = start_mosquitto(work, "remote")
    extra = mosquitto_bridge_conf(rport, qos) if kind == "mosquitto" else ""
    if kind == "embedded":
        local, lport = start_ours_embedded(work, rport, qos)
    else:
        local, lport = start_mosquitto(work, "local", extra)
    bridge_exit = None
    try:
        if kind not in ("mosquitto", "embedded"):
            cmd = [
                sys.executable, "-m", "mqtt_cli", "bridge",
                "--local", f"mqtt://{HOST}:{lport}", "--remote", f"mqtt://{HOST}:{rport}",
                "-t", f"bench/# out {qos}", "--state-dir", str(work / "state"),
                "--local-protocol-version", PROTOCOL, "--remote-protocol-version", PROTOCOL, *EXTRA_OURS,
            ]  # fmt: skip
            if kind == "yardstick":
                cmd = [
                    sys.executable,
                    str(ROOT / "benchmarks" / "_relay_yardstick.py"),
                    str(lport),
                    str(rport),
                    str(qos),
                ]
            procs["bridge"] = subprocess.Popen(
                cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=(work / "bridge.log").open("ab"),
            )  # fmt: skip
        out = work / "arrivals.txt"
        procs["sub"] = subprocess.Popen(
            ["mosquitto_sub", "-h", HOST, "-p", str(rport), "-t", "bench/#", "-q", str(qos), "-F", "%U %p"],
            stdout=out.open("wb"), stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        # The probe: wait until a message crosses the bridge (both bridges then have both sides up).
        deadline = time.monotonic() + 30
        while b"ready" not in (out.read_bytes() if out.exists() else b""):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: the bridge does not forward (see {work})")
            subprocess.run(
                ["mosquitto_pub", "-h", HOST, "-p", str(lport), "-t", "bench/ready", "-m", "ready", "-q", "1"],
                check=False, timeout=10,
            )  # fmt: skip
            time.sleep(0.2)
        time.sleep(0.5)
        ready_lines = line_count(out)
        bridge_cpu0 = cpu_seconds(procs["bridge"].pid) if procs["bridge"] is not None else float("nan")
        local_cpu0, remote_cpu0 = cpu_seconds(local.pid), cpu_seconds(remote.pid)
        if profile is not None and procs["bridge"] is not None:
            procs["spy"] = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", "1000",
                    "--nonblocking", "-p", str(procs["bridge"].pid), "-o", str(profile.with_suffix(".raw")),
                ],
                stdout=subprocess.DEVNULL, stderr=(work / "py-spy.log").open("ab"),
            )  # fmt: skip
            time.sleep(1)
        tap_out = work / "tap.txt"
        if mode == "backlog":
            procs["tap"] = subprocess.Popen(
                ["mosquitto_sub", "-h", HOST, "-p", str(lport), "-t", "bench/0", "-q", "0"],
                stdout=tap_out.open("wb"), stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(0.5)
            remote.send_signal(signal.SIGSTOP)
            stopped = remote
        pad = "x" * max(0, size - 12)
        payload = b"".join(f"{i:011d} {pad}\n".encode() for i in range(count))
        pub = subprocess.Popen(
            ["mosquitto_pub", "-h", HOST, "-p", str(lport), "-t", "bench/0", "-q", str(qos), "-M", "100", "-l"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs["pub"] = pub
        started = time.monotonic()

        def feed() -> None:
            assert pub.stdin is not None
            try:
                pub.stdin.write(payload)
                pub.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        if mode == "backlog":
            while line_count(tap_out) < count:
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"{kind}: the local broker did not get {count} messages (see {work})")
                time.sleep(0.05)
            stop(procs["tap"])
            remote.send_signal(signal.SIGCONT)
            stopped = None
            started = time.monotonic()
        last, last_change = -1, time.monotonic()
        while True:
            time.sleep(0.1)
            n = line_count(out) - ready_lines
            now = time.monotonic()
            if n != last:
                last, last_change = n, now
            if n >= count or now - last_change > idle or now - started > timeout:
                break
        if n < count:
            time.sleep(0.2)  # nothing new for `idle` seconds already: this is what arrived
        bridge_cpu = cpu_seconds(procs["bridge"].pid) - bridge_cpu0 if procs["bridge"] is not None else None
        local_cpu, remote_cpu = cpu_seconds(local.pid) - local_cpu0, cpu_seconds(remote.pid) - remote_cpu0
        stop(procs["sub"])
        if pub.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                pub.stdin.close()
        writer.join(timeout=5)
        stop(pub)
        spy = procs.get("spy")
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
        if procs["bridge"] is not None:
            bridge_exit = stop(procs["bridge"], timeout=30)
    finally:
        if stopped is not None:
            stopped.send_signal(signal.SIGCONT)
        for p in procs.values():
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        stop(local)
        stop(remote)
    stamps: list[float] = []
    seen: set[int] = set()
    dups = 0
    for raw in out.read_bytes().splitlines():
        parts = raw.split(b" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        seq = int(parts[1])
        stamps.append(float(parts[0]))
        if seq in seen:
            dups += 1
        seen.add(seq)
    received = len(stamps)
    seconds = (stamps[-1] - stamps[0]) if received > 1 else float("nan")
    row: dict[str, Any] = {
        "bench": "bridge", "mode": mode, "kind": kind, "qos": qos, "count": count, "size": size, "protocol": PROTOCOL,
        "received": received, "distinct": len(seen), "lost": count - len(seen), "dups": dups,
        "seconds": round(seconds, 4), "received_per_s": round(received / seconds) if seconds > 0 else None,
        "distinct_per_s": round(len(seen) / seconds) if seconds > 0 else None,
        "bridge_cpu_s": None if bridge_cpu is None else round(bridge_cpu, 3),
        "local_broker_cpu_s": round(local_cpu, 3), "remote_broker_cpu_s": round(remote_cpu, 3),
        "bridge_exit": bridge_exit, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }  # fmt: skip
    if kind == "mosquitto":
        row["mosquitto_bridge_conf"] = mosquitto_bridge_conf(0, qos).replace(f"{HOST}:0", f"{HOST}:REMOTE")
    shutil.rmtree(work, ignore_errors=True)
    return row


def code_version() -> str:
    """The commit of the code measured, with "+dirty" when mqtt_cli/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "mqtt_cli"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def interpreter() -> str:
    """The Python that runs our bridge (this one): builds differ by 15-20% on this path (PGO/LTO or not)."""
    return f"Python {platform.python_version()} {os.path.realpath(sys.executable)}"


def summarize_profile(raw: Path, out: Path, top: int = 30) -> None:
    """py-spy's raw format (collapsed stacks with counts) -> the functions with the most own and total time."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        samples += k
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + k
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + k
    lines = [f"{samples} samples", "", "own time:"]
    lines += [f"{100 * v / samples:6.1f}%  {f}" for f, v in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines += ["", "total time (function and what it calls):"]
    lines += [f"{100 * v / samples:6.1f}%  {f}" for f, v in sorted(total.items(), key=lambda x: -x[1])[:top]]
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--modes", default="flood,backlog",
                        help="flood, backlog (QoS 1 and 2), embedded (our broker with a [[bridge]])")  # fmt: skip
    parser.add_argument("--idle", type=float, default=3.0, help="stop after this many seconds without arrivals")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a run may last after the flood starts")
    parser.add_argument("--max-inflight", type=int, default=None, help="the brokers' max_inflight_messages")
    parser.add_argument(
        "--protocol", choices=("311", "5"), default="311",
        help="MQTT version of both bridges on both sides (default 311, mosquitto's bridge default)",
    )  # fmt: skip
    parser.add_argument(
        "--yardstick", action="store_true",
        help="also run benchmarks/_relay_yardstick.py, the least a bridge can do (3.1.1, QoS 0/1), as a third bridge",
    )  # fmt: skip
    parser.add_argument("--profile-ours", type=Path, default=None)
    parser.add_argument("--no-save", action="store_true", help="do not write to benchmarks/results")
    parser.add_argument("--quick", action="store_true", help="one rep of 2,000 messages at QoS 1, 1 s idle")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.count, args.qos, args.idle = 1, 2_000, "1", 1.0
    global MAX_INFLIGHT, PROTOCOL, BRIDGE_CONF_SHOWN
    MAX_INFLIGHT = args.max_inflight
    PROTOCOL = args.protocol
    BRIDGE_CONF_SHOWN = "; ".join(
        mosquitto_bridge_conf(0, 9).replace(f"{HOST}:0", "REMOTE").replace("out 9", "out QOS").splitlines()
    )
    for tool in ("mosquitto_pub", "mosquitto_sub"):
        if not shutil.which(tool):
            print(f"benchmarks/bridge.py: {tool} is missing (Debian's mosquitto-clients)", file=sys.stderr)
            return 2
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mqtt_cli")], check=False)
    qoses = [int(q) for q in args.qos.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if not modes or not set(modes) <= {"flood", "backlog", "embedded"}:
        print(f"benchmarks/bridge.py: --modes takes flood, backlog, embedded, not {args.modes!r}", file=sys.stderr)
        return 2
    tests = [(mode, qos) for mode in modes for qos in qoses if mode != "backlog" or qos > 0]
    rows: list[dict[str, Any]] = []
    day = time.strftime("%Y-%m-%d")
    raw_out = results_dir() / f"bridge-{day}.jsonl"
    version = code_version()
    python = interpreter()
    for rep in range(args.reps):
        for n, (mode, qos) in enumerate(tests):
            ours = "embedded" if mode == "embedded" else "ours"
            order = ["mosquitto", ours] if (rep + n) % 2 == 0 else [ours, "mosquitto"]
            if args.yardstick and PROTOCOL == "311" and qos < 2 and mode != "embedded":
                order.insert(1, "yardstick")
            for kind in order:
                row = run_one(kind, qos, args.count, args.size, args.idle, args.timeout, mode=mode)
                row["rep"] = rep
                row["code"] = version
                row["python"] = python
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if not args.no_save:
                    with raw_out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    if args.profile_ours is not None:
        args.profile_ours.mkdir(parents=True, exist_ok=True)
        for qos in qoses:
            prof = args.profile_ours / f"ours-qos{qos}"
            row = run_one("ours", qos, args.count, args.size, args.idle, args.timeout, profile=prof)
            print("profiled run: " + json.dumps(row), file=sys.stderr, flush=True)
            raw = prof.with_suffix(".raw")
            if raw.exists():
                summarize_profile(raw, prof.with_suffix(".txt"))
    lines = [
        f"benchmarks/bridge.py --reps {args.reps} --count {args.count} --size {args.size} --qos {args.qos}"
        f" --modes {args.modes} --protocol {args.protocol}"
        + (f" --max-inflight {args.max_inflight}" if args.max_inflight is not None else "")
        + f"  ({time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, not pinned, code {version},"
        f" ours on {python})",
        "mosquitto's bridge: " + BRIDGE_CONF_SHOWN,
        f"{'test':<16}{'mosquitto/s':>13}{'ours/s':>11}{'ratio':>8}{'target':>8}"
        f"{'lost m/o':>12}{'ours cpu s':>12}{'load':>12}",
    ]
    for mode, qos in tests:
        m = [r for r in rows if r["kind"] == "mosquitto" and r["qos"] == qos and r["mode"] == mode]
        o = [r for r in rows if r["kind"] in ("ours", "embedded") and r["qos"] == qos and r["mode"] == mode]

        def med(rs: list[dict[str, Any]], field: str) -> float:
            vals = [float(r[field]) for r in rs if isinstance(r.get(field), int | float)]
            return statistics.median(vals) if vals else float("nan")

        mv, ov = med(m, "distinct_per_s"), med(o, "distinct_per_s")
        lost = f"{max((r['lost'] for r in m), default=0)}/{max((r['lost'] for r in o), default=0)}"
        loads = [r["load_before"] for r in m + o]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""
        # The standalone bridge's CPU is its own process's; an embedded bridge's is the whole local broker's, shown
        # with mosquitto's local broker (its bridge included) for comparison.
        cpu = med(o, "bridge_cpu_s") if mode != "embedded" else med(o, "local_broker_cpu_s")
        target = TARGETS_EMBEDDED.get(qos, "") if mode == "embedded" else TARGETS.get(qos, "")
        lines.append(
            f"{f'QoS {qos} {mode}':<16}{mv:>13,.0f}{ov:>11,.0f}{ov / mv:>8.2f}{'>=' + str(target):>8}"
            f"{lost:>12}{cpu:>12.2f}{load:>12}"
            + (f"  (mosquitto local broker cpu s {med(m, 'local_broker_cpu_s'):.2f})" if mode == "embedded" else "")
        )
        if mode != "embedded":
            per = [r["bridge_cpu_s"] / r["distinct"] * 1e6 for r in o if r.get("bridge_cpu_s") and r.get("distinct")]
            if per:
                lines.append(f"{'  ours cpu/msg':<16}{statistics.median(per):>24.1f} µs of CPU per message forwarded")
        y = [r for r in rows if r["kind"] == "yardstick" and r["qos"] == qos and r["mode"] == mode]
        if y:
            yv = med(y, "distinct_per_s")
            lines.append(
                f"{'  yardstick':<16}{'':>13}{yv:>11,.0f}{yv / mv:>8.2f}{'':>8}"
                f"{max(r['lost'] for r in y):>12}{med(y, 'bridge_cpu_s'):>12.2f}"
            )
    for mode, qos in tests:
        for kind in ("mosquitto", "ours", "embedded", "yardstick"):
            rs = [r for r in rows if r["kind"] == kind and r["qos"] == qos and r["mode"] == mode]
            if not rs:
                continue
            lines.append(
                f"  QoS {qos} {mode:<7} {kind:<10} distinct/s {[r['distinct_per_s'] for r in rs]}"
                f" received {[r['received'] for r in rs]} lost {[r['lost'] for r in rs]} dups {[r['dups'] for r in rs]}"
            )
    text = "\n".join(lines)
    print(text)
    if not args.no_save:
        with (results_dir() / f"bridge-{day}.txt").open("a") as f:
            f.write(text + "\n\n")
        print(f"raw results: {raw_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
