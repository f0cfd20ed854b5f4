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
from mqtt_cli.core.config import BrokerSettings, ConfigError, LogLevel, Origin, ProcessSettings, Translation
from mqtt_cli.net.config import ConfigSource, FileProblem, check_files, serve_options
from mqtt_cli.net.log import BrokerLog, LogError
from mqtt_cli.net.process import PidFile, RunAs
from mqtt_cli.net.server import BrokerServer, Listener, ServeOptions, ServerError
from mqtt_cli.net.store import store_files
from mqtt_cli.net.takeover import TakeoverError, mosquitto_db_path, skipped_mosquitto_db, summary, take_over_file

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
    process: ProcessSettings | None = None  # the start's pid file and user, which a reload cannot change
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
        self.wire(options, settings)
        return settings, options

    def wire(self, options: ServeOptions, settings: BrokerSettings) -> None:
        """The server's lines go to the log: notices, and packets while `settings` (the log's, once applied) take
        debug lines; else packets are not even decoded."""
        log = self.log
        if log is not None:
            options.on_notice = log.notice
            options.log_lines_lost = log.lines_lost
            options.on_packet = log.packet if settings.log.level is LogLevel.debug else None

    def become(self, user: RunAs, settings: BrokerSettings, pid_file: PidFile | None) -> None:
        """Once bound, as root: what was made as root is given to `user` (the log file, the pid file, the
        persistence files), then the process runs as `user` for good."""
        owned = [Path(settings.log.file)] if settings.log.file is not None else []
        if pid_file is not None:
            owned.append(pid_file.path)
        if settings.persistence.path is not None:
            owned.extend(store_files(Path(settings.persistence.path)))
        user.give(owned)
        user.switch()
        if self.log is not None:
            self.log.message(LogLevel.info, "user", f"running as user {user.name!r} (uid {user.uid})")

    async def run(self, options: ServeOptions) -> None:
        """Serves until SIGINT or SIGTERM; ServerError when it cannot start."""
        # A write past a file-size limit (the log's file or standard error) would end the process by SIGXFSZ's
        # default action; ignored, it fails with EFBIG and the log drops the line. (Python's start-up ignores it
        # already, but not when an embedding program left its signals alone.)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        await self.take_over(options)
        stop = trio.Event()
        server = BrokerServer(options)
        if self.log is not None:
            self.log.topic_sink = server.publish_log  # log_dest topic
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

    async def take_over(self, options: ServeOptions) -> None:
        """mosquitto's persistence file into a new database, before the broker opens it (net/takeover.py);
        ServerError when it cannot be read."""
        settings = options.persistence
        try:
            source = mosquitto_db_path(settings)
            if source is None:
                skipped = skipped_mosquitto_db(settings)
                if skipped is not None and self.log is not None:
                    detail = f"{skipped} is not taken over (skip_mosquitto_db): starting without what it holds"
                    self.log.message(LogLevel.warning, "persistence", detail + "; it is left as it was")
                return
            result = await trio.to_thread.run_sync(take_over_file, source, settings, trio.current_time())
        except TakeoverError as exc:
            raise ServerError(str(exc)) from None
        if self.log is not None:
            assert settings.path is not None
            self.log.message(LogLevel.info, "persistence", summary(source, settings.path, result))

    async def reload(self, server: BrokerServer) -> bool:
        """SIGHUP: read, check, apply; or log one line why not and change nothing."""
        assert self.log is not None
        try:
            settings, options = self.options()
            changes = await server.reload(options)
        except (ConfigError, FileProblem, ServerError) as exc:
            self.log.message(LogLevel.error, "reload", f"reload failed, the configuration is unchanged: {exc}")
            return False
        if self.process is not None and settings.process != self.process:
            changes.append("process (pid_file, user) changed: takes effect at the next start")
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
