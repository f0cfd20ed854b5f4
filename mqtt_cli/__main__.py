"""Entry point of the ``mqtt`` console script, of ``python -m mqtt_cli`` and of the zipapp.

``mqtt --version`` is answered here, before typer (about 80 ms of imports) is loaded, so that it costs
little more than starting Python. Everything else goes to the typer app in :mod:`mqtt_cli.app`, where
``--version`` is also a real, documented option giving the same answer.
"""

import sys
from collections.abc import Sequence

from mqtt_cli import version_text

#: Arguments answered without loading the app. Must stay in sync with the option in mqtt_cli/app.py.
_VERSION_ARGS = (["--version"], ["-V"])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mqtt`` command with ``argv`` (default: ``sys.argv[1:]``); return or raise the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in _VERSION_ARGS:
        sys.stdout.write(version_text() + "\n")
        return 0
    try:
        from mqtt_cli.app import run
    except KeyboardInterrupt:  # Ctrl-C while importing
        return 130
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
