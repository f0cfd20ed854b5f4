"""A periodic timer for trio with the kernel's precision: a Linux timerfd (through ctypes: the os module has none
before Python 3.13). trio's own sleeps tick in milliseconds (epoll's timeout), which would send 10,000 messages a
second in bursts of ten; a timerfd wakes the loop on time, and a blocking sleep would stop the loop's other
tasks meanwhile."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import time

import trio

from .benchio import timer_periods

_CLOCK_MONOTONIC = 1
_TFD_CLOEXEC = 0o2000000
_TFD_NONBLOCK = 0o4000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.timerfd_create  # noqa: B018 (present?)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def _timespec(ns: int) -> _Timespec:
    return _Timespec(ns // 1_000_000_000, ns % 1_000_000_000)


class Ticker:
    """Fires every `interval_ns` from `first_ns` (CLOCK_MONOTONIC, as time.monotonic_ns())."""

    def __init__(self, fd: int, first_ns: int, interval_ns: int) -> None:
        self.fd = fd
        self.next_ns = first_ns  # when the next period not yet counted ends
        self.interval_ns = interval_ns

    @classmethod
    def start(cls, first_ns: int, interval_ns: int) -> Ticker | None:
        """A running ticker, or None where there is no timerfd (not Linux, no descriptor left)."""
        if _LIBC is None or interval_ns <= 0:
            return None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return None
        spec = _Itimerspec(_timespec(interval_ns), _timespec(max(1, first_ns)))
        if _LIBC.timerfd_settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            os.close(fd)
            return None
        return cls(fd, first_ns, interval_ns)

    async def wait(self) -> int:
        """The number of periods that ended since the last call (at least 1), once one has."""
        fd = self.fd
        # Before the next period ends, a read would find nothing (a system call and an exception for nothing):
        # then wait first.
        if time.monotonic_ns() < self.next_ns:
            await trio.lowlevel.wait_readable(fd)
        while not (periods := self.read_nowait()):
            await trio.lowlevel.wait_readable(fd)
        return periods

    def read_nowait(self) -> int:
        """The number of periods that ended since the last call (0 for none), without waiting."""
        periods = timer_periods(self.fd)
        self.next_ns += periods * self.interval_ns
        return periods

    def close(self) -> None:
        trio.lowlevel.notify_closing(self.fd)
        os.close(self.fd)
