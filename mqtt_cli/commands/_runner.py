"""Running a client command: trio.run, and errors turned into one line and a documented exit code.

Imported inside command functions only (it imports trio).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio
import typer

from mqtt_cli import PROG_NAME
from mqtt_cli.net.errors import ClientError

EXIT_INTERRUPTED = 130


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out += _flatten(inner)
        return out
    return [exc]


def error(message: str) -> None:
    print(f"{PROG_NAME}: error: {message}", file=sys.stderr, flush=True)


def run_client(main: Callable[[], Awaitable[int]]) -> NoReturn:
    """Runs `main` under trio and exits with its code; a ClientError exits with its own code after saying what
    went wrong, Ctrl-C with 130, a closed standard output (`| head`) quietly with 0."""
    try:
        code = trio.run(main)
    except BaseException as exc:
        if isinstance(exc, typer.Exit | SystemExit):
            raise
        found = _flatten(exc)
        if any(isinstance(e, KeyboardInterrupt) for e in found):
            raise typer.Exit(EXIT_INTERRUPTED) from None
        for e in found:
            if isinstance(e, typer.Exit):
                raise e from None
        for e in found:
            if isinstance(e, ClientError):
                error(str(e))
                raise typer.Exit(e.exit_code) from None
        if all(isinstance(e, BrokenPipeError) for e in found):
            _quiet_stdout()
            raise typer.Exit(0) from None
        if len(found) == 1 and found[0] is not exc:
            raise found[0] from None
        raise
    raise typer.Exit(code)


def _quiet_stdout() -> None:
    # Python would complain again when flushing stdout at exit.
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
