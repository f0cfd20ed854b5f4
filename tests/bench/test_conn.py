"""`mqtt bench`'s plain TCP connection: a write the kernel takes only part of keeps the connection's writes in
order (the paced loop writes without waiting, and finishes a cut write in trio's turn); real sockets on
127.0.0.1."""

from __future__ import annotations

import socket

import trio

from mqtt_cli.net.bench import Conn


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sender.setblocking(False)
    return sender, receiver


def test_a_cut_write_is_finished_before_any_other() -> None:
    sender, receiver = _pair()
    conn = Conn(None, "c", sender)
    big = b"a" * 4_000_000  # far more than the kernel takes at once
    got = bytearray()

    async def main() -> None:
        with trio.fail_after(20):
            rest = conn.send_nowait(big)
            assert rest is not None and 0 < len(rest) < len(big)  # cut: this task holds the connection
            assert conn.send_nowait(b"late") is not None  # a write meanwhile takes nothing, and is handed back
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.send, b"PING")  # another task (the keepalive) waits its turn
                nursery.start_soon(drain)
                await trio.sleep(0.05)
                await conn.send_rest(rest)
            assert conn.send_nowait(b"!") is None  # all written: the next write goes at once

    async def drain() -> None:
        want = len(big) + len(b"PING")
        while len(got) < want:
            await trio.lowlevel.wait_readable(receiver)
            got.extend(receiver.recv(1 << 20))

    receiver.setblocking(False)
    try:
        trio.run(main)
    finally:
        sender.close()
        receiver.close()
    assert bytes(got[: len(big)]) == big and bytes(got[len(big) :]) == b"PING"


def test_a_whole_write_returns_nothing_to_finish() -> None:
    sender, receiver = _pair()
    conn = Conn(None, "c", sender)

    async def main() -> None:
        assert conn.send_nowait(b"\xc0\x00") is None
        assert not conn.lock.locked()

    try:
        trio.run(main)
        assert receiver.recv(10) == b"\xc0\x00"
    finally:
        sender.close()
        receiver.close()
