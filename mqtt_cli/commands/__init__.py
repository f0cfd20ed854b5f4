"""One module per command: parse flags, call into net/ capture/ pipeline/ core, render the result.

A command module imports only typer and the standard library at module level (mqtt_cli/app.py imports it
when the command is run or listed); anything heavier is imported inside the command function. This package
itself imports no typer: the one-shot fast path (``_fast``) runs the commands' checks without it.
"""

import sys
from typing import NoReturn

from mqtt_cli import PROG_NAME
from mqtt_cli.exit_codes import EXIT_FAILURE


def say(text: str, end: str = "\n") -> None:
    """`text` on standard error, at once. When that cannot be written (a full disk, a closed pipe) nothing more is
    said: the exit code still tells what happened, and it must stay the one the command documents (an error
    escaping here would make it 1)."""
    err = sys.stderr
    if err is None:  # started with it closed (2>&-)
        return
    try:
        err.write(text + end)
        err.flush()
    except (OSError, ValueError):  # (ValueError: closed since)
        pass


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print ``mqtt: error: MESSAGE`` to standard error and exit with ``code``."""
    say(f"{PROG_NAME}: error: {message}")
    raise SystemExit(code)  # not typer.Exit: the fast path has no typer; click lets SystemExit through alike
