"""Running a client command: trio.run, and errors turned into one line and a documented exit code.

Imported inside command functions only (it imports trio).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn

import trio
import typer

from mqtt_cli import PROG_NAME
from mqtt_cli.commands import say
from mqtt_cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED
from mqtt_cli.net.errors import ClientError

if TYPE_CHECKING:
    from mqtt_cli.net.client import Client, ClientSettings


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out += _flatten(inner)
        return out
    return [exc]


def error(message: str) -> None:
    say(f"{PROG_NAME}: error: {message}")


class _Stop:
    """SIGINT/SIGTERM for a client command. The first signal cancels the command's work (the block of
    `connected()`), inside its connection, so that open_client() still sends DISCONNECT while the connection's
    tasks run (the broker then drops the will); a second one, or a signal before there is a connection, ends
    everything at once.

    Not KeyboardInterrupt: trio delivers it to the main task wherever that task waits, the DISCONNECT being
    written included, and the will would then go out after a Ctrl-C (seen about one time in four with pub -l)."""

    def __init__(self) -> None:
        self.signal: int | None = None  # the first signal received while there was work to stop
        self.scope: trio.CancelScope | None = None  # the work, while it runs
        self.finishing = False  # the work is done: the connection is saying goodbye


_STOP = _Stop()


@contextlib.asynccontextmanager
async def connected(settings: ClientSettings) -> AsyncIterator[Client]:
    """open_client() for a client command: its block is the command's work, which a signal cancels while the
    connection goes on, to send DISCONNECT when the block is left."""
    from mqtt_cli.net.client import open_client

    async with open_client(settings) as client:
        with trio.CancelScope() as scope:
            _STOP.scope = scope
            try:
                yield client
            finally:
                _STOP.scope = None
                _STOP.finishing = True


async def _with_signals(main: Callable[[], Awaitable[int]]) -> int:
    code = 0
    async with trio.open_nursery() as nursery:

        async def work() -> None:
            nonlocal code
            code = await main()
            nursery.cancel_scope.cancel()

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                seen = 0
                async for signum in received:
                    seen += 1
                    if seen == 1 and _STOP.finishing:
                        continue  # the work is done (its result stands): DISCONNECT is on its way, 2 s at most
                    if seen == 1 and _STOP.scope is not None:
                        _STOP.signal = signum
                        _STOP.scope.cancel()
                        continue
                    _STOP.signal = _STOP.signal or signum
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(watch)
        nursery.start_soon(work)
    return code


def run_client(main: Callable[[], Awaitable[int]]) -> NoReturn:
    """Runs `main` under trio and exits with its code; a ClientError exits with its own code after saying what
    went wrong, SIGINT (Ctrl-C) with 130 and SIGTERM with 143 (both after a clean DISCONNECT), a closed
    standard output (`| head`) quietly with 0."""

    _STOP.__init__()  # type: ignore[misc]  # a fresh state for each run (tests run commands in one process)

    def stopped() -> NoReturn:
        raise typer.Exit(EXIT_TERMINATED if _STOP.signal == signal.SIGTERM else EXIT_INTERRUPTED)

    try:
        code = trio.run(_with_signals, main)
    except BaseException as exc:
        if _STOP.signal is not None:
            stopped()  # what the cancelled work raised on its way out does not matter
        if isinstance(exc, typer.Exit | SystemExit):
            raise
        found = _flatten(exc)
        if any(isinstance(e, KeyboardInterrupt) for e in found):
            raise typer.Exit(EXIT_INTERRUPTED) from None
        for e in found:
            if isinstance(e, typer.Exit | SystemExit):
                raise e from None
        for e in found:
            if isinstance(e, ClientError):
                error(str(e))
                raise typer.Exit(e.exit_code) from None
        if all(isinstance(e, BrokenPipeError) for e in found):
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None
        if len(found) == 1 and found[0] is not exc:
            raise found[0] from None
        raise
    if _STOP.signal is not None:
        stopped()
    raise typer.Exit(code)


def _quiet_stdout() -> None:
    # Python would complain again when flushing stdout at exit.
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
