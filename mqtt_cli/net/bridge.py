"""`mqtt bridge`'s engine: two trio clients (local, remote) and the rules between them.

    bridge = Bridge(BridgeConfig(name="site", local=SideConfig(...), remote=SideConfig(...), rules=[...]))
    await bridge.run(stop)          # until `stop` is set; then drains what is in flight (bounded) and leaves

End to end: a QoS 1/2 message is acknowledged to the broker it came from (manual acknowledgement in the core)
only when the broker it goes to has acknowledged it (PUBACK, or PUBREC for QoS 2). Both sessions persist, so
what either broker holds while the other side or the bridge is away is delivered when all are back. QoS 2
forwards are journalled (mqtt_cli.core.journal) so that a bridge killed mid-flow neither loses nor repeats
them: on start, the journal says what to re-send to each destination and which of the source's re-sends are
already forwarded. Everything here runs on trio's thread and synchronously from the clients' event batches: a
forward is handed to the other client before any byte of its acknowledgement can be written.

Loops: 5.0 sides subscribe with no-local (and retain-as-published); 3.x sides connect with the bridge flag,
which mosquitto and our broker read as the same. QoS 0 messages for a side that is down wait in a bounded
queue and beyond it are dropped and counted.
"""

from __future__ import annotations

import fcntl
import json
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from mqtt_cli.core.bridge import BridgeRule, route, source_filters
from mqtt_cli.core.events import (
    Acknowledged,
    ConnectionAccepted,
    Disconnected,
    MessagesReceived,
    PublishAcknowledged,
    PublishReceived,
    ReleaseReceived,
)
from mqtt_cli.core.journal import (
    Completed,
    Forwarded,
    JournalCorrupt,
    JournalRecord,
    JournalState,
    Released,
    SourceLost,
    SourceReleased,
    record,
)
from mqtt_cli.core.packets import Publish, Subscription, Will
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties
from mqtt_cli.profiles import PROTOCOL_VERSIONS

from .client import Client, ClientSettings, version_name
from .errors import ClientError
from .log import LineWriter, LostLines, stderr_descriptor
from .transports import Endpoint, TLSOptions, make_ssl_context, parse_url

__all__ = [
    "Bridge", "BridgeConfig", "BridgeError", "BridgeLog", "SideConfig", "SideStats", "side_config"
]  # fmt: skip

LOCAL, REMOTE = 0, 1
SIDE_NAMES = ("local", "remote")
_COMPACT_AT = 8 << 20  # journal bytes appended before it is rewritten with only the live entries
NEVER_EXPIRES = 0xFFFFFFFF
_QOS0_HIGH = 2000  # QoS 0 messages waiting for the other side's writer before the source is read no more
_ROUTES_MAX = 10_000  # topics remembered per side with their routes
# Our QoS 1/2 forwards in flight to a broker that states no receive maximum (3.x): the source broker's window
# bounds them already (each is a message we hold for it); a smaller cap only queues them in the client's backlog,
# a slower path than straight through (measured: a 1,000 cap put a 3.1.1 flood there half the time).
_WINDOW = 65_000  # not all 65,535 identifiers: SUBSCRIBE and UNSUBSCRIBE need some while messages are in flight


class BridgeError(Exception):
    """The bridge cannot start or go on (journal locked or unwritable, a side refused the bridge)."""


@dataclass
class SideConfig:
    endpoints: tuple[Endpoint, ...]
    client_id: str
    ssl_context: ssl.SSLContext | None = None
    username: str | None = None
    password: bytes | None = None
    version: int | None = None  # None: 5.0, falling back to 3.1.1
    keepalive: int = 60
    session_expiry: int = NEVER_EXPIRES  # 5.0; 3.x sessions (clean session 0) never expire
    connect_timeout: float = 10.0
    clean_start: bool = False  # mosquitto's cleansession true: no session kept across connections
    bridge_flag: bool = True  # mosquitto's try_private: the 3.x bridge flag in CONNECT
    round_robin: bool = False  # mosquitto's: False, the first address is the main one, gone back to when it answers


