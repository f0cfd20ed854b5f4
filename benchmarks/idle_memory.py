"""Memory per idle connection: our broker, pure Python and compiled, beside mosquitto, in the same run.

    .venv/bin/python benchmarks/idle_memory.py [--reps 3] [--conns 5000]
    .venv/bin/python benchmarks/idle_memory.py --breakdown [--conns 1000] [--pure]
    .venv/bin/python benchmarks/idle_memory.py --quick          # one rep of 200 connections (make bench-quick)

Default: benchmarks/_loadgen.py's matrix, its `conns` test (N clean-session clients, keep alive 60, connected by
the load generator on CPU 1 and held silent), each broker started fresh on CPU 0: mosquitto (_loadgen's
settings), `mqtt serve` with MQTT_CLI_PURE=1 and `mqtt serve` compiled (make install's mypyc build, when there),
rotating order. Prints the median of (VmRSS while held - VmRSS before) / connections for each, in kB; the
issue's goal is 5 kB. RSS is the process's user memory (kernel socket buffers are not in it).

--breakdown: our broker in this process (trio, tracemalloc on) with the load generator's N idle clients; prints the
Python bytes allocated and still held per connection, by source line, largest first, and the RSS growth beside it (with
tracemalloc's own overhead in it: the tracemalloc figure is the one to compare with the default mode's).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _loadgen import LoadGen, matrix
from broker import ROOT, kb_per_conn, mosquitto_command, save_rows, serve_command

GOAL_KB = 5.0


def matrix_mode(args: argparse.Namespace, work: Path, load: LoadGen) -> int:
    sys.path.insert(0, str(ROOT))
    from mqtt_cli import buildmode

    plain = {k: v for k, v in LoadGen.env().items() if k != buildmode.ENV_PURE}
    targets = {"mosquitto": (18880, mosquitto_command(work, 18880)), "pure": (18881, serve_command(18881))}
    env = {"mosquitto": plain, "pure": {**plain, buildmode.ENV_PURE: "1"}}
    if Path(buildmode.STAMP).exists():
        targets["compiled"] = (18882, serve_command(18882))
        env["compiled"] = plain
    else:
        print("benchmarks/idle_memory.py: no compiled build (make install with a C compiler): pure Python only")
    rows = matrix(load, targets, reps=args.reps, only=["conns"], count=0, conns=args.conns,
                  out=work / "results.jsonl", env=env)  # fmt: skip
    out = save_rows("idle-memory", rows)
    print(f"{args.conns:,} idle connections ({load.name}){'kB each':>12}{'x mosquitto':>13}{'goal':>9}")
    mosq = kb_per_conn([r for r in rows if r["label"] == "mosquitto"])
    for label in targets:
        kb = kb_per_conn([r for r in rows if r["label"] == label])
        goal = "" if label == "mosquitto" else f"<={GOAL_KB:g} kB"
        print(f"{label:<24}{kb:>12.2f}{kb / mosq:>13.1f}{goal:>9}")
    failed = [r for r in rows if r.get("failed") or r.get("connected") != args.conns]
    print(f"runs with failed connections: {len(failed)}; raw results: {out}")
    return 0


def breakdown_mode(args: argparse.Namespace, load: LoadGen) -> int:
    if args.pure:
        os.environ["MQTT_CLI_PURE"] = "1"  # before mqtt_cli is imported
    sys.path.insert(0, str(ROOT))
    import trio

    from mqtt_cli import buildmode
    from mqtt_cli.core.broker import BrokerConfig
    from mqtt_cli.net.server import BrokerServer, Listener, Scheme, ServeOptions

    n = args.conns

    def rss_kb() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

    async def hold(server: BrokerServer, port: int, count: int, seconds: float) -> trio.Process:
        argv, _ = load.conns_command(port, count=count, hold=seconds)
        proc = await trio.lowlevel.open_process(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=LoadGen.env()
        )  # fmt: skip
        while sum(1 for c in server.core.connections if c.connected) < count:
            await trio.sleep(0.05)
        return proc

    async def main() -> None:
        options = ServeOptions([Listener(Scheme.MQTT, "127.0.0.1", 0)], broker=BrokerConfig(sys_interval=0))
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            server: BrokerServer = await nursery.start(BrokerServer(options).run, stop)
            port = server.bound[0].port
            await (await hold(server, port, 50, 0.2)).wait()  # what is made once is made now
            while server.core.connections:
                await trio.sleep(0.05)
            gc.collect()
            tracemalloc.start(1)
            before, rss_before = tracemalloc.take_snapshot(), rss_kb()
            proc = await hold(server, port, n, 600)
            await trio.sleep(1)
            gc.collect()
            held, rss_held = tracemalloc.take_snapshot(), rss_kb()
            tracemalloc.stop()
            proc.terminate()
            await proc.wait()
            stop.set()
        stats = held.compare_to(before, "lineno")
        total = sum(s.size_diff for s in stats)
        rss = 1024 * (rss_held - rss_before) / n
        print(f"{n:,} idle connections, {buildmode.BUILD}: {total / n:,.0f} bytes each of Python objects "
              f"(tracemalloc); RSS {rss:,.0f} bytes each (with tracemalloc's overhead)")  # fmt: skip
        print(f"{'bytes':>8}{'blocks':>8}  where")
        for s in stats:
            if s.size_diff / n < 8:
                break
            frame = s.traceback[0]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            print(f"{s.size_diff / n:>8.0f}{s.count_diff / n:>8.2f}  {where}")

    trio.run(main)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--conns", type=int, default=None, help="connections held (5,000; --breakdown: 1,000)")
    parser.add_argument("--breakdown", action="store_true", help="in-process tracemalloc figures by source line")
    parser.add_argument("--pure", action="store_true", help="--breakdown: the pure-Python build")
    parser.add_argument("--quick", action="store_true", help="one rep of 200 connections")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.conns = 1, args.conns or 200
    if args.conns is None:
        args.conns = 1000 if args.breakdown else 5000
    work = Path(tempfile.mkdtemp(prefix="mqtt-bench-"))
    load = LoadGen(work)
    return breakdown_mode(args, load) if args.breakdown else matrix_mode(args, work, load)


if __name__ == "__main__":
    sys.exit(main())
