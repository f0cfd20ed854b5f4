"""The broker's persistence commits, written by one thread of their own (net/server.py feeds it, net/store.py writes).

One commit runs at a time: the server hands a group of change records over (`start`), the thread writes them with
the store's `commit`, sets `done` and writes a byte on a socket pair, whose trio end (`fd`) the server's committer
task waits on; it then takes the byte (`drain`) and the outcome (`outcome`). A thread made once and fed by a queue
costs the trio thread a fraction of a `trio.to_thread.run_sync` per commit (no capacity limiter, thread cache,
context copy or rescheduling through the trio token), and the broker commits hundreds of times a second under QoS 2
load.

The byte is a wake-up, not the outcome: `poke` writes one from the trio thread (to wake the task for something
else), and the task may take a group's outcome before its byte is read. So the waiting task, once `fd` is readable,
drains every byte there is and then looks at `done`; a byte with nothing done behind it is a harmless extra turn.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable

import trio

from mqtt_cli.core.persistence import Change

__all__ = ["CommitThread"]

# Bytes taken at most per `drain` (one per group done or poke: a few at most are ever waiting).
_DRAIN = 64


class CommitThread:
    """Runs `commit(changes)` in its own thread, one group at a time, for the trio thread."""

    def __init__(self, commit: Callable[[list[Change]], None]) -> None:
        self._commit = commit
        self._jobs: queue.SimpleQueue[list[Change] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None  # what the last commit raised (None: written)
        self._done, self._signal = socket.socketpair()  # a byte on `_signal` per group done (or poke)
        self._done.setblocking(False)
        self._signal.setblocking(False)  # (a poke must never block the trio thread)
        self.fd = self._done.fileno()  # readable once a group is done or after a poke (an int: trio takes it as is)
        self.busy = False  # a group handed over, its outcome not taken yet
        self.done = False  # that group is written or failed: `outcome` takes it (set before its byte is written)
        self._thread = threading.Thread(target=self._run, name="mqtt persistence commits", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        jobs = self._jobs
        signal = self._signal
        while True:
            changes = jobs.get()
            if changes is None:
                return
            try:
                self._commit(changes)
            except BaseException as exc:  # a StoreError, or a bug: raised again in the trio thread
                self._error = exc
            self.done = True  # before the byte: whoever reads the byte sees it
            try:  # noqa: SIM105 (a plain try: once per commit)
                signal.send(b"\0")
            except BlockingIOError:  # (a full buffer: `fd` is readable already)
                pass

    def start(self, changes: list[Change]) -> None:
        """Hands a group over (none may be being written)."""
        assert not self.busy
        self.busy = True
        self._jobs.put(changes)

    def poke(self) -> None:
        """Makes `fd` readable with no group done (the trio thread wakes its waiter for something else)."""
        with contextlib.suppress(BlockingIOError):  # (a full buffer: `fd` is readable already)
            self._signal.send(b"\1")

    def drain(self) -> None:
        """After `fd` was readable: takes the bytes waiting, so that it is readable again only for what comes next.
        Then `done` says whether the group handed over is done."""
        try:  # noqa: SIM105 (a plain try: once per commit, in the trio thread)
            self._done.recv(_DRAIN)
        except BlockingIOError:  # taken already by an earlier drain (a spurious readiness)
            pass

    async def wait(self) -> None:
        """Returns once the group handed over is written or failed (then `outcome`); at once if it already is."""
        while not self.done:
            await trio.lowlevel.wait_readable(self.fd)
            self.drain()

    def outcome(self) -> None:
        """Once `done`: the group is on file, or this raises what its commit raised (a StoreError: not written)."""
        assert self.done
        self.busy = self.done = False
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
