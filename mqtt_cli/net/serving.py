"""`mqtt serve` as a process: the broker, its log, and its signals.

SIGINT/SIGTERM shut down gracefully (a second one stops at once); SIGHUP reloads the configuration
(everything is read and checked first; a reload that fails logs one line and leaves the running configuration
as it was); SIGUSR2 reopens the log file (for logrotate). SIGXFSZ is ignored: a log that cannot be written
never stops the broker (net/log.py).
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import trio

from mqtt_cli.core.changes import field_changes
from mqtt_cli.core.config import BrokerSettings, ConfigError, LogLevel, Origin, Translation
from mqtt_cli.net.config import ConfigSource, FileProblem, check_files, serve_options
from mqtt_cli.net.log import BrokerLog, LogError
from mqtt_cli.net.server import BrokerServer, Listener, ServeOptions, ServerError

__all__ = ["Serving", "checked_options", "unsupported_error"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2)
# Young objects a collection waits for once the broker serves (Python's default is 700): a busy broker then
# collects a few times a second instead of hundreds, each pause still short.
GC_YOUNG_THRESHOLD = 10_000


def unsupported_error(source: ConfigSource, count: int) -> ConfigError:
    return ConfigError(
        f"{source.path}: {count} line{'s' if count != 1 else ''} cannot be honoured (listed above); "
        "remove them, or pass --ignore-unsupported to run without them"
    )


def checked_options(
    settings: BrokerSettings, source: str, *, instance: str = "", version: str = "", files: bool = True,
    origin: Origin | None = None,
) -> ServeOptions:  # fmt: skip
    """Every check a start makes before it listens, ConfigError or FileProblem with one line otherwise: the
    configuration's own, cross-key ones included (bridge names, the password and ACL files it names), then with
    `files` the listeners' TLS key pairs and the log file. The start, a reload and --print-config (files=False:
    it may run where the certificates are not, and must not create the log file) come through here, so they
    refuse the same configuration with the same words."""
    origin = origin or Origin(source)
    options = serve_options(settings, source, instance=instance, version=version, origin=origin)
    if files:
        check_files(settings, origin)
    return options


@dataclass(slots=True)
class Serving:
    """What a reload needs to do what the start did: read the source again and apply the same flags."""

    source: ConfigSource
    apply_flags: Callable[[BrokerSettings], BrokerSettings]
    instance: str
    version: str
    ready_file: Path | None = None
    on_listening: Callable[[list[Listener]], None] | None = None
    log: BrokerLog | None = None  # opened by the caller once the configuration is known to be good
    flags: Mapping[str, str] = field(default_factory=dict)  # the flags given, by key path (Origin.flags)

    def origin(self, translation: Translation) -> Origin:
        return Origin(self.source.label, translation.places, self.flags)

    def options(self, translation: Translation | None = None) -> tuple[BrokerSettings, ServeOptions]:
        """The configuration (read now unless given), with the flags applied, checked (ConfigError, FileProblem)."""
        if translation is None:
            translation = self.source.read()
        if translation.unsupported and not self.source.ignore_unsupported:
            raise unsupported_error(self.source, len(translation.unsupported))
        settings = self.apply_flags(translation.settings)
        options = checked_options(settings, self.source.label, instance=self.instance, version=self.version,
                                  origin=self.origin(translation))  # fmt: skip
        options.ready_file = self.ready_file
        options.on_listening = self.on_listening
        if self.log is not None:
            options.on_notice = self.log.notice
            options.log_lines_lost = self.log.lines_lost
        return settings, options

    async def run(self, options: ServeOptions) -> None:
        """Serves until SIGINT or SIGTERM; ServerError when it cannot start."""
        # A write past a file-size limit (the log's file or standard error) would end the process by SIGXFSZ's
        # default action; ignored, it fails with EFBIG and the log drops the line. (Python's start-up ignores it
        # already, but not when an embedding program left its signals alone.)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        stop = trio.Event()
        server = BrokerServer(options)
        async with trio.open_nursery() as nursery:

            async def watch_signals(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                with trio.open_signal_receiver(*_SIGNALS) as signals:
                    task_status.started()  # from here on, SIGHUP and SIGUSR2 no longer end the process
                    async for signum in signals:
                        if signum == signal.SIGHUP:
                            await self.reload(server)
                        elif signum == signal.SIGUSR2:
                            self.reopen_log()
                        elif stop.is_set():
                            nursery.cancel_scope.cancel()  # a second signal: stop at once
                            return
                        else:
                            stop.set()

            async def run_server(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                await server.run(stop, task_status=task_status)
                nursery.cancel_scope.cancel()

            await nursery.start(watch_signals)  # before the ready file says we listen
            await nursery.start(run_server)
            settle_garbage_collector()

    async def reload(self, server: BrokerServer) -> bool:
        """SIGHUP: read, check, apply; or log one line why not and change nothing."""
        assert self.log is not None
        try:
            settings, options = self.options()
            changes = await server.reload(options)
        except (ConfigError, FileProblem, ServerError) as exc:
            self.log.message(LogLevel.error, "reload", f"reload failed, the configuration is unchanged: {exc}")
            return False
        if log := field_changes(self.log.settings, settings.log):
            changes.append(f"log: {', '.join(log)}")
        try:
            self.log.reconfigure(settings.log)  # its file was checked: this fails only if it went away since
        except LogError as exc:
            changes.append(f"{exc}: logging as before")
        # At warning level, so that the default log shows an operator's reloads (mosquitto: at notice level).
        self.log.message(LogLevel.warning, "reload", f"configuration reloaded: {'; '.join(changes) or 'no change'}")
        return True

    def reopen_log(self) -> None:
        assert self.log is not None
        try:
            self.log.reopen()
        except LogError as exc:
            self.log.message(LogLevel.error, "log", f"{exc}; still writing to the file opened before")


def settle_garbage_collector() -> None:
    """Once the broker listens: what start-up made (modules, configuration, restored sessions) is left out of
    every later collection, and collections come less often. A full collection went through all of it (tens of
    milliseconds in the middle of a message flow), and the default threshold collected every few hundred
    messages."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