@dataclass
class BridgeConfig:
    name: str
    local: SideConfig
    remote: SideConfig
    rules: list[BridgeRule]
    restart_base: float = 0.5
    restart_cap: float = 30.0
    notification_topic: str | None = None
    journal: Path | None = None  # None: no journal (QoS 2 at least once across a killed bridge)
    qos0_queue: int = 10_000  # QoS 0 messages held for a side that is down (or slow), beyond which they drop
    receive_maximum: int = 1000  # unacknowledged messages each broker may send us (5.0)
    drain_timeout: float = 10.0
    linger: float = 0.005  # seconds a busy side's reader may wait to read more at once (see Client's _reader)


#: The name of a bridge not given one (--name, or `name` in the TOML file).
DEFAULT_NAME = "bridge"


@dataclass
class SideStats:
    connected: bool = False
    session_present: bool = False
    reconnects: int = 0
    version: int = 0
    endpoint: str = ""
    error: str = ""
    warned_flag: bool = False  # said once that this broker refused the bridge flag
    moving: bool = False  # leaving an alternate address for the main one (round_robin false)


@dataclass(slots=True)
class Forward:
    """A QoS 1/2 message on its way: where it came from (to acknowledge it) and its journal number."""

    src_side: int
    src_pid: int
    src_qos: int
    src_epoch: int = 0  # the source connection's session_epoch: after a lost session, src_pid names nothing of ours
    seq: int = 0
    acked: bool = False  # acknowledged to the source already (QoS 2: at the destination's PUBREC)


@dataclass
class Counters:
    forwarded: list[int] = field(default_factory=lambda: [0, 0])  # by source side: local->remote, remote->local
    acknowledged: list[int] = field(default_factory=lambda: [0, 0])  # QoS 1/2 forwards acknowledged end to end
    dropped: list[int] = field(default_factory=lambda: [0, 0])  # QoS 0, destination down or queue full
    refused: list[int] = field(default_factory=lambda: [0, 0])  # the destination refused the message
    resent: list[int] = field(default_factory=lambda: [0, 0])  # re-sent to the destination after a reconnect
    duplicates: list[int] = field(default_factory=lambda: [0, 0])  # received with DUP set
    unmatched: list[int] = field(default_factory=lambda: [0, 0])  # matched no rule (overlapping session state)
    overlap_copies: list[int] = field(default_factory=lambda: [0, 0])  # extra copies for overlapping filters


def side_config(t: Mapping[str, Any], default_id: str, flag_prefix: str = "") -> SideConfig:
    """One side of a bridge from its table (`mqtt bridge`'s [bridge.local]/[bridge.remote] keys, or a broker's
    [bridge.remote]): URLs, credentials (a password file is read here), version, TLS context. ValueError in one
    line naming the key, or the flag with `flag_prefix` (`--remote-`).
    """
    urls = t.get("url")
    if isinstance(urls, str):
        urls = [urls]
    if not urls:
        raise ValueError("no broker URL")
    endpoints = []
    user = t.get("username")
    password: bytes | None = None
    for url in urls:
        try:
            parsed = parse_url(str(url))
        except ValueError as err:
            raise ValueError(str(err)) from None
        endpoints.append(parsed.endpoint)
        user = user if user is not None else parsed.username
        if parsed.password is not None and password is None:
            password = parsed.password.encode()
    if t.get("password") is not None:
        password = str(t["password"]).encode()
    if t.get("password_file") is not None:
        file = os.path.expanduser(str(t["password_file"]))
        try:
            with open(file, "rb") as f:
                password = f.readline().rstrip(b"\r\n")
        except OSError as err:
            raise ValueError(f"password file {file}: {err.strerror}") from None
    version_text = str(t.get("protocol_version", "auto")).lower()
    if version_text not in PROTOCOL_VERSIONS:
        raise ValueError(f"protocol version {version_text!r}: use 31, 311, 5 or auto")
    version = PROTOCOL_VERSIONS[version_text]
    client_id = str(t.get("client_id", default_id))
    if not client_id:
        what = f"{flag_prefix}id" if flag_prefix else "client_id"
        raise ValueError(f"{what} is empty: give one, or leave it out for the default {default_id!r}")
    if version == 3 and len(client_id) > 23:
        raise ValueError(f"MQTT 3.1 client ids have 23 characters at most; {client_id!r} has {len(client_id)}")
    ssl_context = None
    if any(t.get(k) for k in ("cafile", "capath", "cert", "insecure")):
        # As the clients' options: these imply TLS, also for an mqtt:// or ws:// URL (mosquitto's bridge_cafile).
        endpoints = [
            Endpoint("mqtts" if e.scheme == "mqtt" else "wss", e.host, e.port, e.path, True)
            if e.scheme in ("mqtt", "ws")
            else e
            for e in endpoints
        ]
    if any(e.tls for e in endpoints):
        alpn = t.get("alpn") or ()
        options = TLSOptions(
            cafile=t.get("cafile"),
            capath=t.get("capath"),
            cert=t.get("cert"),
            key=t.get("key"),
            insecure=bool(t.get("insecure")),
            version=t.get("tls_version"),
            alpn=tuple([alpn] if isinstance(alpn, str) else alpn),
        )
        try:
            ssl_context = make_ssl_context(options, lambda name: _option_name(name, flag_prefix))
        except ValueError as err:
            raise ValueError(str(err)) from None
    keepalive = int(t.get("keepalive", 60))
    expiry = int(t.get("session_expiry", 0xFFFFFFFF))
    if not 0 <= keepalive <= 65535 or not 0 <= expiry <= 0xFFFFFFFF:
        raise ValueError("keepalive 0..65535 and session_expiry 0..4294967295 seconds")
    return SideConfig(
        endpoints=tuple(endpoints),
        client_id=client_id,
        ssl_context=ssl_context,
        username=user,
        password=password,
        version=version,
        keepalive=keepalive,
        session_expiry=expiry,
        clean_start=bool(t.get("clean_start", False)),
        bridge_flag=bool(t.get("try_private", True)),
        round_robin=bool(t.get("round_robin", False)),
    )


