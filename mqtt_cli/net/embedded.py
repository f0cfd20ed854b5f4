"""A bridge inside `mqtt serve`: the local side is the broker itself, the remote side `mqtt bridge`'s client.

    bridge = EmbeddedBridge(EmbeddedConfig(name="cloud", remote=side_config(...), rules=[...], local_client_id=...),
                            core_of, flush, to_send, log)      # BrokerServer's (net/server.py: _start_bridge)
    nursery.start_soon(bridge.run)      # until bridge.stop(forget=...)

No connection to ourselves: the bridge attaches to `BrokerCore` as an in-process client (`BrokerCore.attach`),
whose session holds the local filters of the rules and the messages for the remote. Local messages reach
`deliver` as `Message` objects and go to the remote client under the session's packet identifiers; the core's
flow for each ends (`acknowledge_internal`) only when the remote acknowledged it (PUBACK; for QoS 2 PUBREC, told
with `received_internal`, then PUBCOMP), so until then the message stays in the bridge's session, persisted with
it when persistence is on (a session that never expires). With persistence a QoS 2 forward leaves once its
identifier is on file, and its PUBREL once the PUBREC is (`released`): a restart re-sends each flow as the remote
knows it, under the same identifier, and a QoS 2 message arrives once.
Remote messages go in with `publish_internal` and are acknowledged to the remote once the broker has taken
them, and with persistence on once the commit that stored them is done (`taken`). Rules, routes and the remote
client's settings are `mqtt bridge`'s (core/bridge.py, net/bridge.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from mqtt_cli.core.bridge import BridgeRule, LinkStats, route, source_filters
from mqtt_cli.core.broker import NEVER_EXPIRES, BrokerCore
from mqtt_cli.core.events import (
    Acknowledged,
    ConnectionAccepted,
    Disconnected,
    MessagesReceived,
    PublishAcknowledged,
    PublishReceived,
    ReleaseReceived,
)
from mqtt_cli.core.packets import Publish, Subscription
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties
from mqtt_cli.core.server import ServerConnection
from mqtt_cli.core.session import Message, SubscriptionOptions

from .bridge import SideConfig, side_settings
from .client import Client, version_name
from .errors import ClientError

__all__ = ["EmbeddedBridge", "EmbeddedConfig"]

_ROUTES_MAX = 10_000


@dataclass
class EmbeddedConfig:
    name: str
    remote: SideConfig
    rules: list[BridgeRule]
    local_client_id: str
    restart_base: float = 0.5
    restart_cap: float = 30.0
    notification_topic: str | None = None  # retained 1/0 on both brokers (mosquitto's notifications)
    qos0_queue: int = 10_000  # QoS 0 messages held for a remote that is slow, beyond which they drop
    receive_maximum: int = 1000  # unacknowledged messages each way: the remote's to us, ours to it
    linger: float = 0.005  # as mqtt bridge's default: a busy remote reader waits that long to read more at once
    source: Any = None  # the configuration record it was made from: a reload restarts the bridge when it differs
    # Remote filters an earlier run of this bridge subscribed to and the rules no longer have (a reload that
    # changed the rules): unsubscribed once connected, or the persistent remote session would keep sending them.
    unsubscribe: tuple[str, ...] = ()


@dataclass(slots=True)
class _Out:
    """A local QoS 1/2 message on its way to the remote: the packet identifier of the broker's flow to end."""

    pid: int
    conn: ServerConnection


