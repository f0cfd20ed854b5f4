"""The SIGKILL torture of issue #18, longer than the test's: `mqtt serve --persistence` and Debian's mosquitto
(`persistence true`, autosave defaults), the same scenario in the same run (tests/broker/persistence_torture.py).

    .venv/bin/python benchmarks/persistence_torture.py [--rounds 50] [--flood 0.2,1.0] [--synchronous normal]

Each round: a retained message set, then QoS 1 (new client) and QoS 2 (one persistent publisher living through
every kill) flooded to topics whose persistent subscribers are offline, then SIGKILL at a random moment and a
restart. At the end the subscribers come back. Prints, per broker, what was acknowledged, delivered, duplicated
and lost (ours must lose 0 and duplicate no QoS 2 message), with the CPU model and load: docs/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import cpu_model  # noqa: E402

from tests.broker.persistence_torture import torture  # noqa: E402
from tests.broker.test_persistence import Ours  # noqa: E402
from tests.brokers import start_mosquitto  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="SIGKILLs per broker (default 50)")
    parser.add_argument("--flood", default="0.2,1.0", help="seconds of flood before each kill: MIN,MAX")
    parser.add_argument("--synchronous", default="normal", choices=["normal", "full"], help="ours: [persistence]")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--quick", action="store_true", help="2 kills per broker (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 2
    low, high = (float(x) for x in args.flood.split(","))
    print(f"CPU: {cpu_model()}; load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="torture-") as tmp:
        work = Path(tmp)
        conf = work / "ours.toml"
        conf.write_text(f'[persistence]\nsynchronous = "{args.synchronous}"\n')
        ours = Ours(work / "ours", "--config", str(conf))
        try:
            mine = torture(ours.port, ours.kill, ours.start, args.rounds, (low, high), args.seed)
        finally:
            ours.stop()
        print(mine.line(f"mqtt serve --persistence (synchronous {args.synchronous})"), flush=True)
        mosq = start_mosquitto(work / "mosquitto", persistence=True)
        try:

            def restart() -> None:
                mosq.proc = mosq.start()

            theirs = torture(mosq.port, mosq.kill, restart, args.rounds, (low, high), args.seed, finish=5.0,
                             patience=2.0)  # fmt: skip
        finally:
            mosq.stop()
    print(mine.line(f"mqtt serve --persistence (synchronous {args.synchronous})"))
    print(theirs.line("mosquitto persistence true"))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    ok = mine.lost == 0 and mine.duplicates_q2 == 0
    print("ours: nothing acknowledged lost, no QoS 2 duplicate" if ok else "ours: FAILED (see the counts above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
