"""The broker's network side: listeners, one reader and one writer task per connection, timers, shutdown.

All protocol decisions are BrokerCore's (mqtt_cli/core/broker.py); this module only moves bytes and time.
A reader parses and routes everything a read holds in one call, then wakes the writers of the connections
that got output. A writer sends whatever accumulated since its last send in one write, so deliveries to a
busy subscriber coalesce; a publisher never waits for a subscriber's socket.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio
from trio.lowlevel import checkpoint, wait_readable

from mqtt_cli.core.admin import AdminUsers
from mqtt_cli.core.auth import OPEN_POLICY, AuthPolicy, CertificateIdentity, certificate_identity
from mqtt_cli.core.bridge import source_filters
from mqtt_cli.core.broker import BrokerConfig, BrokerCore, Notice, NoticeKind, PolicyEffect
from mqtt_cli.core.changes import effect_changes, field_changes, policy_changes
from mqtt_cli.core.closing import CONNECT_TIMEOUT
from mqtt_cli.core.config import MetricsAddress, PersistenceSettings, Scheme
from mqtt_cli.core.dynsec import DynamicSecurity
from mqtt_cli.core.metrics import ConnectedClients
from mqtt_cli.core.persistence import Change
from mqtt_cli.core.records import compile_waiting
from mqtt_cli.core.server import ServerConnection
from mqtt_cli.core.storage import RETRY_COMMIT
from mqtt_cli.net.admin_api import AdminSource
from mqtt_cli.net.auth_files import save_dynsec_file
from mqtt_cli.net.committer import CommitThread
from mqtt_cli.net.embedded import EmbeddedBridge, EmbeddedConfig
from mqtt_cli.net.listeners import (
    Listener,
    ListenerTLS,
    OpenListener,
    ServerError,
    bind,
    listener_policy,
    listener_record,
    parse_listen_url,
    peer_name,
    remove_socket_file,
    tls_context,
    tls_for,
)
from mqtt_cli.net.metrics import MetricsSource, bind_metrics, open_metrics
from mqtt_cli.net.readsize import READ_SIZE
from mqtt_cli.net.store import Store, StoreError
from mqtt_cli.net.tlsstream import TLSStream
from mqtt_cli.net.trace import BrokerTrace
from mqtt_cli.net.transports import direct_socket, receive_direct, send_direct
from mqtt_cli.net.websocket import CloseReason, HandshakeRefused, WebSocketStream

__all__ = [
    "BrokerServer",
    "Listener",
    "ListenerTLS",
    "OpenListener",
    "Scheme",
    "ServeOptions",
    "ServerError",
    "listener_policy",
    "listener_record",
    "parse_listen_url",
    "serve",
    "tls_context",
]

# Packets of one read that get an answer (all but QoS 0 PUBLISH) handled before the answers so far are sent to
# the client (with persistence holding them back, all output so far): one with a small window (a QoS 1/2
# publisher with 100 in flight) gets its acknowledgements, and sends more, while the rest of its read is handled,
# instead of both sides waiting for each other in turn.
RECEIVE_BATCH = 32
DRAIN_ON_SHUTDOWN = 2.0  # seconds writers get to send the last DISCONNECTs and wills
WRITER_LINGER = 1.0  # seconds a writer waits for more output before it ends
LOGIN_FAILURE_DELAY = 1.0  # seconds a client refused for its credentials waits for its CONNACK (that task only)
# What a connection's stream raises when its peer is gone or it was closed: the end of that connection only.
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
_CONNECTION_TASK = "mqtt_cli.net.server.BrokerServer._handle"  # its tasks' name: one string, not one each


@dataclass(slots=True)
class ServeOptions:
    listeners: list[Listener]
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_cafile: Path | None = None
    require_certificate: bool = False
    ready_file: Path | None = None
    on_notice: Callable[[Notice], None] | None = None
    on_listening: Callable[[list[Listener]], None] | None = None
    log_lines_lost: Callable[[], int] | None = None  # the log's count (net/log.py), for the metrics endpoint
    auth: AuthPolicy = OPEN_POLICY  # for listeners without their own (allow_anonymous None: decided per listener)
    metrics: MetricsAddress | None = None  # the HTTP endpoint for monitoring (net/metrics.py)
    persistence: PersistenceSettings = field(default_factory=PersistenceSettings)  # path None: nothing kept
    bridges: list[EmbeddedConfig] = field(default_factory=list)  # [[bridge]]: net/embedded.py
    dynsec_file: Path | None = None  # [dynamic_security] config_file: written after each change
    admin_users: AdminUsers = field(default_factory=AdminUsers)  # who may use the admin API (net/admin_api.py)
    metrics_tls: ListenerTLS | None = None  # certificate and key: the metrics endpoint speaks HTTPS
    # Every packet each way as mosquitto's debug lines (client id or None, peer, line); None: not decoded at all.
    on_packet: Callable[[str | None, str, str], None] | None = None
    on_bound: Callable[[], None] | None = None  # once every listener is bound, before any accepts (drop root)

    def default_tls(self) -> ListenerTLS:
        return ListenerTLS(self.tls_cert, self.tls_key, self.tls_cafile, self.require_certificate)


class _Conn:
    """The network side of one connection: its stream, and its writer while one runs.

    An idle connection costs one task (its reader): a writer task is started when output appears and stays
    a moment after its buffer empties (so a busy subscriber keeps one), then ends.
    """

    __slots__ = ("closing", "sock", "stream", "trace", "wake", "writing")

    def __init__(self, stream: trio.abc.Stream, trace: BrokerTrace | None = None) -> None:
        self.stream = stream
        self.trace = trace  # its packets decoded for the log's debug lines; None unless the log takes them
        # For non-blocking sends and reads outside any task (transports.send_direct, receive_direct): the socket of
        # a plain TCP or Unix stream, our TLS stream itself (net/tlsstream.py); None for WebSocket.
        self.sock = direct_socket(stream)
        self.writing = False
        self.wake: trio.Event | None = None  # set to hand a lingering writer more output
        self.closing: trio.Event | None = None  # the reader waits on it for the writer's last bytes


class BrokerServer:
    """The broker on trio. Its listeners can be opened and closed while it runs (open_listener, close_listener)."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        compile_waiting()  # every record class's compiled __init__ now, not in the middle of the traffic
        self.core = BrokerCore(options.broker, trio.current_time())
        # The run's clock, read directly on the per-message path: trio.current_time() is three Python calls to it.
        self._clock = trio.lowlevel.current_clock()
        self.active = 0
        self.listeners: list[OpenListener] = []
        # When the ticker wakes next: the last output's deadline. While the ticker waits, its cancel scope's
        # deadline follows it: moving a deadline wakes no task, so a commit's linger, set and cleared for each
        # persistent QoS 1 message, costs no wake-up.
        self._due = math.inf
        self._ticker_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None  # where writers run; set by run() (or a test)
        self._stopping = False
        self.ready = False  # listeners bound (GET /readyz)
        self.metrics_bound: MetricsAddress | None = None
        # Persistence (net/store.py), when on: the thread writing the groups the core hands out, while the
        # committer task runs, and when the group it writes was handed to it.
        self._store: Store | None = None
        self._commits: CommitThread | None = None
        self._commit_started = 0.0
        # Embedded bridges by name: each its task's bridge and an event set when that task has ended.
        self.bridges: dict[str, tuple[EmbeddedBridge, trio.Event]] = {}
        self._bridges_to_send: list[EmbeddedBridge] = []  # those with messages for their remote since _flush

    @property
    def bound(self) -> list[Listener]:
        """Every socket listening now, with its real port."""
        return [b for lst in self.listeners for b in lst.bound]

    # --- plumbing ------------------------------------------------------------------------------------------

    def _flush(self, now: float | None = None) -> None:
        """Does what the core's output asks, pass after pass until a pass asks nothing: sends what connections
        hold, writes the commit handed out, logs the notices; and moves the ticker's deadline. `now`: the clock
        as the caller just read it (else read here); the passes of one call happen at one moment.

        Most of the time the kernel's socket buffer has room, so a delivery or an answer leaves with one
        non-blocking send() from the task that produced it, without waking any other task. Only what the socket
        does not take at once (a slow or busy subscriber) goes to a writer task, which exists while it has work;
        while it lingers with nothing to send, output is still sent directly, and it is woken only for a rest.
        """
        core = self.core
        if now is None:
            now = self._clock.current_time()
        while True:
            out = core.output(now)
            # Another pass only when this one may have made more output: a drained connection's queue moved on,
            # a commit written here released what it held, a notice went to a $SYS log topic.
            again = False
            if out.sends:
                again = self._send(out.sends, now)
            if out.commit is not None:
                again = self._start_commit(out.commit, out.retrying) or again
            if self._bridges_to_send:  # what embedded bridges were given for their remotes: one send each
                sending, self._bridges_to_send = self._bridges_to_send, []
                for bridge in sending:
                    bridge.send_now()
            if out.dynsec is not None:
                self._save_dynsec(out.dynsec)
            notices = out.notices
            if notices:
                again = True
                report = self.options.on_notice
                while notices:
                    notice = notices.popleft()
                    if report is not None:
                        report(notice)  # (a log line published to $SYS/broker/log/...: for the next pass)
            deadline = out.deadline
            if deadline != self._due:
                self._due = deadline
                scope = self._ticker_scope
                if scope is not None:
                    scope.deadline = deadline
            if not again:
                return

    def _send(self, sends: dict[ServerConnection, None], now: float) -> bool:
        """Each connection's output: straight to its socket when it takes it, else through its writer task. True
        when a connection that had held deliveries back drained (the core may have more output now)."""
        core = self.core
        nursery = self._nursery
        assert nursery is not None
        drained = False
        for conn in sends:
            net = conn.context
            if net is None:
                continue
            # A writer that sent everything and waits for more is not needed for this: sent directly, in order
            # (a rest that the socket did not take stays at the front of conn.out for it).
            lingering = net.wake if net.writing else None
            if net.writing:
                if lingering is None:  # it is sending (or waiting to): what accumulated goes with its next send
                    continue
            elif conn.login_failed:  # its refusing CONNACK waits a moment, in a writer task of its own
                net.writing = True
                nursery.start_soon(self._writer, conn, net, LOGIN_FAILURE_DELAY)
                continue
            out = conn.out
            sock = net.sock
            if out and sock is not None:
                try:
                    sent = send_direct(sock, out)
                except OSError:  # would block, or the peer is gone: the writer finds out which
                    sent = 0
                if net.trace is not None:
                    net.trace.sent(out[:sent], conn.version, conn.client_id, conn.peer)
                if sent == len(out):
                    out.clear()
                    if conn.wants_drain:
                        core.drained(conn, now)  # output for the next pass
                        drained = True
                    if not conn.close_requested:
                        continue
                elif sent:
                    del out[:sent]
            if out or conn.close_requested:
                if lingering is not None:
                    lingering.set()
                else:
                    net.writing = True
                    nursery.start_soon(self._writer, conn, net)
        return drained

    def _save_dynsec(self, dynsec: DynamicSecurity) -> None:
        """A $CONTROL request changed dynamic security: its file is written at once (a small file, as mosquitto
        writes it, in the loop), so a restart or a reload finds the change."""
        path = self.options.dynsec_file
        if path is None:
            return
        try:
            save_dynsec_file(path, dynsec)
        except OSError as exc:
            why = f"cannot write the dynamic security file {path}: {exc.strerror or exc} (kept until a restart)"
            self._report(Notice(NoticeKind.ERROR, None, "-", why))

    # --- persistence ------------------------------------------------------------------------------------------

    def _start_commit(self, changes: list[Change], retrying: bool) -> bool:
        """A group the core handed out to commit: written here when that is a write to the OS only
        (Store.commit_at_once: the common QoS 2 group; not a failed group tried again), else handed to the commit
        thread, whose end the committer task waits for. True when it is written here (what it held is released)."""
        store = self._store
        assert store is not None
        now = self._clock.current_time()
        if not retrying and store.commit_at_once(changes):
            self.core.commit_done(now, self._clock.current_time() - now)
            return True
        self._commit_started = now
        self._commit_thread().start(changes)
        return False

    def _commit_thread(self) -> CommitThread:
        """The commit thread, started with the first group (which may come before the committer task runs)."""
        commits = self._commits
        if commits is None:
            assert self._store is not None
            commits = self._commits = CommitThread(self._store.commit)
        return commits

    async def _committer(self) -> None:
        """Waits for the end of each commit the commit thread writes (net/committer.py) and tells the core how it
        went: its acknowledgements go out, or (a failure: a full disk, say) the group is kept and the core hands it
        out again after a pause, withholding them meanwhile. When commits are due is the core's business
        (BrokerCore.output); this task only waits, on the socket the commit thread signals on."""
        store = self._store
        assert store is not None
        commits = self._commit_thread()
        clock = self._clock
        while True:
            await commits.wait()
            now = clock.current_time()
            try:
                commits.outcome()
            except StoreError as exc:
                # Not stored, so not acknowledged. Kept, in order, ahead of what comes next and tried again: a
                # later group must not be stored without this one (a session's row before its deliveries), and
                # once the disk has room again the withheld acknowledgements go out. Meanwhile 5.0 publishers are
                # told 0x97. Logged once per episode.
                withheld = self.core.commit_failed(now)
                if withheld is not None:
                    why = (
                        f"{exc}; {withheld} acknowledgements withheld, QoS 1/2 from MQTT 5.0 publishers refused "
                        f"(0x97) until it can be written, tried again every {RETRY_COMMIT:g} s"
                    )
                    self._report(Notice(NoticeKind.ERROR, None, "-", why))
            else:
                recovered = self.core.commit_done(now, now - self._commit_started)
                if recovered is not None:
                    why = (
                        f"{store.path} written again after {recovered.after:.0f} s; {recovered.withheld} withheld "
                        "acknowledgements sent"
                    )
                    self._report(Notice(NoticeKind.PERSISTENCE, None, "-", why))
            self._flush()

    def _commit_now(self) -> None:
        """The last changes, at shutdown (in this thread: nothing else runs any more, once the commit thread has
        written the group it had, if any)."""
        store = self._store
        if store is None:
            return
        commits, self._commits = self._commits, None
        now = trio.current_time()
        if commits is not None:
            try:
                commits.close()
            except StoreError:  # the group it was writing: tried once more below
                self.core.commit_failed(now)
        changes = self.core.storage.last_commit(now)
        if changes:
            try:
                store.commit(changes)
            except StoreError as exc:
                self._report(Notice(NoticeKind.ERROR, None, "-", str(exc)))

    def _report(self, notice: Notice) -> None:
        report = self.options.on_notice
        if report is not None:
            report(notice)

    async def _open_store(self) -> None:
        """Opens the database and restores what it holds into the core, before any listener accepts."""
        settings = self.options.persistence
        if settings.path is None:
            return
        path = Path(settings.path)
        now = trio.current_time()
        try:
            store, restored = await trio.to_thread.run_sync(Store.open, path, settings.synchronous, now)
        except StoreError as exc:
            raise ServerError(str(exc)) from None
        if store.warning is not None:
            self._report(Notice(NoticeKind.PERSISTENCE, None, "-", store.warning))
        self._store = store
        core = self.core
        core.storage.enable_persistence()
        core.storage.restore(restored.sessions, restored.retained, now)
        del restored  # the restored records are the core's now: the lists holding them go
        # A bridge taken out of the configuration while the broker was stopped: its local session (and what it
        # queued for that remote) would otherwise stay in the file for ever, as it never expires.
        configured = {b.name: b.local_client_id for b in self.options.bridges}
        for session in core.local.forget_bridges(configured, now):
            self._report(Notice(NoticeKind.BRIDGE, None, "-", f"bridge {session.bridge}: its stored local session "
                                f"{session.client_id!r} is removed (no configured bridge uses it)"))  # fmt: skip
        changes = core.storage.take_changes()  # expiry and will delays that start now, wills published
        if changes:  # written at once
            await trio.to_thread.run_sync(store.commit, changes)

    async def _writer(self, conn: ServerConnection, net: _Conn, delay: float = 0.0) -> None:
        core = self.core
        stream = net.stream
        try:
            if delay:
                await trio.sleep(delay)
            while True:
                while conn.out:
                    data = bytes(conn.out)
                    conn.out.clear()
                    if net.trace is not None:
                        net.trace.sent(data, conn.version, conn.client_id, conn.peer)
                    await stream.send_all(data)
                    if conn.wants_drain:
                        core.drained(conn, trio.current_time())
                        self._flush()
                if conn.close_requested:
                    await self._close_stream(stream)  # the reader sees the stream closed and ends
                    return
                net.wake = trio.Event()
                with trio.move_on_after(WRITER_LINGER):
                    await net.wake.wait()
                net.wake = None
                if not conn.out and not conn.close_requested:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            core.connection_lost(conn, trio.current_time())
            self._flush()
            with contextlib.suppress(Exception):
                await trio.aclose_forcefully(stream)
        finally:
            net.writing = False
            if net.closing is not None:
                net.closing.set()

    async def _close_stream(self, stream: trio.abc.Stream) -> None:
        if isinstance(stream, WebSocketStream):
            await stream.aclose(CloseReason.GOING_AWAY if self._stopping else CloseReason.NORMAL_CLOSURE)
        else:
            await stream.aclose()

    async def _admit(self, stream: trio.abc.Stream, listener: OpenListener | None) -> ServerConnection | None:
        """A new connection's steps before MQTT (the connection limits, the TLS client certificate, the WebSocket
        upgrade), then its ServerConnection, with its _Conn as `context`. None when it is refused or fails before
        (closed); else it is counted until _end."""
        opts = self.options
        spec = listener.spec if listener is not None else None
        most = opts.broker.limits.max_connections
        if (most and self.active >= most) or (
            listener is not None and listener.spec.max_connections and listener.active >= listener.spec.max_connections
        ):
            await trio.aclose_forcefully(stream)
            return None
        # Counted from the start: a connection still upgrading or still to send its CONNECT holds its place.
        self.active += 1
        if listener is not None:
            listener.active += 1
        admitted = False
        peer = "-"
        try:
            peer = peer_name(stream, spec)
            policy = listener.policy if listener is not None else OPEN_POLICY
            certificate = None
            if isinstance(stream, TLSStream):  # its handshake here, then reads straight from its socket (_handle)
                certificate = await _handshake(stream, policy.uses_certificates)
            if spec is not None and spec.scheme.websocket:
                try:
                    with trio.fail_after(CONNECT_TIMEOUT):  # the upgrade counts against the time a CONNECT has
                        stream = await WebSocketStream.accept(stream, spec.path)
                except (HandshakeRefused, trio.TooSlowError) as exc:
                    self._notice_refused(peer, f"WebSocket: {exc}" if str(exc) else "WebSocket: upgrade too slow")
                    return None
            admitted = listener is None or not listener.closed  # else closed while this one was upgrading
        except _GONE as exc:  # a failed TLS handshake, a peer gone during the upgrade: that connection only
            if isinstance(exc.__cause__, ssl.SSLError):
                self._notice_refused(peer, f"TLS handshake failed: {_ssl_reason(exc.__cause__)}")
        finally:
            if not admitted:
                self._uncount(listener)
                with trio.CancelScope(shield=True), contextlib.suppress(*_GONE):
                    await trio.aclose_forcefully(stream)
        if not admitted:
            return None
        core = self.core
        if listener is not None:
            conn = core.open(peer, trio.current_time(), listener.policy, certificate, versions=listener.spec.versions)
            listener.connections.add(conn)
        else:
            conn = core.open(peer, trio.current_time())
        on_packet = self.options.on_packet
        if on_packet is None:
            conn.context = _Conn(stream)
        else:
            conn.context = _Conn(stream, BrokerTrace(lambda line: on_packet(conn.client_id, conn.peer, line)))
        return conn

    def _uncount(self, listener: OpenListener | None) -> None:
        self.active -= 1
        if listener is not None:
            listener.active -= 1

    async def _handle(self, stream: trio.abc.Stream, listener: OpenListener | None = None) -> None:
        """One connection's task, from accept to close. An idle connection is this task waiting for its socket:
        its frames are most of what one costs (docs/PERFORMANCE.md), so it waits in one frame of ours, with few
        locals, and the steps that come once are _admit's and _end's, whose frames exist only while they run."""
        conn = await self._admit(stream, listener)
        if conn is None:
            return
        core = self.core
        stream = conn.context.stream  # the outermost (TLS, WebSocket)
        # A TCP socket, or our TLS stream, is read directly (transports.receive_direct), waiting for it first: after
        # a read that did not fill its buffer (the peer had nothing more to give then), a read would fail nearly
        # always, which costs a system call and an exception per wake-up, the greater part of a message's cost at a
        # low rate. After a full read it reads at once (after a checkpoint). Any other stream: its receive_some.
        net = conn.context
        sock = net.sock
        batch = RECEIVE_BATCH if sock is not None else 0  # (WebSocket sends from a writer task: no gain)
        full = False
        data: bytes | bytearray | None
        try:
            while not conn.closed:
                try:
                    if sock is None:
                        data = await stream.receive_some(READ_SIZE)
                    else:
                        if full:
                            await checkpoint()
                        else:
                            await wait_readable(sock)
                        data = receive_direct(sock, READ_SIZE)
                        if data is None:
                            full = False
                            continue
                        full = len(data) == READ_SIZE
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    cause = exc.__cause__
                    # An alert about our certificate comes after the server's half of the handshake; a peer gone
                    # without close_notify (a port check, a killed client) is no failed handshake.
                    if isinstance(cause, ssl.SSLError) and not _is_eof(cause) and not conn.connected:
                        self._notice_refused(conn.peer, f"TLS handshake failed: {_ssl_reason(cause)}")
                    data = b""
                if not data:
                    break
                now = self._clock.current_time()
                if net.trace is not None:
                    net.trace.received(data, conn.client_id, conn.peer)
                core.receive(conn, data, now, batch)
                del data  # not held while idle (up to READ_SIZE)
                while conn.backlog is not None:
                    if core.storage.holding():
                        # Persistence holds its answers back: until a commit, or (QoS 1) until its subscribers
                        # acknowledge, which they do sooner when they get the read's first messages while its rest
                        # is handled. So everything so far goes now (core/persistence.py Pending).
                        self._flush(now)
                    else:
                        # Its answers so far, straight to its socket; what others got goes with the read's _flush
                        # (one send each a read). Not while a writer has its output or it waits to drain: _flush's.
                        out = conn.out
                        if out and sock is not None and not net.writing and not conn.wants_drain:
                            try:
                                sent = send_direct(sock, out)
                            except OSError:  # would block, or the peer is gone: _flush finds out which
                                sent = 0
                            if net.trace is not None:
                                net.trace.sent(out[:sent], conn.version, conn.client_id, conn.peer)
                            del out[:sent]
                    core.receive_rest(conn, now, batch)
                self._flush(now)
        except Exception as exc:  # a bug must cost one connection, never the broker
            core.internal_error(conn, trio.current_time(), f"{type(exc).__name__}: {exc}")
        finally:
            await self._end(conn, listener)

    async def _end(self, conn: ServerConnection, listener: OpenListener | None) -> None:
        """A connection's reader is done: its last bytes out (its writer's), the core told, the stream closed."""
        core = self.core
        net = conn.context
        self._uncount(listener)
        if listener is not None:
            listener.connections.discard(conn)
        self._flush()  # a closing connection's last bytes (DISCONNECT, refusing CONNACK) get their writer
        core.connection_lost(conn, trio.current_time())
        self._flush()  # (its will delay or session expiry may be the next thing due: the ticker is woken)
        if net.writing:  # it sends what is left (a DISCONNECT, a refusing CONNACK), then closes
            net.closing = trio.Event()
            with trio.move_on_after(DRAIN_ON_SHUTDOWN):
                await net.closing.wait()
        conn.context = None
        with trio.CancelScope(shield=True), trio.move_on_after(1), contextlib.suppress(*_GONE):
            await trio.aclose_forcefully(net.stream)

    def publish_log(self, topic: str, line: str) -> None:
        """A log line to `topic` (log_dest topic); it goes out with the next flush."""
        self.core.sys.publish_log(topic, line, self._clock.current_time())

    def _notice_refused(self, peer: str, detail: str) -> None:
        report = self.options.on_notice
        if report is not None:
            report(Notice(NoticeKind.REFUSED, None, peer, detail))

    async def _ticker(self) -> None:
        """Runs the core's timers (wills, expiry, $SYS, keep alive and CONNECT timeouts, commits due after a
        linger) when the core's output says the next is due; `_flush` moves its deadline as the outputs do."""
        core = self.core
        while True:
            now = self._clock.current_time()
            core.tick(now)
            self._flush(now)
            with trio.CancelScope(deadline=self._due) as self._ticker_scope:
                await trio.sleep_forever()
            self._ticker_scope = None

    # --- listeners ------------------------------------------------------------------------------------------

    async def _bind(self, spec: Listener) -> OpenListener:
        """Opens the sockets of `spec` (nothing accepted yet); ServerError says why it cannot."""
        return await bind(spec, self.options)

    def _start(self, listener: OpenListener) -> None:
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError("listeners are opened on a running server (BrokerServer.run)")
        for sock in listener.sockets:
            nursery.start_soon(self._accept, listener, sock)
        self.listeners.append(listener)

    async def _accept(self, listener: OpenListener, sock: trio.abc.Listener[Any]) -> None:
        with listener.cancel_scope:
            while True:
                try:
                    stream = await sock.accept()
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                        await trio.sleep(0.1)  # out of descriptors: let connections end, as trio.serve_listeners
                        continue
                    raise
                stream = listener.wrap(stream)
                assert self._nursery is not None
                self._nursery.start_soon(self._handle, stream, listener, name=_CONNECTION_TASK)

    async def open_listener(self, spec: Listener) -> OpenListener:
        """Opens one more listener on the running server; ServerError (nothing opened) when it cannot."""
        listener = await self._bind(spec)
        self._start(listener)
        self._listening_changed()
        return listener

    async def close_listener(self, listener: OpenListener, reason: int = 0x8B) -> None:
        """Stops accepting on `listener`, then ends the connections it accepted as a shutdown would (wills
        published, 5.0 clients told DISCONNECT `reason`), giving them a moment to get it. Other listeners and
        their connections are not touched."""
        if listener.closed:
            return
        listener.closed = True
        listener.cancel_scope.cancel()
        for sock in listener.sockets:
            with contextlib.suppress(OSError, trio.ClosedResourceError):
                await sock.aclose()
        remove_socket_file(listener)
        if listener in self.listeners:
            self.listeners.remove(listener)
        now = trio.current_time()
        where = listener.bound[0].url if listener.bound else listener.spec.url
        for conn in list(listener.connections):
            self.core.disconnect(conn, now, reason, f"listener {where} closed")
        self._flush()
        with trio.move_on_after(DRAIN_ON_SHUTDOWN):
            while listener.connections:
                await trio.sleep(0.01)
        self._listening_changed()

    def _listening_changed(self) -> None:
        if self.options.ready_file is not None:
            _write_ready_file(self.options.ready_file, self.bound, self.metrics_bound)

    async def reload(self, options: ServeOptions) -> list[str]:
        """Applies a new configuration, or raises ServerError and changes nothing; returns what changed.

        Listeners are matched by where they listen (scheme, address, port, path, file mode): one kept keeps its
        sockets and connections and takes the new settings (versions, max_connections, auth) for the connections
        it accepts from then on; new ones are opened first, so a port that cannot be bound or a certificate that
        cannot be read leaves everything as it was; removed ones are closed (close_listener: their connections
        are ended, 5.0 DISCONNECT 0x8B, wills published). TLS files are read again for every TLS listener: new
        connections get the new certificate. Limits: see BrokerCore.reconfigure.
        """
        wanted = {_where(spec): spec for spec in options.listeners}
        kept = [lst for lst in self.listeners if _where(lst.spec) in wanted]
        policies = {id(lst): listener_policy(options, wanted[_where(lst.spec)]) for lst in kept}
        contexts = {
            id(lst): tls_for(wanted[_where(lst.spec)], options, policies[id(lst)])
            for lst in kept
            if lst.spec.scheme.tls
        }
        have = {_where(lst.spec) for lst in kept}
        added: list[OpenListener] = []
        try:
            for where, spec in wanted.items():
                if where not in have:
                    added.append(await self._bind(spec))
        except BaseException:
            for listener in added:
                await self._discard(listener)
            raise
        # From here on nothing fails: apply.
        changes = []
        callbacks = (self.options.on_notice, self.options.on_listening)
        old_broker = self.options.broker
        if options.metrics != self.options.metrics:  # its socket is the start's: kept, and the log says so
            changes.append("metrics.listen changed: takes effect at the next start")
            options.metrics = self.options.metrics
        if options.persistence != self.options.persistence:  # the store is the start's: kept, and the log says so
            changes.append("persistence changed: takes effect at the next start")
            options.persistence = self.options.persistence
        self.options = options
        options.on_notice = options.on_notice or callbacks[0]
        options.on_listening = options.on_listening or callbacks[1]
        effect = PolicyEffect()
        for listener in kept:
            spec = wanted[_where(listener.spec)]
            if spec != listener.spec or spec.auth is not listener.spec.auth:
                if settings := field_changes(listener.spec, spec, skip=("host", "port", "auth")):
                    changes.append(f"listener {listener.spec.url}: {', '.join(settings)}")
                listener.spec = spec
                listener.bound = [replace(spec, host=b.host, port=b.port) for b in listener.bound]
            if id(listener) in contexts:
                listener.tls = contexts[id(listener)]
            # Password and ACL files were read again: the connections go on under the new policy (mosquitto's
            # reload: who may no longer connect is disconnected, the others get the new ACL at once).
            policy = policies[id(listener)]
            changes += [c for c in policy_changes(listener.policy, policy) if c not in changes]
            self.core.admission.replace_policy(listener.policy, policy, trio.current_time(), effect)
            listener.policy = policy
        changes += effect_changes(effect)
        self.core.reconfigure(options.broker, trio.current_time())
        if limits := field_changes(old_broker, options.broker, skip=("instance", "version")):
            changes.append(f"limits: {', '.join(limits)}")
        for listener in added:
            self._start(listener)
            changes.append(f"listener {', '.join(b.url for b in listener.bound)} opened")
        for listener in [lst for lst in self.listeners if lst not in kept and lst not in added]:
            ended = len(listener.connections)
            await self.close_listener(listener)
            changes.append(f"listener {listener.spec.url} closed ({ended} connections ended)")
        changes += await self._reload_bridges(options.bridges)
        self._listening_changed()
        self._flush()  # the $SYS interval may have changed: the ticker wakes if it is due sooner
        return changes

    # --- running --------------------------------------------------------------------------------------------

    async def run(self, stop: trio.Event, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listens and serves until `stop` is set, then shuts down gracefully. The metrics endpoint, when asked
        for, answers from before the listeners are bound (/readyz: 503) to after they are closed."""
        lost = self.options.log_lines_lost  # the log outlives reloads: its count is the start's
        admin = AdminSource(
            lambda: self.core,
            lambda: self.options.auth,
            lambda: self.options.admin_users,
            self.listener_infos,
            self._flush,
            trio.current_time,
        )
        files = self.options.metrics_tls
        tls = tls_context(files, "the metrics endpoint (certfile, keyfile)") if files is not None else None
        source = MetricsSource(lambda: self.core, lambda: self.ready, self.connected_clients, lost, admin, tls)
        address = self.options.metrics
        sockets = None
        if address is not None:
            try:
                sockets = await bind_metrics(address)
            except OSError as exc:
                raise ServerError(f"metrics endpoint {address.host}:{address.port}: {exc.strerror or exc}") from None
        async with open_metrics(sockets, source) as self.metrics_bound:
            await self._run(stop, task_status)

    # --- embedded bridges -------------------------------------------------------------------------------------

    def _start_bridge(self, config: EmbeddedConfig) -> None:
        nursery = self._nursery
        assert nursery is not None
        bridge = EmbeddedBridge(config, lambda: self.core, self._flush, self._bridges_to_send_append, self._bridge_log)
        done = trio.Event()

        async def run() -> None:
            try:
                await bridge.run()
            except Exception as exc:  # a bug in one bridge ends that bridge, never the broker
                self._bridge_log(f"bridge {config.name}: stopped by an internal error: {exc!r} (reload to restart it)")
            finally:
                done.set()

        self.bridges[config.name] = (bridge, done)
        nursery.start_soon(run)

    async def _stop_bridge(self, name: str, *, forget: bool) -> None:
        bridge, done = self.bridges.pop(name)
        bridge.stop(forget=forget)
        await done.wait()

    def _bridges_to_send_append(self, bridge: EmbeddedBridge) -> None:
        self._bridges_to_send.append(bridge)

    def _bridge_log(self, line: str) -> None:
        self._report(Notice(NoticeKind.BRIDGE, None, "-", line))

    async def _reload_bridges(self, configs: list[EmbeddedConfig]) -> list[str]:
        """Bridges added, removed (their local session ends) or changed (restarted with the new settings, the
        session kept), by name; the others and every client are not touched."""
        wanted = {c.name: c for c in configs}
        changes = []
        for name in list(self.bridges):
            config = wanted.get(name)
            old = self.bridges[name][0].config
            if config is None:
                await self._stop_bridge(name, forget=True)
                changes.append(f"bridge {name} removed")
            elif config.source != old.source:
                await self._stop_bridge(name, forget=config.local_client_id != old.local_client_id)
                before = source_filters(old.rules, remote=True)
                self._start_bridge(replace(config, unsubscribe=tuple(before)))
                changes.append(f"bridge {name} changed (restarted)")
        for name, config in wanted.items():
            if name not in self.bridges:
                self._start_bridge(config)
                changes.append(f"bridge {name} added")
        return changes

    def listener_infos(self) -> list[dict[str, Any]]:
        """The listeners as the admin API shows them: where, and how many clients are connected there."""
        out = []
        for lst in self.listeners:
            where = lst.bound[0].url if lst.bound else lst.spec.url
            connected = sum(1 for conn in lst.connections if conn.connected and not conn.closed)
            out.append({"url": where, "connected": connected})
        return out

    def connected_clients(self) -> list[ConnectedClients]:
        """Connected clients by listener and protocol level (the metrics endpoint's gauge)."""
        counts: dict[tuple[str, int], int] = {}
        for lst in self.listeners:
            where = lst.bound[0].url if lst.bound else lst.spec.url
            for conn in lst.connections:
                if conn.connected and not conn.closed:
                    counts[(where, conn.version)] = counts.get((where, conn.version), 0) + 1
        return [ConnectedClients(url, level, n) for (url, level), n in sorted(counts.items())]

    async def _run(self, stop: trio.Event, task_status: Any) -> None:
        opts = self.options
        for spec in opts.listeners:
            listener_policy(opts, spec)  # one that must not start: refused before any socket is opened
        await self._open_store()
        opened: list[OpenListener] = []
        try:
            for spec in opts.listeners:
                opened.append(await self._bind(spec))
            if opts.on_bound is not None:
                opts.on_bound()
        except BaseException:
            for listener in opened:
                await self._discard(listener)
            if self._store is not None:
                self._store.close()
            raise
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for listener in opened:
                    self._start(listener)
                self.ready = True
                self._listening_changed()
                if opts.on_listening is not None:
                    opts.on_listening(self.bound)
                nursery.start_soon(self._ticker)
                if self._store is not None:
                    nursery.start_soon(self._committer)
                for config in opts.bridges:
                    self._start_bridge(config)
                task_status.started(self)
                await stop.wait()
                self.ready = False  # /readyz 503 from here: a load balancer stops sending new clients
                for name in list(self.bridges):  # first: their goodbyes go out while the broker still serves
                    await self._stop_bridge(name, forget=False)
                for listener in self.listeners:  # no new connections while the others end
                    listener.cancel_scope.cancel()
                await self.shutdown()
                nursery.cancel_scope.cancel()
        finally:
            for listener in self.listeners:
                await self._discard(listener)
            if self._store is not None:
                self._commit_now()
                self._store.close()

    @staticmethod
    async def _discard(listener: OpenListener) -> None:
        for sock in listener.sockets:
            with trio.CancelScope(shield=True), contextlib.suppress(OSError, trio.ClosedResourceError):
                await sock.aclose()
        remove_socket_file(listener)

    def reload_auth(self, policies: list[AuthPolicy]) -> None:
        """New auth policies (read with net/auth_files.py), one per `options.listeners` entry: checked for every
        listener first (ServerError, nothing applied), then new connections get them and connected clients are
        re-checked (BrokerCore.replace_policy: some disconnected, some subscriptions dropped). `reload` does the
        same for a whole new configuration."""
        specs = self.options.listeners
        if len(policies) != len(specs):
            raise ValueError(f"{len(policies)} policies for {len(specs)} listeners")
        resolved = {
            _where(spec): listener_policy(self.options, replace(spec, auth=policy))
            for spec, policy in zip(specs, policies, strict=True)
        }
        now = trio.current_time()
        for listener in self.listeners:
            new = resolved.get(_where(listener.spec))
            if new is not None:
                self.core.admission.replace_policy(listener.policy, new, now)
                listener.policy = new
        self._flush()

    async def shutdown(self) -> None:
        """Publishes wills, sends 5.0 clients DISCONNECT 0x8B, and gives writers a moment to send it all."""
        self._stopping = True
        self.core.shutdown(trio.current_time())
        self._flush()
        with trio.move_on_after(DRAIN_ON_SHUTDOWN):
            while any(c.context is not None and c.context.writing for c in self.core.connections):
                await trio.sleep(0.01)


def _ready_entry(b: Listener) -> dict[str, Any]:
    entry: dict[str, Any] = {"url": b.url, "scheme": str(b.scheme), "host": b.host, "port": b.port}
    if b.path is not None:
        entry["path"] = b.path
    return entry


def _ssl_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason in words ("unsupported protocol", "certificate verify failed: certificate revoked")."""
    reason = (exc.reason or str(exc)).lower().replace("_", " ")
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        reason += f": {exc.verify_message}"
    return reason.removeprefix("sslv3 alert ").removeprefix("tlsv13 alert ")


def _is_eof(exc: ssl.SSLError) -> bool:
    """The peer closed the connection without TLS's close_notify."""
    return isinstance(exc, ssl.SSLEOFError) or exc.reason == "UNEXPECTED_EOF_WHILE_READING"


def _write_ready_file(path: Path, bound: list[Listener], metrics: MetricsAddress | None = None) -> None:
    data: dict[str, Any] = {"listeners": [_ready_entry(b) for b in bound]}
    if metrics is not None:
        data["metrics"] = {"url": metrics.url, "host": metrics.host, "port": metrics.port}
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(path)  # atomic: a script polling for the file never reads half of it
    except OSError as exc:
        raise ServerError(f"cannot write the ready file {path}: {exc.strerror or exc}") from None


async def _handshake(stream: TLSStream, identity: bool) -> CertificateIdentity | None:
    """The TLS handshake, within the CONNECT timeout; with `identity`, the verified client certificate's."""
    with trio.move_on_after(CONNECT_TIMEOUT) as scope:
        await stream.do_handshake()
    if scope.cancelled_caught:
        raise trio.BrokenResourceError("no TLS handshake in time")
    if not identity:
        return None
    cert = stream.getpeercert()
    if not cert:
        return None
    return certificate_identity(cert.get("subject", ()))


def _where(spec: Listener) -> tuple[Any, ...]:
    """What identifies a listener across a reload: the socket it needs (a change there is a new listener)."""
    return (spec.scheme, spec.host, spec.port, spec.path, spec.mode)


async def serve(
    options: ServeOptions, stop: trio.Event | None = None, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Runs the broker until `stop` is set (then shuts down gracefully) or the caller cancels it."""
    await BrokerServer(options).run(stop if stop is not None else trio.Event(), task_status=task_status)
