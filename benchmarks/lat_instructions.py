"""Instructions per message of the broker at a low rate (issue #20's latency goal), counted by valgrind's callgrind.

    .venv/bin/python benchmarks/lat_instructions.py [--messages 200] [--qos 0,1] [--floor]
    .venv/bin/python benchmarks/lat_instructions.py --quick     # 20 messages at QoS 1 (make bench-quick)

Needs valgrind (callgrind_control, callgrind_annotate; `make install` as root installs it). MQTT_CLI_PURE=1
counts the pure-Python build. The load is benchmarks/_loadgen.py's (`mqtt bench`, or mqttload with MQTTLOAD_DIR).

At 1,000 messages a second each message is alone, so it costs whole wake-ups of the broker (the PUBLISH read,
and at QoS 1 the subscriber's PUBACK read), and p99 latency follows what runs between the wake-up and the
delivery's send() with cold caches. Timing that on a shared machine is noise; the user-space instructions a
message costs are not. This runs `mqtt serve` under callgrind with instrumentation off, warms it with one
second of latency load (one publisher, one subscriber), then counts --messages messages at 10 a second and prints
instructions per message for each --qos, less what the idle broker ran (its timers) in as long a time, counted
just before. Valgrind slows the
broker about 50x, more on a loaded machine: a message that waits for the one before shares its wake-ups and
costs less, so a run where more than 1% of the messages took longer than the interval says so (too low).

--floor also counts trio's share alone: two tasks handing a byte back and forth through a socket pair with
trio.lowlevel.wait_readable and os.read/os.write, per round trip (two wake-ups, as a QoS 1 message costs), by
the difference between two run lengths (start-up cancels out).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import LoadGen

from mqtt_cli.core.records import COMPILE_AFTER

ROOT = Path(__file__).resolve().parent.parent
RATE = 10  # messages a second under valgrind (about 50x slower): each one alone, as at 1,000/s without it
# Messages of a warm-up, not counted: enough for every record class a message makes to have built
# records.COMPILE_AFTER instances and compiled its __init__ (a one-time cost that would otherwise land in a count).
WARM_UP = 2 * COMPILE_AFTER

# The trio floor: N round trips between two tasks over a socket pair (argv[1]: N).
FLOOR = """
import os, socket, sys, trio
from trio.lowlevel import wait_readable

async def main(n):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def echo():
        while True:
            await wait_readable(b)
            os.write(b.fileno(), os.read(b.fileno(), 65536))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        for _ in range(n):
            os.write(a.fileno(), b"x")
            await wait_readable(a)
            os.read(a.fileno(), 100)
        nursery.cancel_scope.cancel()

trio.run(main, int(sys.argv[1]))
"""


def total_instructions(out_file: Path) -> int:
    report = subprocess.run(["callgrind_annotate", str(out_file)], capture_output=True, text=True, check=True).stdout
    match = re.search(r"^\s*([\d,]+)\s.*PROGRAM TOTALS", report, re.MULTILINE)
    if match is None:
        raise SystemExit(f"benchmarks/lat_instructions.py: no totals in callgrind's report of {out_file}")
    return int(match.group(1).replace(",", ""))


def counted_run(pid: int, out_file: Path, run: Callable[[], object]) -> tuple[int, float, Path]:
    """Instructions of the process `pid` (under callgrind with instrumentation off, writing `out_file`) while
    `run` runs, its duration, and the dump of the count (a file of its own)."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True, check=True)
    started = time.monotonic()
    run()
    took = time.monotonic() - started
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True, check=True)
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
    dump = max(out_file.parent.glob(f"{out_file.name}.*"), key=lambda p: int(p.suffix[1:]))
    return total_instructions(dump), took, dump


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("benchmarks/lat_instructions.py: the broker did not start under valgrind") from None
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def broker_per_message(load: LoadGen, work: Path, qos: int, messages: int) -> tuple[float, dict[str, object]]:
    """Instructions per message of `mqtt serve` under callgrind, and the load generator's record."""
    port = free_port()
    out = work / f"callgrind-qos{qos}.out"
    cmd = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, "-m", "mqtt_cli", "serve", "--port", str(port), "--max-queued-messages", "0",
        "--max-inflight", "0", "--sys-interval", "0",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, 300)
        load.lat(port, rate=RATE, seconds=WARM_UP / RATE, qos=qos, size=64)  # warm-up, not counted
        time.sleep(2)  # its connections' ends done before the idle count

        # The broker's own timers (keep-alive sweep) run whether messages come or not: counted idle for as long
        # as the load takes, and taken off, so that the figure is what the messages cost.
        seconds = messages / RATE
        idle, idle_took, _ = counted_run(proc.pid, out, lambda: time.sleep(seconds))
        done: list[dict[str, object]] = []

        def lat() -> None:
            done.append(load.lat(port, rate=RATE, seconds=seconds, qos=qos, size=64))

        busy, took, _ = counted_run(proc.pid, out, lat)
    finally:
        proc.terminate()
        proc.wait(120)
    row = done[0]
    received = row.get("received", row.get("delivered"))  # (mqttload's name, mqtt bench's)
    if not isinstance(received, int) or not received or row.get("lost"):
        raise SystemExit(f"benchmarks/lat_instructions.py: the load did not complete: {row}")
    return (busy - idle * took / idle_took) / received, row


def floor_per_round_trip(work: Path) -> float:
    """trio's two wake-ups (socket pair ping-pong) in instructions, start-up cancelled by two run lengths."""
    script = work / "floor.py"
    script.write_text(FLOOR)
    totals = []
    for n in (1000, 3000):
        out = work / f"callgrind-floor-{n}.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, str(script),
                        str(n)], capture_output=True, check=True)  # fmt: skip
        totals.append(total_instructions(out))
    return (totals[1] - totals[0]) / 2000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--qos", default="0,1")
    parser.add_argument("--floor", action="store_true", help="also count trio's two wake-ups alone")
    parser.add_argument("--quick", action="store_true", help="20 messages at QoS 1")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.qos = 20, "1"
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            print(f"benchmarks/lat_instructions.py: {tool} is missing (install valgrind)", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="mqtt-lat-instr-"))
    load = LoadGen(work)
    build = "pure Python" if os.environ.get("MQTT_CLI_PURE") else "as built (mqtt --version)"
    print(f"user-space instructions per message, {args.messages} messages at {RATE}/s under callgrind, {build}, "
          f"load: {load.name}")  # fmt: skip
    for qos in (int(q) for q in args.qos.split(",")):
        per_message, row = broker_per_message(load, work, qos, args.messages)
        p99 = row.get("p99_us")
        late = isinstance(p99, int | float) and p99 >= 1e6 / RATE
        print(f"  QoS {qos}: {per_message:,.0f}" + (f" (too low: p99 latency {p99:,.0f} us)" if late else ""))
    if args.floor:
        print(f"  trio floor, two wake-ups (socket pair round trip): {floor_per_round_trip(work):,.0f}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
