"""`mqtt bench`'s system calls per message on plain TCP, without waiting: a read with its kernel arrival time, a
write, a timerfd's count. No trio here: both the trio tasks (net/bench.py's Conn, net/ticker.py) and the paced
loop (net/benchloop.py) call these, and the compiled build compiles them with the hot modules."""

from __future__ import annotations

import os
import platform
import socket
import struct
import sys
import time

from .readsize import READ_SIZE

# Receive timestamps: the socket module may not name SO_TIMESTAMPNS (3.11's does not); 35 is Linux's on the
# architectures with the generic socket options (SPARC, PA-RISC, Alpha and MIPS number them apart: the user clock).
_GENERIC_SOCKOPTS = ("x86_64", "i386", "i686", "aarch64", "arm", "riscv", "ppc", "s390", "loongarch")
SO_TIMESTAMPNS: int | None = getattr(
    socket,
    "SO_TIMESTAMPNS",
    35 if sys.platform == "linux" and platform.machine().lower().startswith(_GENERIC_SOCKOPTS) else None,
)
_SCM_TIMESTAMPNS: int | None = getattr(socket, "SCM_TIMESTAMPNS", SO_TIMESTAMPNS)
_TIMESPEC = struct.Struct("@ll")  # struct timespec
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)


class Read:
    """What one read returned, and when it arrived (wall clock, ns): the kernel's timestamp of the last segment
    read when `kernel`, else the time recv() returned."""

    __slots__ = ("data", "kernel", "now")

    def __init__(self, data: bytes, now: int, kernel: bool) -> None:
        self.data = data
        self.now = now
        self.kernel = kernel


def read_nowait(raw: socket.socket, stamped: bool) -> Read | None:
    """A read of what waits on a non-blocking socket (b"": closed by the peer), None when nothing does; with
    `stamped` (SO_TIMESTAMPNS on) through recvmsg, for the kernel's arrival time. OSError as the socket's."""
    try:
        if stamped:
            data, ancillary, _, _ = raw.recvmsg(READ_SIZE, _ANCILLARY)
            now = arrival(ancillary)
            if now is not None:
                return Read(data, now, True)
        else:
            data = raw.recv(READ_SIZE)
    except BlockingIOError:
        return None
    return Read(data, time.time_ns(), False)


def arrival(ancillary: list[tuple[int, int, bytes]] | None) -> int | None:
    """The kernel's receive timestamp (CLOCK_REALTIME ns) in recvmsg's ancillary data, or None."""
    if ancillary:
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SCM_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(data)
                return int(sec) * 1_000_000_000 + int(nsec)
    return None


def send_nowait(raw: socket.socket, data: bytes | memoryview) -> int:
    """The bytes of `data` a non-blocking socket takes now (0 when its buffer is full). OSError as the socket's."""
    try:
        return raw.send(data)
    except BlockingIOError:
        return 0


def timer_periods(fd: int) -> int:
    """The periods a non-blocking timerfd counted since the last read (0 for none)."""
    try:
        return int.from_bytes(os.read(fd, 8), sys.byteorder)
    except BlockingIOError:
        return 0