def side_settings(s: SideConfig, c: BridgeConfig | Any, **hooks: Any) -> ClientSettings:
    """The client of one bridge side (`mqtt bridge`'s two, an embedded bridge's remote one): a persistent
    session under a stable id, reconnecting forever with the bridge's backoff, manual acknowledgement (end to
    end), the bridge flag, the notification will; `c` gives the bridge-wide settings (restart_base/cap,
    notification_topic, receive_maximum, linger), `hooks` the bridge's callbacks."""
    will = Will(c.notification_topic, b"0", 1, True) if c.notification_topic else None
    return ClientSettings(
        endpoint=s.endpoints[0],
        alternates=s.endpoints[1:],
        round_robin=s.round_robin,
        ssl_context=s.ssl_context,
        client_id=s.client_id,
        version=s.version,
        keepalive=s.keepalive,
        clean_start=s.clean_start,
        session_expiry=0 if s.clean_start else s.session_expiry,
        username=s.username,
        password=s.password,
        will=will,
        connect_timeout=s.connect_timeout,
        reconnect=True,
        retry_first=True,
        reconnect_delay=c.restart_base,
        reconnect_max_delay=c.restart_cap,
        reconnect_timeout=float("inf"),
        ack_timeout=float("inf"),
        receive_maximum=c.receive_maximum,
        max_inflight=_WINDOW,
        topic_alias_maximum=0,
        manual_ack=True,
        bridge_flag=s.bridge_flag,
        linger=c.linger,
        **hooks,
    )


def _option_name(option: str, flag_prefix: str) -> str:
    """`cafile` as this side's flag (`--remote-cafile`) or its TOML key (`cafile`)."""
    return f"{flag_prefix}{option}" if flag_prefix else option.replace("-", "_")


