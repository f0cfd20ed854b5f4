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
from mqtt_cli.net.bridge import Bridge, BridgeConfig, BridgeError
from mqtt_cli.net.errors import ClientError

from ._runner import _flatten, _quiet_stdout, error


def run(configs: list[BridgeConfig], *, json_status: bool, interval: float, quiet: bool) -> None:
    log = (lambda line: None) if quiet else _log_line
    bridges = [Bridge(c, log=log) for c in configs]
    try:
        code = trio.run(_main, bridges, json_status, interval)
    except BridgeError as err:
        error(str(err))
        raise typer.Exit(EXIT_FAILURE) from None
    except ClientError as err:
        error(str(err))
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(code)


_status_shown = False


def _log_line(line: str) -> None:
    global _status_shown
    if _status_shown:
        sys.stderr.write("\r\x1b[2K")  # the status line gives way to the log line, then comes back
        _status_shown = False
    print(f"mqtt: {line}", file=sys.stderr, flush=True)


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
        elif tty and not stop.is_set():
            line = "  ".join(_summary(b.status()) for b in bridges)
            sys.stderr.write("\r\x1b[2K" + line[: _width() - 1])
            sys.stderr.flush()
            _status_shown = True


def _clear_status() -> None:
    global _status_shown
    if _status_shown:
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()
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
