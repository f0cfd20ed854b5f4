"""Does `mqtt sub -q 1` keep up with a fast QoS 1 publisher, as `mosquitto_sub` beside it does? (issue 20)

    .venv/bin/python benchmarks/sub_keepup.py [--count 100000] [--window 1000] [--size 64]
                                              [--out file,devnull] [--form payload] [--reps 1]
                                              [--mqttload PATH | --bench-src DIR] [--pin]
                                              [--checkout DIR ...] [--path trio,fast]
    .venv/bin/python benchmarks/sub_keepup.py --quick     # 2,000 messages (make bench-quick)

One Debian mosquitto with its default limits (max_queued_messages 1000, max_inflight_messages 20) on a free
loopback port. Subscribed to the same topic at QoS 1: `mqtt sub -q 1` (this checkout, `--stats` for its count)
and `mosquitto_sub -q 1`, both with `-C COUNT`. Then one publisher sends COUNT messages of SIZE bytes at QoS 1
with WINDOW unacknowledged: `mqtt bench pub`, or the C generator mqttload when --mqttload names a binary or
--bench-src (default $MQTTLOAD_DIR) its source (built with gcc -O2 in a temporary directory; `thru --fanout
--pubs 1 --subs 1`: its own subscriber is a third one). When a subscriber reads too slowly, its queue in the
broker fills and the broker drops what does not fit: the count a subscriber prints is what reached it.

--out: where `mqtt sub` writes: `file` (a file; each line is then checked: SIZE bytes of the generator's payload
and a newline, sequence numbers in order, none twice) or `devnull` (/dev/null). mosquitto_sub always writes to a file.
--form: the output form of both subscribers: payload (default), verbose (-v), format (-F '%t %p'), json
(ours --json against mosquitto_sub -F %j; only counted).
--pin: the broker on CPU 0, the publisher on CPU 1 (the subscribers are not pinned).
--checkout: the mqtt_cli checkouts to measure, in turn in the same run (default: this one), e.g. the main branch's
worktree for a before/after.

--path: `trio` runs `mqtt sub ... --stats` (typer and the trio client: what `mqtt sub` without -C runs; its count
from --stats), `fast` runs it without --stats (the one-shot fast path, commands/_fast.py on net/blocking.py, which
takes `sub -C N`; its count from the output file, or with /dev/null only whether all arrived: exit 0).

Our CPU time is also given less the start-up's: the CPU of `mqtt sub -E` (connect, subscribe, exit), measured
once per checkout.

Prints, per run: received counts (ours, mosquitto_sub, ratio), the publisher's rate, our subscriber's CPU time
(user + system, start-up included) and per message, and mosquitto_sub's CPU per message. A subscriber that keeps
up reads few messages at a time, so CPU per message depends on the load; the counts are the figure. Record
`lscpu`'s model name and `uptime`'s load with the figures (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _loadgen import ENV_C_TOOL  # noqa: E402
from _results import cpu_model  # noqa: E402

from tests.brokers import MOSQUITTO, free_port, wait_for_port  # noqa: E402

TOPIC = "bench/t"  # mqttload's fan-out topic (it has no option for another); `mqtt bench` is told it
#: Where each generator's payload holds its sequence number: (struct format, offset). mqtt bench: docs/bench.md.
SEQUENCE = {"mqttload": ("<Q", 4), "mqtt bench": (">Q", 12)}
CONF = """listener {port} 127.0.0.1
allow_anonymous true
persistence false
log_dest stderr
log_type error
connection_messages false
sys_interval 1
"""
FORMS = {
    # form: (our flags, mosquitto_sub's flags)
    "payload": ([], []),
    "verbose": (["-v"], ["-v"]),
    "format": (["-F", "%t %p"], ["-F", "%t %p"]),
    "json": (["--json"], ["-F", "%j"]),
}


@dataclass
class Run:
    checkout: str
    path: str
    out: str
    form: str
    ours: int
    theirs: int
    ours_exit: int | None
    theirs_exit: int | None
    cpu: float
    theirs_cpu: float
    published_per_s: float
    pub_seconds: float
    checked: str


def build_mqttload(src: Path, tmp: Path) -> str:
    out = tmp / "mqttload"
    subprocess.run(["gcc", "-O2", "-o", str(out), str(src / "mqttload.c")], check=True)
    return str(out)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reap(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Waits for `proc`; (exit code, CPU seconds user + system) from wait4's resource usage."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def settle(procs: list[subprocess.Popen[bytes]], idle: float, limit: float) -> None:
    """Waits until every process has exited, or made no CPU progress for `idle` seconds (all it could get has
    arrived; the broker dropped the rest), or `limit` seconds passed."""
    deadline = time.monotonic() + limit
    last = {p.pid: (cpu_seconds(p.pid), time.monotonic()) for p in procs}
    while time.monotonic() < deadline:
        alive = [p for p in procs if _alive(p)]
        if not alive:
            return
        now = time.monotonic()
        stalled = True
        for p in alive:
            c = cpu_seconds(p.pid)
            if c != last[p.pid][0]:
                last[p.pid] = (c, now)
            if now - last[p.pid][1] < idle:
                stalled = False
        if stalled:
            return
        time.sleep(0.2)


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    """Alive and not yet reaped, without reaping it (reap() wants its resource usage)."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def check_payload_file(path: Path, size: int, generator: str) -> tuple[int, str]:
    """(messages, verdict) of a payload-form output: the generator's SIZE-byte payloads, each with a newline."""
    seq_format, seq_offset = SEQUENCE[generator]
    data = path.read_bytes()
    line = size + 1
    if len(data) % line:
        return len(data) // line, f"BAD: {len(data)} bytes is not a whole number of {line}-byte lines"
    last = -1
    for pos in range(0, len(data), line):
        if data[pos + size] != 0x0A:
            return pos // line, f"BAD: no newline after message {pos // line}"
        seq = struct.unpack_from(seq_format, data, pos + seq_offset)[0]
        if seq <= last:
            return pos // line, f"BAD: sequence {seq} after {last}"
        last = seq
    return len(data) // line, "ok (in order, no duplicates)"


