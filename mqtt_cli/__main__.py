"""Entry point of the ``mqtt`` console script, of ``python -m mqtt_cli`` and of the zipapp.

``mqtt --version`` is answered here, before typer (about 80 ms of imports) is loaded, so that it costs
little more than starting Python, and plain one-shot ``pub``, ``sub`` and ``rr`` go to the fast path
(:mod:`mqtt_cli.commands._fast`: no typer, rich or trio), which hands back whatever it does not fully
understand. Everything else goes to the typer app in :mod:`mqtt_cli.app`, where ``--version`` is also a real,
documented option giving the same answer. Completion requests (``_MQTT_COMPLETE``) always go to typer.

When the process is done, it ends without tearing the interpreter down (see :func:`_exit_now`): once typer,
trio and the core are loaded, that teardown (freeing every module, then garbage collection) took about
40 ms of a one-shot ``mqtt pub``'s 250.
"""

import gc
import os
import sys
from collections.abc import Sequence

from mqtt_cli import COMPLETE_VAR, version_text
from mqtt_cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK

#: Arguments answered without loading the app. Must stay in sync with the option in mqtt_cli/app.py.
_VERSION_ARGS = (["--version"], ["-V"])
#: Commands tried on the one-shot fast path first (mqtt_cli/commands/_fast.py), without typer, rich or trio.
_FAST_COMMANDS = ("pub", "sub", "rr")


def _run_fast(args: list[str]) -> int | None:
    """The fast path's exit code, or None when the command goes to typer."""
    # Start-up makes many objects and no garbage: collections then are wasted work (the fast path turns the
    # collector back on once connected, before it publishes or prints anything).
    gc.disable()
    try:
        try:
            from mqtt_cli.commands._fast import run
        except KeyboardInterrupt:  # Ctrl-C while importing
            return EXIT_INTERRUPTED
        return run(args)
    finally:
        gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mqtt`` command with ``argv`` (default: ``sys.argv[1:]``); return or raise the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in _VERSION_ARGS:
        sys.stdout.write(version_text() + "\n")
        return EXIT_OK
    if argv is None and args and args[0] in _FAST_COMMANDS and COMPLETE_VAR not in os.environ:
        try:
            code = _run_fast(args)
        except SystemExit as done:  # a usage error, said by `fail` as on the typer path
            _exit_now(done)
            raise
        if code is not None:
            _exit_now(SystemExit(code))
            return code
    collecting = gc.isenabled()  # (a program calling main() may have its own reason to keep it off)
    gc.disable()  # as on the fast path: no garbage to collect while importing
    try:
        from mqtt_cli.app import run
    except KeyboardInterrupt:  # Ctrl-C while importing
        return EXIT_INTERRUPTED
    finally:
        if collecting:
            gc.enable()
    if argv is not None:  # called from Python: leave the interpreter alone
        return run(args)
    try:
        return run(args)
    except SystemExit as done:
        _exit_now(done)  # returns when Python must end the process itself
        raise


def _exit_now(done: SystemExit) -> None:
    """End the process with ``done``'s exit code as Python would, less the interpreter's teardown.

    What the teardown would still do for us is done here: flushing standard output and error, and the
    atexit functions (logging's flush). When that is not enough (a thread other than a daemon one still
    runs, an exit code that is not a number, an output that fails to flush), this returns and Python ends
    the process the usual way. (No typing import here: it would cost ``mqtt --version`` 6 ms.)
    """
    import atexit
    import os

    code = 0 if done.code is None else done.code
    if not isinstance(code, int) or not 0 <= code <= 255:
        return
    threading = sys.modules.get("threading")
    if threading is not None and not all(t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # e.g. a closed pipe: Python reports it as it always did
        return
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
