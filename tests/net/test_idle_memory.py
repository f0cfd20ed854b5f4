"""What an idle connection holds in the broker: the Python objects allocated per connection (tracemalloc), bounded.

Real sockets on 127.0.0.1: the clients run in a child process (its allocations are not ours to count), each sends a
CONNECT (3.1.1, clean session, keep alive 60), gets its CONNACK, then stays silent. The figure is what the broker's
process allocated while they connected and still holds, per connection: its task and frames, socket objects,
ServerConnection, Session. Not timed; the bound is on bytes (benchmarks/idle_memory.py measures the process's RSS).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc

import trio

from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.net.server import BrokerServer, Listener, Scheme, ServeOptions

CONNECTIONS = 300
# Bytes of Python objects per idle connection here: about 4,300 (pure Python and compiled build alike, Python 3.11);
# 6,450 before the connection's task was trimmed (docs/PERFORMANCE.md). The goal is 5 kB of RSS, a few
# hundred bytes above this figure (the allocator's overhead): a regression that would cross it fails here.
BOUND = 4_800

# The clients: CONNECT as bytes (MQTT 3.1.1, clean session, keep alive 60, client id idle-N), one CONNACK each
# (accepted), "ready", then silent until stdin closes.
CLIENTS = r"""
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(n):
    cid = b"idle-%d" % i
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(bytes([0x10, len(body)]) + body)
    socks.append(s)
for s in socks:
    got = b""
    while len(got) < 4:
        chunk = s.recv(4 - len(got))
        if not chunk:
            sys.exit("closed before its CONNACK")
        got += chunk
    if got != b"\x20\x02\x00\x00":
        sys.exit(f"CONNACK {got!r}")
print("ready", flush=True)
sys.stdin.read()
"""


def _connected(server: BrokerServer) -> int:
    return sum(1 for conn in server.core.connections if conn.connected)


async def _hold(port: int, n: int, server: BrokerServer) -> trio.Process:
    """Starts the client process with `n` idle connections; returns once the broker has them all."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", CLIENTS, str(port), str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        chunk = await proc.stdout.receive_some(64)
        assert chunk, f"the client process ended: {await proc.wait()}"
        line += chunk
    assert line == b"ready\n"
    while _connected(server) < n:  # the CONNACKs are out: its sockets are being processed still, if at all
        await trio.sleep(0.01)
    return proc


async def _release(proc: trio.Process, server: BrokerServer) -> None:
    assert proc.stdin is not None
    await proc.stdin.aclose()
    assert await proc.wait() == 0
    while server.core.connections:
        await trio.sleep(0.01)


def test_an_idle_connection_holds_less_than_the_bound() -> None:
    per_connection: list[float] = []

    async def main() -> None:
        options = ServeOptions([Listener(Scheme.MQTT, "127.0.0.1", 0)], broker=BrokerConfig(sys_interval=0))
        stop = trio.Event()
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                server: BrokerServer = await nursery.start(BrokerServer(options).run, stop)
                port = server.bound[0].port
                # A first round makes what is made once (caches, interned names, the sets' first growth).
                await _release(await _hold(port, 50, server), server)
                gc.collect()
                tracemalloc.start()
                try:
                    before = tracemalloc.take_snapshot()
                    proc = await _hold(port, CONNECTIONS, server)
                    gc.collect()
                    held = tracemalloc.take_snapshot()
                finally:
                    tracemalloc.stop()
                growth = sum(stat.size_diff for stat in held.compare_to(before, "filename"))
                per_connection.append(growth / CONNECTIONS)
                await _release(proc, server)  # and they all go again
                stop.set()

    trio.run(main)
    assert 1_000 < per_connection[0] <= BOUND, f"{per_connection[0]:.0f} bytes per idle connection"