class Journal:
    """The QoS 2 journal file: replayed at start, appended (unbuffered: a killed process loses nothing it wrote)
    before each packet it describes is written, compacted now and then, locked against a second bridge."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = JournalState()
        self.note = ""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise BridgeError(f"{path}: another bridge with this name is running (its journal is locked)") from None
        data = path.read_bytes() if path.exists() else b""
        if data:
            try:
                self.state.load(data)
            except JournalCorrupt as err:
                aside = path.with_name(f"{path.name}.corrupt-{os.getpid()}")
                path.rename(aside)
                self.state = JournalState()
                self.note = (
                    f"journal {path} is damaged ({err}); moved aside to {aside}: QoS 2 messages that were in "
                    "flight when the bridge stopped may arrive twice"
                )
        self._fd = -1
        self._size = 0
        self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(self.state.snapshot())
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._size = 0

    def append(self, rec: JournalRecord) -> None:
        data = record(rec)
        os.write(self._fd, data)
        self.state.apply(rec)
        self._size += len(data)
        if self._size > _COMPACT_AT:
            self._rewrite()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        os.close(self._lock_fd)


class BridgeLog:
    """A bridge's log: text lines to a descriptor (standard error) through net/log.py's LineWriter, as `mqtt serve`'s
    log: a line that cannot be written (a full disk, a file-size limit, a closed pipe or terminal) is dropped and
    counted, never raised (the bridge forwards on), and the next line written says how many were lost."""

    def __init__(self, fd: int, prefix: str = "") -> None:
        self.prefix = prefix  # before each line: "mqtt: " for the command
        self._out = LineWriter(fd)

    @property
    def fd(self) -> int:
        return self._out.fd

    @fd.setter
    def fd(self, fd: int) -> None:
        self._out.fd = fd

    @property
    def lost(self) -> LostLines:
        return self._out.lost

    def __call__(self, line: str, lead: str = "") -> None:
        """Writes `line` after `lead` (terminal control: the command's status line giving way); "": only how many
        lines were lost, if any."""
        self._out.write(f"{self.prefix}{line}\n" if line else "", self._lost_line, lead)

    def _lost_line(self, n: int, reason: str) -> str:
        return f"{self.prefix}bridge: {n} log line{'s' if n != 1 else ''} could not be written ({reason})\n"

    def close(self) -> None:
        """A last try to say how many lines were lost."""
        if self.lost.unsaid:
            self("")


class Bridge:
    def __init__(self, config: BridgeConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.counters = Counters()
        # Before the first connection, the status shows where the bridge is trying to connect.
        self.stats = [SideStats(endpoint=str(side.endpoints[0])) for side in (config.local, config.remote)]
        self.log = log or BridgeLog(stderr_descriptor())
        # How log lines name the bridge: "bridge", or "bridge NAME" for one named otherwise (not "bridge bridge")
        self.who = "bridge" if config.name == DEFAULT_NAME else f"bridge {config.name}"
        self.journal: Journal | None = None
        self.clients: list[Client] = []
        self._seq = 0
        self._told: list[bytes | None] = [None, None]  # the notification value each broker has from this connection
        self._stopping = False
        # Per side: topic -> (topic on the other side, QoS cap, subscription identifier of the copy to forward)
        # or None; bounded. And the subscription identifier of each filter, where the broker has them.
        self._routes: list[dict[str, tuple[str, int, int] | None]] = [{}, {}]
        self._sids: list[dict[str, int]] = [{}, {}]
        # id(received properties) -> (them, their subscription identifiers, them without identifiers and alias)
        self._props_seen: dict[int, tuple[Properties, tuple[int, ...], Properties]] = {}
        self.failure: BaseException | None = None
        self.changed = trio.Event()

    # --- set-up -------------------------------------------------------------------------------------------

    def _settings(self, side: int) -> ClientSettings:
        c = self.config
        return side_settings(
            c.local if side == LOCAL else c.remote,
            c,
            observer=partial(self._observe, side),  # partial, not a lambda: one Python frame fewer per batch
            on_qos2_hand_over=partial(self._handed_over, side),
            on_retry=lambda error, pause: self._retrying(side, error, pause),
            on_primary_back=lambda primary, inflight: self._primary_back(side, primary, inflight),
            read_gate=lambda: self._other_keeps_up(side),
        )

    def _other_keeps_up(self, side: int) -> bool:
        """QoS 0 has no acknowledgements to pace it: while the other side's writer has this many messages not yet
        written, the source is not read (TCP pushes back on its broker) instead of dropping them. QoS 1/2 are
        paced by the brokers' windows; only the writer is waited for, which depends on no reader (no deadlock
        between the two directions of `both` rules)."""
        client = self.clients[REMOTE if side == LOCAL else LOCAL]
        return client.unwritten_qos0 < _QOS0_HIGH or not client.connected

    def _subscriptions(self, side: int, version: int) -> list[Subscription]:
        """The source filters of one side, each once at the highest QoS its rules ask for; on 5.0 with no-local
        and retain-as-published (3.x: the bridge flag asks for the same)."""
        v5 = version == 5
        best = source_filters(self.config.rules, side == REMOTE)
        return [Subscription(f, q, no_local=v5, retain_as_published=v5) for f, q in best.items()]

    def _restore(self) -> None:
        assert self.journal is not None
        state = self.journal.state
        self._seq = state.max_seq
        for e in state.entries.values():
            ctx = Forward(e.src_side, e.src_pid, 2, seq=e.seq, acked=e.released)
            if not e.completed:
                self.clients[e.dst_side].restore_outgoing(e.publish, released=e.released, context=ctx)
            if not e.src_done:
                self.clients[e.src_side].restore_incoming(e.src_pid, 2, acknowledged=e.released)
        if state.entries:
            self.log(f"{self.who}: {len(state.entries)} QoS 2 flows resumed from the journal")

    # --- running ------------------------------------------------------------------------------------------

    async def run(self, stop: trio.Event) -> None:
        c = self.config
        if c.journal is not None:
            try:
                self.journal = Journal(c.journal)
            except OSError as err:
                raise BridgeError(
                    f"{err.filename or c.journal}: {err.strerror} (the bridge's state directory, --state-dir)"
                ) from None
            if self.journal.note:
                self.log(f"{self.who}: warning: {self.journal.note}")
        self.clients = [Client(self._settings(LOCAL)), Client(self._settings(REMOTE))]
        if self.journal is not None:
            self._restore()
        try:
            async with trio.open_nursery() as nursery:
                for side in (LOCAL, REMOTE):
                    await nursery.start(self.clients[side].run)
                    nursery.start_soon(self._subscribe, side)
                nursery.start_soon(self._watch, nursery.cancel_scope)
                await stop.wait()
                await self._drain()
                nursery.cancel_scope.cancel()
        finally:
            if self.journal is not None:
                self.journal.close()
        if self.failure is not None:
            raise self.failure

    async def _subscribe(self, side: int) -> None:
        client = self.clients[side]
        try:
            await client.wait_connected()
            subs = self._subscriptions(side, client.version)
            if not subs:
                return
            # Remembered before subscribing: a bridge stopped between its SUBACK and the end of this would leave a
            # subscription in the session that no later run knows to remove.
            self._filters_file(side, [sub.topic_filter for sub in subs], keep_old=True)
            connack = client.connack
            props = connack.properties if connack is not None else EMPTY_PROPERTIES
            if client.version == 5 and props.subscription_identifier_available != 0:
                # One SUBSCRIBE per filter, each with its identifier: a broker that sends one copy per
                # overlapping subscription (mosquitto, to 5.0 clients) says which copy is which, and only the
                # one for the highest QoS is forwarded.
                codes: tuple[int, ...] = ()
                sids = {sub.topic_filter: i + 1 for i, sub in enumerate(subs)}
                for sub in subs:
                    codes += await client.subscribe([sub], Properties(subscription_identifier=sids[sub.topic_filter]))
                self._sids[side] = sids
            else:
                codes = await client.subscribe(subs)
                self._sids[side] = {}
            self._routes[side].clear()
            await self._forget_old_filters(side, [sub.topic_filter for sub in subs])
        except ClientError:
            return  # the side failed for good: _watch reports it
        for sub, code in zip(subs, codes, strict=False):
            if code >= 0x80:
                self.log(
                    f"{self.who}: the {SIDE_NAMES[side]} broker refused the subscription to "
                    f"{sub.topic_filter!r} (reason 0x{code:02X}); nothing is forwarded from it"
                )

    async def _forget_old_filters(self, side: int, filters: list[str]) -> None:
        """Unsubscribes what an earlier rule set of this bridge subscribed to: the persistent session would keep
        it, and its messages would keep coming (the state file next to the journal remembers the filters)."""
        old = [f for f in self._filters_file(side, filters, keep_old=True) if f not in filters]
        name = SIDE_NAMES[side]
        if old:
            await self.clients[side].unsubscribe(old)
            self.log(f"{self.who}: {name}: unsubscribed from {', '.join(old)} (no longer in the rules)")
        self._filters_file(side, filters, keep_old=False)

    def _filters_file(self, side: int, filters: list[str], *, keep_old: bool) -> list[str]:
        """Records the filters subscribed to on `side` (with those recorded before, when `keep_old`), in the state
        file next to the journal; returns what it holds for `side` now. Nothing without a journal."""
        journal = self.config.journal
        if journal is None:
            return list(filters)
        path = journal.with_name(journal.stem + ".filters.json")
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        if not isinstance(known, dict):
            known = {}
        name = SIDE_NAMES[side]
        before = known.get(name, []) if isinstance(known.get(name), list) else []
        now = [*before, *(f for f in filters if f not in before)] if keep_old else list(filters)
        if now != before:
            known[name] = now
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(known))
            os.replace(tmp, path)
        return now

    async def _watch(self, scope: trio.CancelScope) -> None:
        """Ends the bridge when a side fails for good (refused credentials, say)."""
        while True:
            for side, client in enumerate(self.clients):
                failure = client.failure
                if failure is not None:
                    failure.args = (f"{self.who}, {SIDE_NAMES[side]} side: {failure}",)
                    self.failure = failure
                    scope.cancel()
                    return
            await trio.sleep(0.2)

    async def _drain(self) -> None:
        """SIGINT/SIGTERM: stop taking messages (those not taken stay with their broker, unacknowledged), let
        what is in flight finish (bounded), then leave."""
        self._stopping = True

        def pending() -> int:
            return sum(c.inflight + c.queued for c in self.clients if c.connected)

        if waiting := pending():
            self.log(
                f"{self.who}: stopping: waiting for {waiting} message(s) in flight (up to "
                f"{self.config.drain_timeout:g} s; a second signal leaves at once)"
            )
        with trio.move_on_after(self.config.drain_timeout):
            while pending():
                await trio.sleep(0.02)
        if left := pending():
            self.log(
                f"{self.who}: {left} message(s) not acknowledged in time: their source brokers "
                "send them again to the next run"
            )
        if self.config.notification_topic:
            for side, client in enumerate(self.clients):
                if client.connected and self._told[side] != b"0":
                    self._told[side] = b"0"
                    client.publish_nowait(self.config.notification_topic, b"0", 1, True)
            with trio.move_on_after(2):
                while any(c.inflight for c in self.clients if c.connected):
                    await trio.sleep(0.02)
        with trio.CancelScope(shield=True):
            for client in self.clients:
                await client.disconnect()

    # --- the hot path: synchronous, from the clients' event batches ---------------------------------------

    def _observe(self, side: int, events: list[Any]) -> None:
        for event in events:
            t = type(event)
            if t is MessagesReceived:
                forward = self._forward
                epoch = self.clients[side].session_epoch  # (a read's messages are of one session)
                for p in event.messages:
                    forward(side, p, epoch)
            elif t is Acknowledged:
                delivered = self._delivered
                for ctx in event.contexts:
                    delivered(ctx)
            elif t is PublishAcknowledged:
                self._acknowledged(side, event)
            elif t is PublishReceived:
                ctx = event.context
                if type(ctx) is Forward:
                    if ctx.seq and self.journal is not None:
                        self.journal.append(Released(ctx.seq))
                    if not ctx.acked:
                        self._ack_source(ctx)
                        self.counters.acknowledged[ctx.src_side] += 1
            elif t is ReleaseReceived:
                if self.journal is not None and (side, event.packet_id) in self.journal.state.by_src:
                    self.journal.append(SourceReleased(side, event.packet_id))
            elif t is ConnectionAccepted:
                self._connected(side, event)
            elif t is Disconnected:
                self._disconnected(side, event.reason)
        # What this batch produced for either broker (forwards one way, acknowledgements the other) leaves now,
        # with a non-blocking send each, instead of waking two writer tasks (they take what a socket refuses).
        for client in self.clients:
            client.send_now()

    def _forward(self, side: int, p: Publish, epoch: int) -> None:
        """A message from `side`'s broker, received in its session `epoch` (Client.session_epoch)."""
        if self._stopping:
            return  # not acknowledged: the source broker keeps it for the next session
        c = self.counters
        dst = REMOTE if side == LOCAL else LOCAL
        routes = self._routes[side]
        try:
            route = routes[p.topic]
        except KeyError:
            route = self._route(side, p.topic)
            if len(routes) >= _ROUTES_MAX:
                routes.clear()
            routes[p.topic] = route
        src_qos = p.qos
        if p.dup:
            c.duplicates[side] += 1
        if route is None:
            # A subscription left in the persistent session by an earlier rule set, say: not ours to forward.
            c.unmatched[side] += 1
            if src_qos:
                self.clients[side].acknowledge(p.packet_id, wake=False)  # type: ignore[arg-type]
            return
        topic, cap, sid = route
        props = p.properties
        if props.items:
            # The codec hands out one Properties object per distinct property block: what the forward needs of
            # it is worked out once per object (looked up by identity: hashing sorts the items).
            known = self._props_seen.get(id(props))
            if known is None or known[0] is not props:
                sids = props.subscription_identifiers
                stripped = props
                if sids or props.topic_alias is not None:
                    stripped = props.replace(subscription_identifiers=(), topic_alias=None)
                if len(self._props_seen) >= _ROUTES_MAX:
                    self._props_seen.clear()
                known = self._props_seen[id(props)] = (props, sids, stripped)
            _, sids, props = known
            if sid and sids and sid not in sids:
                c.overlap_copies[side] += 1  # another copy (for a lower QoS filter) carries the message
                if src_qos:
                    self.clients[side].acknowledge(p.packet_id, wake=False)  # type: ignore[arg-type]
                return
        qos = cap if cap < src_qos else src_qos
        client = self.clients[dst]
        if props.items and client.protocol_version != 5:
            props = EMPTY_PROPERTIES
        c.forwarded[side] += 1
        if qos == 0:
            # Like mosquitto's bridge: QoS 0 is not kept for a side that is down, and is bounded for a slow one.
            if client.connected and client.queued < self.config.qos0_queue:
                client.publish_nowait(topic, p.payload, 0, p.retain, props)
            else:
                c.dropped[side] += 1
            if src_qos:
                self.clients[side].acknowledge(p.packet_id, wake=False)  # type: ignore[arg-type]
            return
        ctx = Forward(side, p.packet_id, src_qos, epoch)  # type: ignore[arg-type]
        if qos == 1 and not props.items and client.relay(topic, p.payload, 1, p.retain, ctx):
            # publish_nowait()'s common case in one call (no journal for QoS 1; what it queued leaves with
            # _observe's send_now()). Anything else, or a relay() that declines, takes publish_nowait().
            return
        client.publish_nowait(topic, p.payload, qos, p.retain, props, context=ctx)

    def _route(self, side: int, topic: str) -> tuple[str, int, int] | None:
        """Where a message on `topic` goes, at which QoS at most, and the subscription identifier of the copy to
        forward (core.bridge.route)."""
        found = route(self.config.rules, side == REMOTE, topic)
        if found is None:
            return None
        return found.topic, found.qos, self._sids[side].get(found.source_filter, 0)

    def _handed_over(
        self, dst: int, pid: int, topic: str, payload: bytes, retain: bool, props: Properties, ctx: Any
    ) -> None:
        if self.journal is None or type(ctx) is not Forward:
            return
        if not ctx.seq:
            self._seq += 1
            ctx.seq = self._seq
        publish = Publish(topic, payload, 2, retain, False, pid, props)
        self.journal.append(Forwarded(ctx.seq, dst, pid, ctx.src_side, ctx.src_pid, publish))

    def _ack_source(self, ctx: Forward) -> None:
        """Acknowledges a forward to the broker it came from, once; not when that broker lost the session
        meanwhile (the packet identifier may be another message's now). The connection's own acknowledge: what
        it queues leaves with _observe's send_now()."""
        ctx.acked = True
        self.clients[ctx.src_side].acknowledge(ctx.src_pid, epoch=ctx.src_epoch, wake=False)

    def _delivered(self, ctx: Any) -> None:
        """A plain PUBACK (success) from a destination (Acknowledged): _acknowledged's common case."""
        if type(ctx) is Forward and not ctx.acked:
            self._ack_source(ctx)
            self.counters.acknowledged[ctx.src_side] += 1

    def _acknowledged(self, side: int, event: PublishAcknowledged) -> None:
        ctx = event.context
        if type(ctx) is not Forward:
            return  # a notification message
        c = self.counters
        ok = event.reason_code < 0x80
        if not ok:
            c.refused[ctx.src_side] += 1
            self.log(
                f"{self.who}: the {SIDE_NAMES[side]} broker refused a message (reason "
                f"0x{event.reason_code:02X}); it is acknowledged to the {SIDE_NAMES[ctx.src_side]} broker and dropped"
            )
        if ctx.seq and self.journal is not None:
            self.journal.append(Completed(ctx.seq))
        # QoS 2 forwards were acknowledged to their source at PUBREC already; QoS 1 ones (and refusals) now.
        if not ctx.acked:
            self._ack_source(ctx)
            if ok:
                c.acknowledged[ctx.src_side] += 1

    def _connected(self, side: int, event: ConnectionAccepted) -> None:
        st = self.stats[side]
        client = self.clients[side]
        if st.version:
            st.reconnects += 1
        st.connected = True
        self._told[side] = None
        st.session_present = event.session_present
        st.version = client.protocol_version
        st.endpoint = str(client.endpoint)
        st.error = ""
        if event.session_present:
            self.counters.resent[REMOTE if side == LOCAL else LOCAL] += client.inflight
        elif self.journal is not None and any(e.src_side == side for e in self.journal.state.entries.values()):
            self.journal.append(SourceLost(side))
        self.log(
            f"{self.who}: {SIDE_NAMES[side]} connected to {st.endpoint} "
            f"(MQTT {version_name(st.version)}, session {'resumed' if event.session_present else 'new'})"
        )
        if client.bridge_flag_refused and not st.warned_flag:
            st.warned_flag = True
            echo = any(r.direction == "both" for r in self.config.rules)
            self.log(
                f"{self.who}: the {SIDE_NAMES[side]} broker does not accept the bridge flag: connected "
                "without it, so it may send our own messages back"
                + ("; a `both` rule can then loop between the brokers" if echo else "")
            )
        self._notify_link()
        self._changed()

    def _disconnected(self, side: int, reason: str) -> None:
        st = self.stats[side]
        if st.moving:
            st.moving = False
            self.log(f"{self.who}: {SIDE_NAMES[side]} left {st.endpoint} for the main address")
        elif st.connected and self._stopping:
            self.log(f"{self.who}: {SIDE_NAMES[side]} disconnected")  # our own goodbye, not a failure
        elif st.connected:
            self.log(f"{self.who}: {SIDE_NAMES[side]} connection lost: {reason}")
        st.connected = False
        self._told[side] = None
        st.error = reason
        self._notify_link()
        self._changed()

    def _primary_back(self, side: int, primary: Any, inflight: int) -> None:
        self.stats[side].moving = True
        self.log(
            f"{self.who}: {SIDE_NAMES[side]}: the main address {primary} answers again: moving back to it once "
            f"the {inflight:,} message(s) in flight are acknowledged"
        )

    def _retrying(self, side: int, error: str, pause: float) -> None:
        st = self.stats[side]
        if error != st.error:  # say each new reason once, not every attempt
            self.log(
                f"{self.who}: {SIDE_NAMES[side]}: {error}; trying again (backoff up to "
                f"{self.config.restart_cap:g} s)"
            )
        st.error = error

    def _notify_link(self) -> None:
        """The notification topic on each side: 1 while the bridge links both brokers, 0 otherwise (a will says
        0 for a bridge that vanishes), retained, like mosquitto's bridge notifications. Each broker is told
        when its value changes, and again on each new connection (it may have restarted without its retained
        messages): a side that connects while the other cannot be reached reads 0, as with mosquitto."""
        topic = self.config.notification_topic
        if topic is None:
            return
        value = b"1" if self.stats[LOCAL].connected and self.stats[REMOTE].connected else b"0"
        for side, client in enumerate(self.clients):
            if self.stats[side].connected and self._told[side] != value:
                self._told[side] = value
                client.publish_nowait(topic, value, 1, True)

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    # --- status -------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        c = self.counters
        out: dict[str, Any] = {"bridge": self.config.name}
        for side, name in enumerate(SIDE_NAMES):
            st = self.stats[side]
            client = self.clients[side] if self.clients else None
            out[name] = {
                "connected": st.connected,
                "endpoint": st.endpoint,
                "protocol": version_name(st.version) if st.version else None,
                "reconnects": st.reconnects,
                "in_flight": client.inflight if client else 0,
                "queued": client.queued if client else 0,
                "error": st.error or None,
            }
        for src, name in ((LOCAL, "out"), (REMOTE, "in")):
            out[name] = {
                "forwarded": c.forwarded[src],
                "acknowledged": c.acknowledged[src],
                "resent": c.resent[src],
                "duplicates_received": c.duplicates[src],
                "dropped_qos0": c.dropped[src],
                "refused": c.refused[src],
                "unmatched": c.unmatched[src],
                "overlap_copies": c.overlap_copies[src],
            }
        return out
