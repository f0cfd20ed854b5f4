"""One module per command: parse flags, call into net/ capture/ pipeline/ core, render the result.

A command module imports only typer and the standard library at module level (mqtt_cli/app.py imports it
when the command is run or listed); anything heavier is imported inside the command function. This package
itself imports no typer: the one-shot fast path (``_fast``) runs the commands' checks without it.
"""

import sys
from typing import NoReturn

from mqtt_cli import PROG_NAME
from mqtt_cli.exit_codes import EXIT_FAILURE


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print ``mqtt: error: MESSAGE`` to standard error and exit with ``code``."""
    print(f"{PROG_NAME}: error: {message}", file=sys.stderr)
    raise SystemExit(code)  # not typer.Exit: the fast path has no typer; click lets SystemExit through alike
