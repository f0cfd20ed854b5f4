"""The broker's persistence commits, written by one thread of their own (net/server.py feeds it, net/store.py writes).

One commit runs at a time: the server hands a group of change records over (`start`), the thread writes them with
the store's `commit`, and tells the trio thread it is done through a socket pair, which the server's committer
task waits on (`wait`), then takes the outcome (`outcome`). A thread made once and fed by a queue costs the trio
thread a fraction of a `trio.to_thread.run_sync` per commit (no capacity limiter, thread cache, context copy or
rescheduling through the trio token), and the broker commits hundreds of times a second under QoS 2 load.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
from collections.abc import Callable

import trio

from mqtt_cli.core.persistence import Change

__all__ = ["CommitThread"]


class CommitThread:
    """Runs `commit(changes)` in its own thread, one group at a time, for the trio thread."""

    def __init__(self, commit: Callable[[list[Change]], None]) -> None:
        self._commit = commit
        self._jobs: queue.SimpleQueue[list[Change] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None  # what the last commit raised (None: written)
        self._done, self._signal = socket.socketpair()  # the thread writes a byte on `_signal` per commit done
        self._done.setblocking(False)
        self._fd = self._done.fileno()  # (an int: trio takes it as it is, with no fileno() call per wait)
        self.busy = False  # a group handed over, its outcome not taken yet
        self._thread = threading.Thread(target=self._run, name="mqtt persistence commits", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Woken by `start` while the trio thread holds the GIL, this thread would preempt it at once only to wait
        # for the GIL (on a busy core, twice the context switches per commit); batch scheduling does not preempt
        # on wake-up, so it runs when the trio thread waits. Only ever allowed to lower a thread's claim: no
        # privilege needed; where there is no such policy, nothing changes.
        if hasattr(os, "SCHED_BATCH"):
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # 0: the calling thread (Linux)
        while True:
            changes = self._jobs.get()
            if changes is None:
                return
            try:
                self._commit(changes)
            except BaseException as exc:  # a StoreError, or a bug: raised again in the trio thread
                self._error = exc
            self._signal.send(b"\0")

    def start(self, changes: list[Change]) -> None:
        """Hands a group over (none may be being written)."""
        assert not self.busy
        self.busy = True
        self._jobs.put(changes)

    async def wait(self) -> None:
        """Returns once the group handed over is written or failed (then `outcome`); at once if it already is."""
        await trio.lowlevel.wait_readable(self._fd)

    def outcome(self) -> None:
        """After `wait`: the group is on file, or this raises what its commit raised (a StoreError: not written)."""
        self._done.recv(1)
        self.busy = False
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Ends the thread once the group being written (if any) is done, then the trio thread may use the store.
        Raises what that group's commit raised, as `outcome` would."""
        self._jobs.put(None)
        self._thread.join()
        try:
            if self.busy:
                self.outcome()
        finally:
            self._done.close()
            self._signal.close()
