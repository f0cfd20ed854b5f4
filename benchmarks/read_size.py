"""What one socket read costs by the size it asks for: why every read asks for 64 KiB (mqtt_cli/net/readsize.py).

    .venv/bin/python benchmarks/read_size.py [--count 100000] [--sizes 4096,65536,131072,262144]

Each size in a fresh interpreter (glibc's malloc remembers the largest mapped block freed, which changes the
answer): COUNT times, a 70-byte message sent over a Unix socket pair and read with recv(SIZE), then the same
after one 1 MiB block was allocated and freed. Prints microseconds per send and read, and the CPU model.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _results import cpu_model

_PROBE = """
import socket, sys, time
size, count, warm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if warm:
    block = bytes(1 << 20)
    del block
a, b = socket.socketpair()
b.setblocking(False)
message = b"x" * 70
start = time.perf_counter_ns()
for _ in range(count):
    a.send(message)
    b.recv(size)
print((time.perf_counter_ns() - start) / count / 1000)
"""



def _probe(size: int, count: int, warm: bool) -> float:
    cmd = [sys.executable, "-c", _PROBE, str(size), str(count), "1" if warm else "0"]
    return float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--sizes", default="4096,65536,131072,262144")
    args = ap.parse_args()
    print(f"# {cpu_model()}; Python {sys.version.split()[0]}; {args.count:,} reads of 70 bytes each")
    print("| recv size | µs per send+recv, fresh process | after a 1 MiB block was freed |")
    print("|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        cold, warm = (_probe(size, args.count, warm) for warm in (False, True))
        print(f"| {size:,} | {cold:.1f} | {warm:.1f} |")


if __name__ == "__main__":
    main()
