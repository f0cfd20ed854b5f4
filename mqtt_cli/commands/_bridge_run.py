"""Running bridges under trio: signals, the status line or JSON status, exit codes. Imported by
``mqtt bridge`` once its flags are checked (it imports trio)."""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

import trio
import typer

from mqtt_cli.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED
from mqtt_cli.net.bridge import Bridge, BridgeConfig, BridgeError, BridgeLog
from mqtt_cli.net.errors import ClientError
from mqtt_cli.net.log import stderr_descriptor, write_all

from ._runner import _flatten, _quiet_stdout


def run(configs: list[BridgeConfig], *, json_status: bool, interval: float, quiet: bool) -> None:
    global _LOG
    _LOG = BridgeLog(stderr_descriptor(), prefix="mqtt: ")
    log = (lambda line: None) if quiet else _log_line
    bridges = [Bridge(c, log=log) for c in configs]
    try:
        code = trio.run(_main, bridges, json_status, interval)
    except BridgeError as err:
        _LOG(f"error: {err}")  # as commands.fail says it, but lost rather than raised if it cannot be written
        raise typer.Exit(EXIT_FAILURE) from None
    except ClientError as err:
        _LOG(f"error: {err}")
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        _LOG.close()
    raise typer.Exit(code)


_status_shown = False
#: The log, on standard error; lines it cannot write are dropped and counted, the bridges go on (net/bridge.py).
_LOG = BridgeLog(-1, prefix="mqtt: ")
_CLEAR = "\r\x1b[2K"  # a terminal's line cleared: the status line gives way to a log line, then comes back


def _log_line(line: str) -> None:
    global _status_shown
    _LOG(line, _CLEAR if _status_shown else "")
    _status_shown = False


def _to_terminal(text: str) -> None:
    """The status line on standard error (a terminal): lost if it cannot be written, as a log line is."""
    write_all(_LOG.fd, text.encode("utf-8", "backslashreplace"))


async def _main(bridges: list[Bridge], json_status: bool, interval: float) -> int:
    stop = trio.Event()
    interrupted = False
    try:
        async with trio.open_nursery() as nursery:

            async def one(bridge: Bridge) -> None:
                await bridge.run(stop)

            async def signals() -> None:
                nonlocal interrupted
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                    async for _ in received:
                        if stop.is_set():
                            interrupted = True  # a second signal: leave now
                            nursery.cancel_scope.cancel()
                            return
                        stop.set()

            nursery.start_soon(signals)
            nursery.start_soon(_status, bridges, json_status, interval, stop)
            async with trio.open_nursery() as running:
                for b in bridges:
                    running.start_soon(one, b)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        leaves = _flatten(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise
    finally:
        _clear_status()
    return EXIT_INTERRUPTED if interrupted else 0


async def _status(bridges: list[Bridge], json_status: bool, interval: float, stop: trio.Event) -> None:
    global _status_shown
    tty = sys.stderr.isatty()
    if not (json_status or tty):
        return
    while True:
        await trio.sleep(interval)
        if not all(b.clients for b in bridges):
            continue
        if json_status:
            try:
                for b in bridges:
                    sys.stdout.write(json.dumps(b.status(), separators=(",", ":")) + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                # Whoever read the status is gone (`| head -1`): stop as on SIGTERM (drain, exit 0), like a
                # command whose output is closed, rather than bridge on unwatched.
                _quiet_stdout()
                for b in bridges:
                    b.log(f"{b.who}: the status output was closed: stopping")
                stop.set()
                return
            except OSError as exc:
                # A full disk, a file-size limit: the status is given up (what Python holds for it discarded with
                # standard output), the bridges go on.
                _quiet_stdout()
                for b in bridges:
                    b.log(f"{b.who}: cannot write the status output: {exc.strerror or exc}; no more status lines")
                return
        elif tty and not stop.is_set():
            line = "  ".join(_summary(b.status()) for b in bridges)
            _to_terminal(_CLEAR + line[: _width() - 1])
            _status_shown = True


def _clear_status() -> None:
    global _status_shown
    if _status_shown:
        _to_terminal(_CLEAR)
        _status_shown = False


def _width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 20)).columns


def _summary(s: dict[str, Any]) -> str:
    def side(name: str) -> str:
        d = s[name]
        mark = "up" if d["connected"] else "DOWN"
        extra = f" r{d['reconnects']}" if d["reconnects"] else ""
        return f"{name} {mark}{extra}"

    o, i = s["out"], s["in"]
    inflight = s["local"]["in_flight"] + s["remote"]["in_flight"]
    queued = s["local"]["queued"] + s["remote"]["queued"]
    dropped = o["dropped_qos0"] + i["dropped_qos0"]
    return (
        f"[{s['bridge']}] {side('local')} | {side('remote')} | out {o['forwarded']:,} in {i['forwarded']:,} | "
        f"in flight {inflight} queued {queued}" + (f" dropped {dropped:,}" if dropped else "")
    )
