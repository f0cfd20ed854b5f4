"""Our TLS stream (net/tlsstream.py) against trio's SSLStream or a bare ssl.SSLObject, over a real socket pair:
many records decrypted in one read, the handshake leaving the peer's first bytes in the socket, a send the
socket did not take offered again, close_notify and an end without it, and its client side."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trustme
from trio.lowlevel import wait_readable

from mqtt_cli.net.tlsstream import TLSStream

CA = trustme.CA()
CERT = CA.issue_cert("localhost")


def server_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    CERT.configure_cert(ctx)
    return ctx


def client_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    CA.configure_trust(ctx)
    return ctx


def socket_pair(buffer: int = 0) -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    if buffer:
        for sock in (a, b):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    return trio.SocketStream(a), trio.SocketStream(b)


@asynccontextmanager
async def connected(buffer: int = 0, https_compatible: bool = False) -> AsyncIterator[tuple[TLSStream, trio.SSLStream]]:
    """Ours (server side) and trio's (client side), handshake done."""
    ours_side, theirs_side = socket_pair(buffer)
    ours = TLSStream(ours_side, server_context(), https_compatible=https_compatible)
    theirs = trio.SSLStream(theirs_side, client_context(), server_hostname="localhost")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ours.do_handshake)
            await theirs.do_handshake()
    try:
        yield ours, theirs
    finally:
        await trio.aclose_forcefully(ours)
        await trio.aclose_forcefully(theirs)


async def test_one_read_decrypts_every_record_the_socket_holds() -> None:
    async with connected() as (ours, theirs):
        for n in range(100):  # one record each
            await theirs.send_all(b"%03d" % n)
        await wait_readable(ours)
        assert ours.receive_nowait(65536) == b"".join(b"%03d" % n for n in range(100))
        assert ours.receive_nowait(65536) is None  # nothing more yet
        # Exactly the size asked when more is held: the rest comes with the next call, without waiting.
        await theirs.send_all(b"x" * 1000)
        await wait_readable(ours)
        assert ours.receive_nowait(600) == b"x" * 600
        assert ours.receive_nowait(600) == b"x" * 400


async def test_the_peers_first_bytes_after_the_handshake_wait_in_the_socket() -> None:
    """A client's Finished and its first request in one write: the handshake takes the Finished only, so that a
    wait for the socket to be readable sees the request (the broker waits before it reads)."""
    ours_side, theirs_side = socket_pair()
    ours = TLSStream(ours_side, server_context())
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ours.do_handshake)
            while True:
                try:
                    client.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if outgoing.pending:
                        await theirs_side.send_all(outgoing.read())
                    incoming.write(await theirs_side.receive_some(65536))
            client.write(b"CONNECT")
            await theirs_side.send_all(outgoing.read())  # its Finished and the request, in one write
    with trio.fail_after(2):
        await wait_readable(ours)
    assert ours.receive_nowait(65536) == b"CONNECT"
    await ours.aclose()
    await theirs_side.aclose()


async def test_what_the_socket_did_not_take_goes_first_when_offered_again() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: more than both socket buffers
    async with connected(buffer=16384) as (ours, theirs):
        assert ours.send_nowait(payload) == 0  # encrypted, partly sent: the caller keeps it and offers it again
        received = bytearray()

        async def read(total: int) -> None:
            while len(received) < total:
                received.extend(await theirs.receive_some(65536))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, len(payload))
            while (sent := ours.send_nowait(payload)) == 0:  # (the same bytes: not encrypted twice)
                await trio.sleep(0.01)
            assert sent == len(payload)
        assert received == payload
        # A rest left to send_all: then its own bytes, after it.
        assert ours.send_nowait(payload) == 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, 2 * len(payload) + 4)
            await ours.send_all(payload + b"tail")
        assert received == payload + payload + b"tail"


async def test_close_notify_both_ways() -> None:
    async with connected() as (ours, theirs):
        await theirs.send_all(b"bye")
        await theirs.aclose()  # its close_notify: the end, not an error
        await wait_readable(ours)
        assert ours.receive_nowait(65536) == b"bye"
        assert await ours.receive_some() == b""
    async with connected() as (ours, theirs):
        await ours.aclose()
        assert await theirs.receive_some() == b""  # trio's SSLStream raises for an end without close_notify


@pytest.mark.parametrize("https_compatible", [False, True])
async def test_an_end_without_close_notify(https_compatible: bool) -> None:
    async with connected(https_compatible=https_compatible) as (ours, theirs):
        await ours.send_all(b"x")
        assert await theirs.receive_some() == b"x"  # (with the session tickets: none unread, no reset)
        await theirs.transport_stream.aclose()
        if https_compatible:  # (browsers end so: an end for wss://)
            assert await ours.receive_some() == b""
        else:
            with pytest.raises(trio.BrokenResourceError) as caught:
                await ours.receive_some()
            assert isinstance(caught.value.__cause__, ssl.SSLEOFError)


async def test_a_peer_that_does_not_speak_tls_fails_the_handshake_at_once() -> None:
    ours_side, theirs_side = socket_pair()
    ours = TLSStream(ours_side, server_context())
    await theirs_side.send_all(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")  # a CONNECT, and no more
    with trio.fail_after(2), pytest.raises(trio.BrokenResourceError) as caught:
        await ours.do_handshake()
    assert isinstance(caught.value.__cause__, ssl.SSLError)
    await ours.aclose()
    await theirs_side.aclose()


async def test_client_side_against_trio_server() -> None:
    ours_side, theirs_side = socket_pair()
    ours = TLSStream(ours_side, client_context(), server_side=False, server_hostname="localhost")
    theirs = trio.SSLStream(theirs_side, server_context(), server_side=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(theirs.do_handshake)
            await ours.do_handshake()
        await ours.send_all(b"ping")
        assert await theirs.receive_some() == b"ping"
        await theirs.send_all(b"pong")
        assert await ours.receive_some() == b"pong"
    await ours.aclose()
    await theirs.aclose()
