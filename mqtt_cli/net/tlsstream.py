"""TLS over a trio socket, ours: an `ssl.SSLObject` on two memory BIOs (`SSLContext.wrap_bio`).

    stream = TLSStream(tcp_stream, ssl_context)        # server side; server_side=False, server_hostname=... a client
    await stream.do_handshake()
    sent = stream.send_nowait(data)                   # encrypted and written at once, from any task
    data = stream.receive_nowait(65536)               # what the socket and TLS hold, None if nothing yet

It is a `trio.abc.Stream` (send_all, receive_some, aclose), and besides, like a plain socket under
transports.send_direct and receive_direct, it sends and reads without waiting, outside any task: the broker
answers a read's packets and delivers them from the task that read them, over TLS as over plain TCP. (trio's
SSLStream sends only from a task, after a pass of the scheduler.) `fileno()` is its socket's, for
`trio.lowlevel.wait_readable`.

The rules that keep that right:
- send_nowait(data) returns len(data) once all of it left, else 0 (nothing taken yet, as far as the caller is
  concerned). What it encrypted and the socket did not take waits here, and the caller offers the same bytes again
  (with more after them, if it likes), as OpenSSL's own non-blocking SSL_write wants: the next send_nowait or
  send_all skips what was encrypted already and sends those records first.
- receive_nowait(n) returns n bytes exactly when TLS may hold more (read again at once), fewer only when it needs
  more from the socket (then wait for it to be readable): a socket read can hold many records, all decrypted in
  one call. The handshake reads record by record, so that nothing the peer sent after it (its first request)
  waits in TLS's buffers unseen by a wait on the socket.
- Bytes TLS wants to send that no send asked for (session tickets after the handshake, a key update's answer) go
  the same way: written at once when the socket takes them, else before the next send's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import ssl
from typing import Any

import trio
from trio.lowlevel import wait_writable

__all__ = ["TLSStream"]

_HEADER = 5  # a TLS record's header: content type, version, length (2 bytes)


class TLSStream(trio.abc.Stream):
    """TLS over a trio SocketStream (TCP or Unix); see the module's notes. Errors: BrokenResourceError from the
    ssl.SSLError (a failed handshake, a corrupt record) or from the socket's OSError; ClosedResourceError once
    closed. send_nowait and receive_nowait raise as transports.send_direct and receive_direct do."""

    __slots__ = ("_broken", "_closed", "_covered", "_ended", "_handshook", "_https_compatible", "_incoming",
                 "_outgoing", "_rest", "_sending", "_ssl", "socket", "transport_stream")  # fmt: skip

    def __init__(
        self,
        transport_stream: trio.SocketStream,
        context: ssl.SSLContext,
        *,
        server_side: bool = True,
        server_hostname: str | None = None,
        https_compatible: bool = False,
    ) -> None:
        self.transport_stream = transport_stream
        self.socket = transport_stream.socket
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        # As trio's SSLStream: a peer may end without close_notify (browsers do), which is then an end, not an error.
        self._https_compatible = https_compatible
        self._handshook = False
        self._rest = b""  # encrypted bytes the socket has not taken yet: they go before any others
        self._covered = 0  # of the caller's next offer, how many bytes were encrypted already (send_nowait)
        self._sending = False  # a send_all waits for the socket: nothing else writes to it meanwhile
        self._broken = False
        self._closed = False
        self._ended = False  # the peer's data ended (close_notify)

    # --- what the SSL object knows ---------------------------------------------------------------------------

    def fileno(self) -> int:
        """The socket's descriptor, for trio.lowlevel.wait_readable (-1 once closed)."""
        return self.socket.fileno()

    def getpeercert(self) -> Any:
        """The verified peer certificate (ssl.SSLObject.getpeercert), after the handshake."""
        return self._ssl.getpeercert()

    def selected_alpn_protocol(self) -> str | None:
        return self._ssl.selected_alpn_protocol()

    def version(self) -> str | None:
        return self._ssl.version()

    def cipher(self) -> tuple[str, str, int] | None:
        return self._ssl.cipher()

    # --- handshake -----------------------------------------------------------------------------------------

    async def do_handshake(self) -> None:
        """The TLS handshake, if not done yet (the caller bounds its time). Reads one record at a time: what the
        peer sends after it stays in the socket, where a wait for readability sees it."""
        if self._handshook:
            await trio.lowlevel.checkpoint()
            return
        self._check_open()
        ssl_object = self._ssl
        left = 0  # bytes of the record being read still to come (0: its header next)
        while True:
            try:
                ssl_object.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ssl.CertificateError) as exc:
                self._broken = True
                raise trio.BrokenResourceError from exc
            # Its flight first, then what the peer answers.
            self._rest += self._outgoing.read()
            await self._write_rest()
            if left == 0:
                header = await self._receive_exactly(_HEADER)
                self._incoming.write(header)  # checked at once: a peer that does not speak TLS fails here
                left = int.from_bytes(header[3:5], "big") if len(header) == _HEADER else 0
            else:
                body = await self._receive_exactly(left)
                self._incoming.write(body)
                left -= len(body)
        self._handshook = True
        # TLS 1.3's session tickets, now or before the first send (a peer need not read them to go on).
        self._rest += self._outgoing.read()
        self._write_rest_nowait()

    async def _receive_exactly(self, size: int) -> bytes:
        """`size` bytes from the socket, fewer only at its end (then TLS is told of the end)."""
        data = b""
        while len(data) < size:
            try:
                more = await self.socket.recv(size - len(data))
            except OSError as exc:
                self._broken = True
                raise trio.BrokenResourceError from exc
            if not more:
                self._incoming.write_eof()
                break
            data += more
        return data

    # --- sending -------------------------------------------------------------------------------------------

    def send_nowait(self, data: bytes | bytearray | memoryview) -> int:
        """`data` encrypted and written with non-blocking sends, from any task: len(data) when all of it left,
        else 0, and the same bytes must come again at the head of the next send_nowait or send_all (see the
        module's notes). Raises OSError when the stream is broken or closed, as transports.send_direct does."""
        if self._sending:
            return 0
        if self._broken or self._closed:
            raise OSError("the TLS stream is broken or closed")
        if self._rest and not self._write_rest_nowait():
            return 0
        covered, self._covered = self._covered, 0
        size = len(data)
        if size < covered:
            self._broken = True
            raise OSError("send_nowait: offered fewer bytes than it took before")
        if size == covered:
            return size
        try:
            self._ssl.write(data[covered:] if covered else data)
        except ssl.SSLError as exc:
            self._broken = True
            raise OSError(f"TLS: {exc}") from exc
        records = self._outgoing.read()
        try:
            sent = os.write(self._descriptor(), records)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._broken = True
            raise
        if sent == len(records):
            return size
        self._rest = records[sent:]
        self._covered = size
        return 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this TLS stream")
        self._sending = True
        try:
            self._check_open()
            if not self._handshook:
                await self.do_handshake()
            covered, self._covered = self._covered, 0
            if len(data) < covered:
                self._broken = True
                raise trio.BrokenResourceError("send_all: offered fewer bytes than send_nowait took")
            if len(data) > covered:
                try:
                    self._ssl.write(data[covered:] if covered else data)
                except ssl.SSLError as exc:
                    self._broken = True
                    raise trio.BrokenResourceError from exc
                self._rest += self._outgoing.read()
            await self._write_rest()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        await wait_writable(self.socket)

    def _write_rest_nowait(self) -> bool:
        """As much of `_rest` as the socket takes now (not while a send_all writes it); True once it is empty."""
        if self._sending:
            return not self._rest
        fd = self.socket.fileno()
        if fd < 0:
            return False
        try:
            sent = os.write(fd, self._rest)
        except BlockingIOError:
            return False
        except OSError:
            self._broken = True
            raise
        self._rest = self._rest[sent:]
        return not self._rest

    async def _write_rest(self) -> None:
        """All of `_rest`, waiting for the socket as needed (and for what is added meanwhile)."""
        while self._rest:
            fd = self.socket.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the TLS stream is closed")
            try:
                sent = os.write(fd, self._rest)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._broken = True
                raise trio.BrokenResourceError from exc
            self._rest = self._rest[sent:]
            if self._rest:
                try:
                    await wait_writable(self.socket)
                except BaseException:
                    self._broken = True  # (cancelled mid-record: nothing more can follow it)
                    raise
        await trio.lowlevel.checkpoint()

    # --- receiving -----------------------------------------------------------------------------------------

    def receive_nowait(self, max_bytes: int) -> bytes | None:
        """Up to `max_bytes` of plaintext from what TLS holds and the socket has now, without waiting: b"" at the
        end of the stream, None when nothing is there yet (wait for the socket to be readable, then again). Exactly
        `max_bytes` when more may be held (read again at once). Raises ClosedResourceError once closed and
        BrokenResourceError (from the SSLError) or OSError when it failed, as transports.receive_direct does."""
        if self._ended:
            return b""
        ssl_object = self._ssl
        incoming = self._incoming
        pieces: list[bytes] = []
        got = 0
        drained = False  # the socket gave less than asked (or nothing): it holds nothing more now
        ended = False
        # Nothing held to decrypt: the socket first (a read of TLS would fail, an exception each time).
        empty = not incoming.pending and not ssl_object.pending()
        while True:
            if empty:
                if drained:
                    break
                fd = self.socket.fileno()
                if fd < 0:
                    raise trio.ClosedResourceError("the TLS stream is closed")
                try:
                    records = os.read(fd, max_bytes)
                except BlockingIOError:
                    break
                if records:
                    incoming.write(records)
                    drained = len(records) < max_bytes
                else:
                    incoming.write_eof()
                    drained = True
            try:
                piece = ssl_object.read(max_bytes - got)
            except ssl.SSLWantReadError:  # (a record not whole yet)
                empty = True
                continue
            except ssl.SSLEOFError as exc:  # the socket ended without close_notify
                if not self._https_compatible:
                    self._broken = True
                    raise trio.BrokenResourceError from exc
                piece = b""
            except ssl.SSLError as exc:
                self._broken = True
                raise trio.BrokenResourceError from exc
            if not piece:  # the end (close_notify, or as above): this call's last bytes, then b"" for good
                self._ended = ended = True
                break
            pieces.append(piece)
            got += len(piece)
            if got >= max_bytes:
                break
            empty = not incoming.pending and not ssl_object.pending()
        if self._outgoing.pending:  # what reading made TLS answer (a key update)
            self._rest += self._outgoing.read()
            with contextlib.suppress(OSError):  # (the read's outcome first: a send finds out)
                self._write_rest_nowait()
        if got:
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return b"" if ended else None

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        self._check_open()
        if not self._handshook:
            await self.do_handshake()
        size = max_bytes or 65536
        while True:
            try:
                data = self.receive_nowait(size)
            except OSError as exc:
                self._broken = True
                raise trio.BrokenResourceError from exc
            if data is not None:
                await trio.lowlevel.checkpoint()
                return data
            await trio.lowlevel.wait_readable(self.socket)

    # --- closing -------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """close_notify (when the handshake was done and nothing failed; not for https_compatible, as trio's
        SSLStream), sent as far as the socket takes it without waiting, then the socket closed."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if self._handshook and not self._broken and not self._https_compatible and not self._sending:
                with contextlib.suppress(ssl.SSLError):  # (SSLWantReadError: the peer's is not waited for)
                    self._ssl.unwrap()
                self._rest += self._outgoing.read()
                with contextlib.suppress(OSError):
                    self._write_rest_nowait()
        finally:
            await self.transport_stream.aclose()

    def _descriptor(self) -> int:
        """The socket's descriptor as it is now: OSError once it was closed (a number reused is never written)."""
        fd = self.socket.fileno()
        if fd < 0:
            raise OSError(errno.EBADF, "the stream is closed")
        return fd

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
        if self._broken:
            raise trio.BrokenResourceError("the TLS stream failed before")