def count_lines(path: Path, form: str, size: int) -> int:
    if form == "payload":
        return path.stat().st_size // (size + 1)
    if form == "json":
        return path.read_bytes().count(b'"topic":')
    return path.read_bytes().count(TOPIC.encode() + b" ")


def startup_cpu(checkout: Path, tmp: Path) -> float:
    """CPU seconds of `mqtt sub -E` (start, connect, subscribe, exit) from `checkout`: the fixed part of a run."""
    port = free_port()
    conf = tmp / f"s{port}.conf"
    conf.write_text(CONF.format(port=port))
    broker = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, broker, 10)
        env = dict(os.environ, PYTHONPATH=str(checkout))
        best = float("inf")
        for _ in range(3):
            proc = subprocess.Popen([sys.executable, "-m", "mqtt_cli", "sub", "-h", "127.0.0.1", "-p", str(port),
                                     "-q", "1", "-t", TOPIC, "-E"], env=env, cwd=checkout)  # fmt: skip
            code, cpu = reap(proc)
            if code != 0:
                raise RuntimeError(f"mqtt sub -E exited with {code}")
            best = min(best, cpu)
        return best
    finally:
        broker.terminate()
        broker.wait(10)


def one_run(
    mqttload: str | None, tmp: Path, a: argparse.Namespace, checkout: Path, path: str, out: str, form: str
) -> Run:
    port = free_port()
    conf = tmp / f"m{port}.conf"
    conf.write_text(CONF.format(port=port))
    pin = ["taskset", "-c", "0"] if a.pin else []
    broker = subprocess.Popen([*pin, MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        wait_for_port(port, broker, 10)
        ours_flags, theirs_flags = FORMS[form]
        ours_path = tmp / f"ours-{port}.out"
        theirs_path = tmp / f"theirs-{port}.out"
        stats_path = tmp / f"ours-{port}.err"
        env = dict(os.environ, PYTHONPATH=str(checkout))
        common = ["-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", TOPIC, "-C", str(a.count)]
        with (
            open(os.devnull if out == "devnull" else ours_path, "wb") as ours_out,
            open(theirs_path, "wb") as theirs_out,
            open(stats_path, "wb") as stats_err,
        ):
            ours = subprocess.Popen(
                [sys.executable, "-m", "mqtt_cli", "sub", *common, *(["--stats"] if path == "trio" else []),
                 *ours_flags],
                stdout=ours_out, stderr=stats_err, env=env, cwd=checkout,
            )  # fmt: skip
            procs.append(ours)
            theirs = subprocess.Popen(["mosquitto_sub", *common, *theirs_flags], stdout=theirs_out)
            procs.append(theirs)
        wait_subscribed(port, 2, broker)
        pub_pin = ["taskset", "-c", "1"] if a.pin else []
        if mqttload:
            generator = [mqttload, "thru", "--port", str(port), "--fanout", "--pubs", "1", "--subs", "1", "--qos", "1",
                         "--size", str(a.size), "--count", str(a.count), "--window", str(a.window), "--idle", "10",
                         "--timeout", "600"]  # fmt: skip
        else:
            generator = [sys.executable, "-m", "mqtt_cli", "bench", "pub", "-h", "127.0.0.1", "-p", str(port), "-t",
                         TOPIC, "-c", "1", "-q", "1", "-s", str(a.size), "-L", str(a.count), "-I", "0", "--inflight",
                         str(a.window), "--workers", "1", "--quiet", "--json",
                         str(tmp / f"pub-{port}.json")]  # fmt: skip
        pub = subprocess.run([*pub_pin, *generator], capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
        result = {}
        if mqttload:
            stats = [json.loads(x) for x in pub.stdout.splitlines() if x.startswith("{")]
            result = stats[-1] if stats else {}
        elif (tmp / f"pub-{port}.json").exists():
            result = json.loads((tmp / f"pub-{port}.json").read_text())
        if not result:
            raise RuntimeError(f"{generator[0]}: no result (exit {pub.returncode}): {pub.stderr[-500:]}")
        settle(procs, idle=3.0, limit=600)
        for p in procs:
            if _alive(p):
                p.send_signal(2)  # SIGINT: ours prints its --stats on the way out
        ours_exit, cpu = reap(ours)
        theirs_exit, theirs_cpu = reap(theirs)
        m = re.search(rb"mqtt: (\d+) messages? received", stats_path.read_bytes())
        ours_count = int(m.group(1)) if m else -1
        if path == "fast":
            ours_count = count_lines(ours_path, form, a.size) if out == "file" else a.count if ours_exit == 0 else -1
        checked = "-"
        if out == "file":
            if form == "payload":
                n, checked = check_payload_file(ours_path, a.size, "mqttload" if mqttload else "mqtt bench")
            else:
                n = count_lines(ours_path, form, a.size)
                checked = "counted"
            if n != ours_count:
                checked = f"BAD: --stats says {ours_count}, the file holds {n}"
        theirs_count = count_lines(theirs_path, form, a.size)
        return Run(checkout.name, path, out, form, ours_count, theirs_count, ours_exit, theirs_exit, cpu, theirs_cpu,
                   float(result.get("published_per_s", 0)), float(result.get("pub_seconds", 0)), checked)  # fmt: skip
    finally:
        for p in procs:
            if p.returncode is None and _alive(p):
                p.kill()
                reap(p)
        broker.terminate()
        broker.wait(10)


def wait_subscribed(port: int, n: int, broker: subprocess.Popen[bytes]) -> None:
    """Waits (bounded) until `n` subscribers hold a subscription, by the broker's $SYS count of subscriptions
    (sys_interval 1): a probe message would be counted by -C."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = subprocess.run(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", "$SYS/broker/subscriptions/count", "-C", "1",
             "-W", "3"],
            capture_output=True, text=True,
        )  # fmt: skip
        if got.stdout.strip().isdigit() and int(got.stdout.strip()) >= n:
            return
        time.sleep(0.3)
    raise RuntimeError("the subscribers did not subscribe within 20 s")



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--out", default="file,devnull")
    ap.add_argument("--form", default="payload")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--mqttload")
    ap.add_argument("--bench-src", default=os.environ.get(ENV_C_TOOL), help=f"mqttload's source (${ENV_C_TOOL})")
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--checkout", nargs="+", type=Path, default=[REPO])
    ap.add_argument("--path", default="trio")
    ap.add_argument("--quick", action="store_true", help="2,000 messages, to a file, payload form")
    a = ap.parse_args()
    if a.quick:
        a.count, a.out = 2_000, "file"
    if a.size < 20:
        ap.error("--size: at least 20 (the generators' sequence numbers)")
    if a.mqttload is None and a.bench_src and not (Path(a.bench_src) / "mqttload.c").is_file():
        ap.error(f"--bench-src {a.bench_src}: no mqttload.c there")
    outs = a.out.split(",")
    forms = a.form.split(",")
    if bad := [x for x in outs if x not in ("file", "devnull")] + [f for f in forms if f not in FORMS]:
        ap.error(f"unknown --out/--form {bad}")
    tmp = Path(tempfile.mkdtemp(prefix="sub-keepup-"))
    try:
        mqttload = a.mqttload or (build_mqttload(Path(a.bench_src), tmp) if a.bench_src else None)
        print(f"# CPU: {cpu_model()}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f} at the start; "
              f"Python {platform.python_version()}; {a.count:,} messages of {a.size} B, QoS 1, "
              f"window {a.window}")  # fmt: skip
        checkouts = [c.resolve() for c in a.checkout]
        fixed = {c: startup_cpu(c, tmp) for c in checkouts}
        for c in checkouts:
            print(f"# {c}: mqtt sub -E takes {fixed[c]:.2f} s of CPU (start-up, connect, subscribe)")
        print("| checkout | path | out | form | mqtt sub | mosquitto_sub | ratio | exit ours/theirs | "
              "publisher msg/s | our CPU s | CPU us/msg | less start-up | mosquitto_sub CPU us/msg | "
              "output check |")  # fmt: skip
        print("|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
        for _ in range(a.reps):
            for out in outs:
                for form in forms:
                    for c, path in [(c, path) for path in a.path.split(",") for c in checkouts]:
                        r = one_run(mqttload, tmp, a, c, path, out, form)
                        ratio = r.ours / r.theirs if r.theirs else 0.0
                        per = r.cpu / r.ours * 1e6 if r.ours > 0 else 0.0
                        net = (r.cpu - fixed[c]) / r.ours * 1e6 if r.ours > 0 else 0.0
                        print(f"| {r.checkout} | {r.path} | {r.out} | {r.form} | {r.ours:,} | {r.theirs:,} | "
                              f"{ratio:.3f} | "
                              f"{r.ours_exit}/{r.theirs_exit} | {r.published_per_s:,.0f} | {r.cpu:.2f} | {per:.1f} | "
                              f"{net:.1f} | {r.theirs_cpu / max(r.theirs, 1) * 1e6:.1f} | {r.checked} |",
                              flush=True)  # fmt: skip
        print(f"# load {os.getloadavg()[0]:.2f} at the end")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
