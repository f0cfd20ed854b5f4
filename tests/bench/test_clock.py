"""Where `mqtt bench` takes a message's receive time: the kernel's arrival timestamp (SO_TIMESTAMPNS) on plain TCP
on Linux, else the wall clock as recv() returned; real sockets on 127.0.0.1."""

from __future__ import annotations

import socket
import sys
import time

import pytest
import trio

from mqtt_cli.net.bench import Conn
from mqtt_cli.net.benchio import arrival


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    receiver.setblocking(False)
    return sender, receiver


async def _read_after(conn: Conn, sender: socket.socket, delay: float) -> tuple[int, int, int]:
    """(sent before, the read's time, clock after the read) for bytes that wait `delay` s in the kernel."""
    before = time.time_ns()
    sender.send(b"\x30\x03\x00\x01a")
    await trio.sleep(delay)
    with trio.fail_after(5):
        _, stamped = await conn.receive()
    return before, stamped, time.time_ns()


@pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")
def test_the_kernel_path_gives_the_kernel_arrival_time() -> None:
    sender, receiver = _pair()
    conn = Conn(None, "c", receiver)
    try:
        assert conn.timestamp_arrivals()
        before, stamped, after = trio.run(_read_after, conn, sender, 0.2)
    finally:
        sender.close()
        receiver.close()
    assert conn.kernel_stamp
    # The bytes arrived right after the send; the read came 0.2 s later: the time is the arrival's.
    assert before <= stamped < before + 100_000_000 and after - stamped >= 190_000_000


def test_without_kernel_timestamps_the_user_clock_is_used() -> None:
    sender, receiver = _pair()
    conn = Conn(None, "c", receiver)  # timestamping never asked for: as `--clock user`
    try:
        before, stamped, after = trio.run(_read_after, conn, sender, 0.2)
    finally:
        sender.close()
        receiver.close()
    assert not conn.kernel_stamp
    assert before + 190_000_000 <= stamped <= after  # the time of the read, not of the arrival
    assert not Conn(None, "c").timestamp_arrivals()  # a stream (TLS, WebSocket): no kernel timestamps


def test_arrival_reads_only_a_timestamp_record() -> None:
    assert arrival(None) is None and arrival([]) is None
    assert arrival([(socket.SOL_SOCKET + 1, 35, b"\x00" * 16)]) is None


@pytest.mark.skipif(sys.platform != "linux", reason="timerfd is Linux's")
def test_the_ticker_counts_the_periods_that_ended() -> None:
    """Sub-millisecond pacing comes from a timerfd: each wait returns how many periods ended (the due messages),
    with the kernel's precision rather than trio's millisecond sleeps."""
    from mqtt_cli.net.ticker import Ticker

    async def main() -> tuple[int, int, float]:
        ticker = Ticker.start(time.monotonic_ns(), 200_000)  # every 0.2 ms, from now
        assert ticker is not None
        try:
            with trio.fail_after(5):
                first = await ticker.wait()
                time.sleep(0.05)  # 250 periods end meanwhile
                backlog = await ticker.wait()
                t0 = time.monotonic()
                await ticker.wait()
                return first, backlog, time.monotonic() - t0
        finally:
            ticker.close()

    first, backlog, next_wait = trio.run(main)
    assert first >= 1 and 200 <= backlog <= 400 and next_wait < 0.05