class EmbeddedBridge:
    def __init__(self, config: EmbeddedConfig, core_of: Callable[[], BrokerCore], flush: Callable[[], None],
                 to_send: Callable[[EmbeddedBridge], None], log: Callable[[str], None]) -> None:  # fmt: skip
        self.config = config
        self._core_of = core_of
        # The server's: what the core produced for network clients leaves (and then send_now() of the bridges
        # that asked through to_send: one send to the remote per read of a publisher, not one per message).
        self._flush = flush
        self._to_send = to_send
        self._send_asked = False
        self.log = log
        self.stats = LinkStats(config.name, config.local_client_id)
        self.client: Client | None = None
        self.conn: ServerConnection | None = None
        self._routes: list[dict[str, tuple[str, int, int] | None]] = [{}, {}]
        self._sids: dict[str, int] = {}
        self._told: bytes | None = None
        self._scope = trio.CancelScope()
        self._stopping = trio.Event()
        self._cleanup = False  # forget the local session when stopped (the bridge was removed)
        self._was_connected = False
        self._last_error = ""
        self._moving = False  # leaving an alternate address for the main one (round_robin false)
        self.who = f"bridge {config.name}"

    # --- life -----------------------------------------------------------------------------------------------

    def stop(self, *, forget: bool) -> None:
        """Ends the bridge (shutdown, or a reload removed or changed it): the notification topic says 0, the remote
        gets DISCONNECT (bounded), then run() returns; `forget` ends its local session too."""
        self._cleanup = forget
        self._stopping.set()

    async def _stopper(self) -> None:
        await self._stopping.wait()
        client = self.client
        assert client is not None
        with trio.move_on_after(2), contextlib.suppress(ClientError):
            self._notify_local(b"0")
            if client.connected:
                if self.config.notification_topic:
                    client.publish_nowait(self.config.notification_topic, b"0", 1, True)
                    client.send_now()
                    await client.wait_acknowledged()
                await client.disconnect()
        self._scope.cancel()

    async def run(self) -> None:
        c = self.config
        core = self._core_of()
        core.links[c.name] = self.stats
        self.client = Client(
            side_settings(
                c.remote,
                c,
                observer=self._observe,
                on_retry=self._retrying,
                on_primary_back=self._primary_back,
                owner_ids=True,
            )
        )
        now = trio.current_time()
        self.conn = core.local.attach(
            c.local_client_id, self, now, receive_maximum=c.receive_maximum, expiry=NEVER_EXPIRES, bridge=c.name
        )
        filters = source_filters(c.rules, remote=False)
        # No local: what this bridge publishes locally (from the remote) is not sent back; retain as published.
        core.local.subscribe_internal(
            self.conn, {f: SubscriptionOptions(q, True, True) for f, q in filters.items()}, now
        )
        core.local.resume_internal(self.conn, now)  # what the session kept (a restart's store, an earlier run) goes on
        for pid in core.local.unreleased_internal(self.conn):
            # QoS 2 from the remote stored (and PUBREC owed or sent) before a restart or a reload: its re-send is
            # acknowledged, not published again.
            self.client.restore_incoming(pid, 2, acknowledged=True)
        self._flush()
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.client.run)
                    nursery.start_soon(self._subscribe_remote)
                    nursery.start_soon(self._watch)
                    nursery.start_soon(self._stopper)
        finally:
            core = self._core_of()
            core.local.detach(self.conn, trio.current_time(), forget=self._cleanup)
            if core.links.get(c.name) is self.stats:
                del core.links[c.name]
            self.stats.connected = False
            self._flush()

    async def _watch(self) -> None:
        assert self.client is not None
        while self.client.failure is None:
            await trio.sleep(0.2)
        self.log(f"{self.who}: remote side: {self.client.failure}; the bridge stops (fix it and reload)")
        self._scope.cancel()

    async def _subscribe_remote(self) -> None:
        client = self.client
        assert client is not None
        best = source_filters(self.config.rules, remote=True)
        try:
            await client.wait_connected()
            v5 = client.version == 5
            subs = [Subscription(f, q, no_local=v5, retain_as_published=v5) for f, q in best.items()]
            connack = client.connack
            props = connack.properties if connack is not None else EMPTY_PROPERTIES
            codes: tuple[int, ...] = ()
            if not subs:
                pass
            elif v5 and props.subscription_identifier_available != 0:
                sids = {sub.topic_filter: i + 1 for i, sub in enumerate(subs)}
                for sub in subs:
                    sid = Properties(subscription_identifier=sids[sub.topic_filter])
                    codes += await client.subscribe([sub], sid)
                self._sids = sids
            else:
                codes = await client.subscribe(subs)
                self._sids = {}
            self._routes[1].clear()
            old = [f for f in self.config.unsubscribe if f not in best]
            if old:
                await client.unsubscribe(old)
                self.log(f"{self.who}: remote: unsubscribed from {', '.join(old)} (no longer in the rules)")
        except ClientError:
            return
        for sub, code in zip(subs, codes, strict=False):
            if code >= 0x80:
                self.log(f"{self.who}: the remote broker refused the subscription to {sub.topic_filter!r} "
                         f"(reason 0x{code:02X}); nothing is forwarded from it")  # fmt: skip

    # --- local to remote: the core's sink ---------------------------------------------------------------------

    def _route_out(self, topic: str) -> tuple[str, int, int] | None:
        """Where a local message goes on the remote (its topic, the rule's QoS), None when no rule takes it."""
        routes = self._routes[0]
        try:
            return routes[topic]
        except KeyError:
            r = route(self.config.rules, False, topic)
            found = None if r is None else (r.topic, r.qos, 0)
            if len(routes) >= _ROUTES_MAX:
                routes.clear()
            routes[topic] = found
            return found

    def deliver(self, message: Message, qos: int, retain: bool, packet_id: int | None) -> None:
        """A delivery to the bridge's local session (synchronously, from the core)."""
        client = self.client
        assert client is not None and self.conn is not None
        found = self._route_out(message.topic)
        core = self._core_of()
        if found is None:  # a filter kept from an earlier rule set: not ours to forward
            if packet_id is not None:
                core.local.acknowledge_internal(self.conn, packet_id, trio.current_time())
            return
        out_topic, cap, _ = found
        out_qos = cap if cap < qos else qos
        props = message.properties
        v5 = client.protocol_version == 5
        if props.items and (not v5 or props.subscription_identifiers):
            props = props.replace(subscription_identifiers=()) if v5 else EMPTY_PROPERTIES
        stats = self.stats
        stats.forwarded[0] += 1
        if not out_qos:
            if client.connected and client.queued < self.config.qos0_queue:
                client.publish_nowait(out_topic, message.payload, 0, retain, props)
                if not self._send_asked:
                    self._send_asked = True
                    self._to_send(self)
            else:
                stats.dropped[0] += 1
            if packet_id is not None:
                core.local.acknowledge_internal(self.conn, packet_id, trio.current_time())
            return
        if not self._send_asked:
            self._send_asked = True
            self._to_send(self)
        assert packet_id is not None  # a QoS 1/2 delivery has one
        ctx = _Out(packet_id, self.conn)
        # Sent under the session's identifier: after a restart the store re-sends it under the same one, which the
        # remote broker then takes as the re-send it is (a QoS 2 message it holds is not held twice).
        if out_qos == 1 and not props.items and client.relay(out_topic, message.payload, 1, retain, ctx, packet_id):
            return
        client.publish_nowait(out_topic, message.payload, out_qos, retain, props, context=ctx, packet_id=packet_id)

    def released(self, packet_id: int) -> None:
        """The core says the PUBREL of a QoS 2 forward may go (received_internal: its PUBREC is stored)."""
        client = self.client
        if client is not None:
            client.release(packet_id)
            if not self._send_asked:
                self._send_asked = True
                self._to_send(self)

    def restore_released(self, message: Message, retain: bool, packet_id: int) -> None:
        """A QoS 2 forward whose PUBREC came before a restart or a reload (resume_internal): the remote holds it,
        only its PUBREL is owed, re-sent after the next CONNACK."""
        client = self.client
        assert client is not None and self.conn is not None
        found = self._route_out(message.topic)
        topic = found[0] if found is not None else message.topic
        publish = Publish(topic, message.payload, 2, retain, True, packet_id, EMPTY_PROPERTIES)
        client.restore_outgoing(publish, released=True, context=_Out(packet_id, self.conn))

    def send_now(self) -> None:
        """What deliver() gave the remote client leaves (the server calls it at the end of its flush)."""
        self._send_asked = False
        if self.client is not None:
            self.client.send_now()

    def taken(self, token: Any) -> None:
        """A remote message's commit is done (persistence): acknowledged to the remote now."""
        client = self.client
        if client is not None and token is not None:
            pid, epoch = token
            if client.acknowledge(pid, epoch=epoch, wake=False):
                client.send_now()

    def _delivered(self, ctx: Any) -> None:
        """The remote acknowledged a forward (a plain PUBACK, Acknowledged; or PublishAcknowledged): the local flow
        ends (what that changes leaves with the flush at the end of this read, _observe)."""
        if type(ctx) is _Out and not ctx.conn.closed:
            self._core_of().local.acknowledge_internal(ctx.conn, ctx.pid, trio.current_time())

    # --- remote to local ----------------------------------------------------------------------------------------

    def _incoming(self, p: Publish) -> None:
        client = self.client
        conn = self.conn
        assert client is not None and conn is not None
        routes = self._routes[1]
        try:
            found = routes[p.topic]
        except KeyError:
            r = route(self.config.rules, True, p.topic)
            found = None if r is None else (r.topic, r.qos, self._sids.get(r.source_filter, 0))
            if len(routes) >= _ROUTES_MAX:
                routes.clear()
            routes[p.topic] = found
        qos = p.qos
        if found is None:
            if qos:
                client.acknowledge(p.packet_id, wake=False)  # type: ignore[arg-type]
            return
        topic, cap, sid = found
        props = p.properties
        if props.items:
            sids = props.subscription_identifiers
            if sid and sids and sid not in sids:  # a copy for an overlapping, lower QoS filter
                if qos:
                    client.acknowledge(p.packet_id, wake=False)  # type: ignore[arg-type]
                return
        out_qos = cap if cap < qos else qos
        self.stats.forwarded[1] += 1
        core = self._core_of()
        token = (p.packet_id, client.session_epoch) if qos else None
        taken = core.local.publish_internal(conn, topic, p.payload, out_qos, p.retain, props, trio.current_time(),
                                            token, incoming_id=p.packet_id if qos == 2 else None)  # fmt: skip
        if taken and qos:
            client.acknowledge(p.packet_id, wake=False)  # type: ignore[arg-type]
        # The deliveries it made leave with the flush at the end of this read (_observe).

    # --- events -------------------------------------------------------------------------------------------------

    def _observe(self, events: list[Any]) -> None:
        for event in events:
            t = type(event)
            if t is MessagesReceived:
                incoming = self._incoming
                for p in event.messages:
                    incoming(p)
            elif t is Acknowledged:
                delivered = self._delivered
                for ctx in event.contexts:
                    delivered(ctx)
            elif t is PublishAcknowledged:
                ctx = event.context
                if event.reason_code >= 0x80 and type(ctx) is _Out:
                    st = self.stats
                    st.refused += 1
                    if not st.refused & (st.refused - 1):  # the 1st, 2nd, 4th...: never a flood of lines
                        self.log(f"{self.who}: the remote broker refused a message (reason 0x{event.reason_code:02X}); "
                                 f"it is dropped ({st.refused:,} so far)")  # fmt: skip
                self._delivered(ctx)
            elif t is PublishReceived:  # PUBREC for a QoS 2 forward: its PUBREL waits for the store (released)
                ctx = event.context
                if not (type(ctx) is _Out and self._core_of().local.received_internal(ctx.conn, ctx.pid)):
                    self.released(event.packet_id)  # no flow of the session's waits for it: the flow goes on
            elif t is ReleaseReceived:
                if self.conn is not None:
                    self._core_of().local.release_internal(self.conn, event.packet_id)
            elif t is ConnectionAccepted:
                self._connected(event)
            elif t is Disconnected:
                if self._moving:
                    self._moving = False
                    self.log(f"{self.who}: left {self.stats.address} for the main address")
                elif self.stats.connected:
                    self.log(f"{self.who}: remote connection lost: {event.reason}")
                self.stats.connected = False
                self._notify_local(b"0")
        # Called after every read of the remote: what it produced for local clients and the store, and for the
        # remote (acknowledgements, forwards the window let through), leaves now.
        self._flush()
        if self.client is not None:
            self.client.send_now()

    def _connected(self, event: ConnectionAccepted) -> None:
        client = self.client
        assert client is not None
        st = self.stats
        if self._was_connected:
            st.reconnects += 1
        self._was_connected = st.connected = True
        st.address = str(client.endpoint)
        st.address_index = client.endpoint_index
        if event.session_present:
            st.resent += client.inflight
        elif self.conn is not None:  # the remote forgot its QoS 2 flows to us: so do we
            core = self._core_of()
            for pid in core.local.unreleased_internal(self.conn):
                core.local.release_internal(self.conn, pid)
        self.log(
            f"{self.who}: connected to {client.endpoint} (MQTT {version_name(client.protocol_version)}, "
            f"session {'resumed' if event.session_present else 'new'})"
        )
        topic = self.config.notification_topic
        if topic:
            client.publish_nowait(topic, b"1", 1, True)
        self._notify_local(b"1")

    def _notify_local(self, value: bytes) -> None:
        topic = self.config.notification_topic
        if topic is None or self.conn is None or self.conn.closed or self._told == value:
            return
        self._told = value
        self._core_of().local.publish_internal(
            self.conn, topic, value, 1, True, EMPTY_PROPERTIES, trio.current_time(), None, system=True
        )
        self._flush()

    def _primary_back(self, primary: Any, inflight: int) -> None:
        self._moving = True
        self.log(f"{self.who}: the main address {primary} answers again: moving back to it once the "
                 f"{inflight:,} message(s) in flight are acknowledged")  # fmt: skip

    def _retrying(self, error: str, pause: float) -> None:
        if error != self._last_error:
            self.log(f"{self.who}: remote: {error}; trying again (backoff up to {self.config.restart_cap:g} s)")
        self._last_error = error
