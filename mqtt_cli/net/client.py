"""The trio MQTT client: `ClientConnection` (mqtt_cli.core) driven over a transport.

    async with open_client(ClientSettings(endpoint=Endpoint(host="localhost"))) as client:
        await client.subscribe([Subscription("a/#", qos=1)])
        await client.publish("a/b", b"hi", qos=1)
        await client.wait_acknowledged()
        async for item in client.messages: ...          # Publish (or PongReceived markers, see ping_marker)
        batch = await client.messages.receive_batch()   # or a read's messages at a time (a list)

One connection at a time, three tasks while it lasts (reader, writer, keepalive timer) in a nursery; a
supervisor task reconnects with backoff when `reconnect` is set, on the same session (QoS 1/2 messages in
flight are re-sent with DUP, or published again when the broker lost the session). Every wait is bounded:
connecting by `connect_timeout`, acknowledgements by `ack_timeout` without progress, reconnecting by
`reconnect_timeout`. Errors are `mqtt_cli.net.errors` classes, each with the exit code of a client command.
"""

from __future__ import annotations

import random
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from mqtt_cli.core.errors import LocalProtocolError
from mqtt_cli.core.events import (
    Acknowledged,
    ConnectionAccepted,
    ConnectionRefused,
    Disconnected,
    MessagesReceived,
    PongReceived,
    PublishAcknowledged,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from mqtt_cli.core.packets import Publish, Subscription
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties

from .errors import BrokerRefused, ClientError, ConnectFailed, ConnectionLost, PublishFailed, TLSFailed, refused_error
from .readsize import READ_SIZE
from .settings import ClientSettings, new_connection, random_client_id, version_name
from .transports import direct_sender, open_transport

__all__ = ["Client", "ClientSettings", "MessageStream", "open_client", "version_name"]

_LINGER_RATE = 50_000  # messages a second that lingering must be able to pass (see _reader)
_QOS0_BACKLOG = 4096  # QoS 0 messages queued but not yet written before publish() waits for the writer
_BACKLOG = 1024  # messages waiting for the window before publish() waits
# CONNACK refusals worth retrying: unavailable, busy, shutting down, connection rate, closed in answer (-1).
_TRANSIENT_REFUSALS = (0x88, 0x89, 0x8B, 0x9F, -1)


class Client:
    """Use through `open_client()`. Counters: `published` (handed to the connection), `written` (QoS 0 on the
    wire), `acknowledged` (QoS 1/2 acknowledged with success), `refused` (PublishAcknowledged with a failure)."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        s = settings
        #: The sans-IO connection this client drives (the owner uses the methods below; tests and benchmarks feed it).
        self.conn = new_connection(s)
        self.endpoints = (s.endpoint, *s.alternates)
        self.endpoint = s.endpoint  # the one in use, or tried last
        self._endpoint_index = 0
        self._observer = s.observer
        self._on_qos2_hand_over = s.on_qos2_hand_over
        self._send_channel, receive_channel = trio.open_memory_channel[list[Publish] | PongReceived](s.message_buffer)
        self.messages = MessageStream(receive_channel)
        self.failure: ClientError | None = None
        self.version = 0  # the protocol version in use, once connected
        self.connack: ConnectionAccepted | None = None
        self.published = 0
        self.written = 0
        self.acknowledged = 0
        self.refused: list[PublishAcknowledged] = []
        self.reconnects = 0
        self.pauses = 0  # linger pauses taken (see _reader)
        self.bridge_flag_refused = False  # the broker did not take the bridge flag: connected without it
        self._changed = trio.Event()
        self._wake = trio.Event()
        self._qos0_pending = 0  # QoS 0 messages queued or being written
        self._qos0_queued = 0  # of which not yet handed to the writer
        # Messages not yet handed to the connection (window closed, reconnecting, or a lost session's).
        # (topic, payload, QoS, retain, properties, context, the packet identifier the owner gave or 0)
        self._backlog: deque[tuple[str, bytes, int, bool, Properties, Any, int]] = deque()
        self._results: dict[int, SubscribeAcknowledged | UnsubscribeAcknowledged] = {}
        self._subscriptions: dict[int, tuple[tuple[Subscription, ...], Properties]] = {}
        self._generation = 0  # connections made so far
        self._pongs = 0
        self._markers: deque[int] = deque()  # pings_sent values whose PINGRESP goes into `messages`
        self._ending = False
        self._closing = False
        self._lost_reason = ""
        self._conn_scope: trio.CancelScope | None = None
        self._conn_done = trio.Event()
        self._progress = 0.0
        # A non-blocking send on the TCP socket (transports.direct_sender): the reader sends without a task switch.
        self._send_now: Callable[[bytes], int] | None = None
        self._unsent = b""  # what a direct send left over, for the writer
        self._writer_sending = False
        self._to_primary = False  # the connection is being left for the main address (round_robin False)

    # --- public API ---------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.conn.connected and not self._ending

    @property
    def endpoint_index(self) -> int:
        """The position of `endpoint` (in use, or tried last) among the addresses: 0 is the first (main) one."""
        return self._endpoint_index

    async def publish(
        self,
        topic: str,
        payload: bytes = b"",
        qos: int = 0,
        retain: bool = False,
        properties: Properties = EMPTY_PROPERTIES,
        *,
        context: Any = None,
    ) -> None:
        """Hands a message to the connection, waiting (bounded) for room: the broker's receive maximum for QoS
        1/2, the writer for QoS 0, a connection while reconnecting. Returns before the acknowledgement: see
        wait_acknowledged(). Raises PublishFailed for a message the broker's limits forbid."""
        backlog = self._backlog
        while True:
            if self.failure is not None:
                raise self.failure
            if self._can_hand_over(qos):
                self._hand_over(topic, payload, qos, retain, properties, context, 0)
                self._wake.set()
                return
            if len(backlog) < _BACKLOG:
                # Queued here, handed over by the reader as acknowledgements open the window: one task switch
                # per round trip instead of one per message.
                backlog.append((topic, payload, qos, retain, properties, context, 0))
                return
            await self._wait_changed()

    def publish_nowait(
        self,
        topic: str,
        payload: bytes = b"",
        qos: int = 0,
        retain: bool = False,
        properties: Properties = EMPTY_PROPERTIES,
        *,
        context: Any = None,
        packet_id: int = 0,
    ) -> None:
        """publish() without waiting: the message is handed over now or queued (without bound: the caller
        bounds what it queues, see `queued`). Raises PublishFailed like publish(). `packet_id`: the identifier
        the owner gave it (ClientSettings.owner_ids), else 0."""
        if self.failure is not None:
            raise self.failure
        # _can_hand_over(), inline: this is the bridge's path for every message.
        conn = self.conn
        if (
            self._backlog
            or self._ending
            or not conn.connected
            or not (conn.window_open if qos else self._qos0_queued < _QOS0_BACKLOG)
        ):
            self._backlog.append((topic, payload, qos, retain, properties, context, packet_id))
            return
        self._hand_over(topic, payload, qos, retain, properties, context, packet_id)
        self._wake.set()

    def relay(self, topic: str, payload: bytes, qos: int, retain: bool, context: Any, packet_id: int = 0) -> bool:
        """A bridge's fast path for a message without properties: handed to the connection with no per-message
        checks when nothing is queued before it and the connection takes it (ClientConnection.relay); False
        when it declines (then publish_nowait)."""
        if self._backlog or self._ending or not self.conn.relay(topic, payload, qos, retain, context, packet_id):
            return False
        self.published += 1
        return True

    @property
    def unwritten_qos0(self) -> int:
        """QoS 0 messages handed over and not yet written (what a bridge paces its source by)."""
        return self._qos0_pending

    def send_now(self) -> None:
        """What the connection has to send leaves now, with a non-blocking send() when the writer is idle (a
        bridge calls it after each batch it handled), else the writer is woken."""
        self._send_direct()

    async def wait_connected(self) -> None:
        """Until the client is connected (raises the client's failure if it fails for good)."""
        await self._wait_connected()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Runs the connection (connect, reconnect, read, write) until it ends: for `nursery.start`, by owners
        that run the client in their own nursery instead of through open_client()."""
        await self._run(task_status=task_status)

    def _can_hand_over(self, qos: int) -> bool:
        """A message may go to the connection now: nothing queued before it, connected, and room (the broker's
        receive maximum for QoS 1/2, the writer's backlog for QoS 0)."""
        conn = self.conn
        return (
            not self._backlog
            and conn.connected
            and not self._ending
            and (conn.window_open if qos else self._qos0_queued < _QOS0_BACKLOG)
        )

    @property
    def queued(self) -> int:
        """Messages waiting to be handed to the connection (window closed, or not connected)."""
        return len(self._backlog)

    def acknowledge(
        self, packet_id: int, reason_code: int = 0, *, epoch: int | None = None, wake: bool = True
    ) -> bool:
        """With manual_ack: acknowledges a QoS 1/2 message received (see ClientConnection.acknowledge); False when
        the broker no longer expects it: its session ended, or is not `epoch` (the `session_epoch` the message
        came in) any more, so that the identifier may name another message now. `wake` False: it leaves with the
        owner's next send_now() (a relay that sends once per batch it handled), not by waking the writer."""
        conn = self.conn
        if epoch is not None and conn.session_epoch != epoch:
            return False
        done = conn.acknowledge(packet_id, reason_code)
        if done and wake:
            self._wake.set()
        return done

    # --- for a relay (the bridges): the session's state, and the flows of a journal ---------------------------

    @property
    def inflight(self) -> int:
        """Our QoS 1/2 messages handed over and not yet acknowledged."""
        return self.conn.inflight

    @property
    def session_epoch(self) -> int:
        """Sessions the broker started us (ClientConnection.session_epoch): a message received in an earlier one
        is no longer the broker's to be acknowledged."""
        return self.conn.session_epoch

    @property
    def protocol_version(self) -> int:
        """The protocol version of the connection in use, or of the next one tried (`version` is 0 until
        connected)."""
        return self.conn.version

    def restore_outgoing(self, publish: Publish, *, released: bool, context: Any = None) -> None:
        """Before run(), from the owner's journal: a QoS 1/2 message of ours in flight in an earlier process."""
        self.conn.restore_outgoing(publish, released=released, context=context)

    def restore_incoming(self, packet_id: int, qos: int, *, acknowledged: bool) -> None:
        """Before run(), from the owner's journal: a message received in an earlier process (see
        ClientConnection.restore_incoming)."""
        self.conn.restore_incoming(packet_id, qos, acknowledged=acknowledged)

    def release(self, packet_id: int) -> None:
        """owner_ids: the PUBREL of a QoS 2 message whose PUBREC came goes now (ClientConnection.release); it
        leaves with the owner's next send_now()."""
        self.conn.release(packet_id)

    def _hand_over(
        self, topic: str, payload: bytes, qos: int, retain: bool, properties: Properties, context: Any, packet_id: int
    ) -> None:
        try:
            pid = self.conn.publish(topic, payload, qos, retain, properties, context=context, packet_id=packet_id)
        except LocalProtocolError as err:
            raise PublishFailed(f"cannot publish to {topic!r}: {err}") from None
        self.published += 1
        if qos == 2:
            if self._on_qos2_hand_over is not None:
                self._on_qos2_hand_over(pid, topic, payload, retain, properties, context)  # type: ignore[arg-type]
        elif not qos:
            self._qos0_pending += 1
            self._qos0_queued += 1

    async def wait_acknowledged(self) -> None:
        """Waits until every message handed over is acknowledged (QoS 1/2) or written (QoS 0)."""
        conn = self.conn
        while conn.inflight or self._backlog or self._qos0_pending:
            if self.failure is not None:
                raise self.failure
            await self._wait_changed()

    async def subscribe(
        self, subscriptions: Iterable[Subscription], properties: Properties = EMPTY_PROPERTIES, *, marker: bool = False
    ) -> tuple[int, ...]:
        """Subscribes and waits for SUBACK; returns its codes (granted QoS, or >= 0x80 for a refused filter).

        The subscription is remembered and made again after a reconnect to a broker that lost the session.
        `marker`: a PINGREQ follows the SUBSCRIBE at once; its PINGRESP comes into `messages` as PongReceived
        after the retained messages the broker sent for this subscription (see ping_marker).

        Messages can come before SUBACK (a resumed session's queue): keep reading `messages` meanwhile (in
        another task), or a full buffer stops the reader with SUBACK unread behind them."""
        subs = tuple(subscriptions)
        pid = await self._request(lambda: self.conn.subscribe(subs, properties))
        if marker:
            self._mark()
        self._subscriptions[pid] = (subs, properties)
        result = await self._await_result(pid, lambda: self.conn.subscribe(subs, properties))
        return result.reason_codes

    async def unsubscribe(
        self, topic_filters: Iterable[str], properties: Properties = EMPTY_PROPERTIES
    ) -> tuple[int, ...]:
        filters = tuple(topic_filters)
        pid = await self._request(lambda: self.conn.unsubscribe(filters, properties))
        for key, (subs, _) in list(self._subscriptions.items()):
            if {s.topic_filter for s in subs} <= set(filters):
                del self._subscriptions[key]
        result = await self._await_result(pid, lambda: self.conn.unsubscribe(filters, properties))
        return result.reason_codes

    async def ping_marker(self) -> None:
        """Sends PINGREQ; its PINGRESP is put into `messages` as a PongReceived, after every message the broker
        sent before answering it (the end of a retained burst after SUBACK, for instance)."""
        await self._wait_connected()
        self._mark()

    def _mark(self) -> None:
        self.conn.ping(trio.current_time())
        self._markers.append(self.conn.pings_sent)
        self._wake.set()

    async def disconnect(self) -> None:
        """Sends DISCONNECT (bounded wait for it to be written) and ends the connection; no reconnecting."""
        self._closing = True
        if self.conn.connected and self._conn_scope is not None and not self._ending:
            self.conn.disconnect(properties=self.settings.disconnect_properties)
            await self._dispatch(self.conn.events())
            with trio.move_on_after(2):
                await self._conn_done.wait()

    # --- waiting ------------------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_changed(self) -> None:
        """Waits for anything to happen; gives up when acknowledgements make no progress for ack_timeout."""
        event = self._changed
        timeout = self.settings.ack_timeout
        with trio.move_on_after(timeout) as scope:
            await event.wait()
        if scope.cancelled_caught and self.conn.connected and (self.conn.inflight or self.conn.pending_requests):
            raise PublishFailed(f"the broker acknowledged nothing for {timeout:g} s")

    async def _wait_connected(self) -> None:
        while not (self.conn.connected and not self._ending):
            if self.failure is not None:
                raise self.failure
            await self._wait_changed()

    async def _request(self, send: Callable[[], int]) -> int:
        await self._wait_connected()
        try:
            pid = send()
        except LocalProtocolError as err:
            raise ClientError(str(err)) from None
        self._wake.set()
        return pid

    async def _await_result(
        self, pid: int, resend: Callable[[], int]
    ) -> SubscribeAcknowledged | UnsubscribeAcknowledged:
        generation = self._generation
        deadline = trio.current_time() + self.settings.ack_timeout
        while pid not in self._results:
            if self.failure is not None:
                raise self.failure
            if self._generation != generation and self.conn.connected:
                # The connection broke before the answer: ask again on the new one.
                new_pid = await self._request(resend)
                if pid in self._subscriptions:
                    self._subscriptions[new_pid] = self._subscriptions.pop(pid)
                pid, generation = new_pid, self._generation
                deadline = trio.current_time() + self.settings.ack_timeout
            with trio.move_on_at(deadline) as scope:
                await self._changed.wait()
            if scope.cancelled_caught:
                raise ConnectionLost(f"no answer from the broker for {self.settings.ack_timeout:g} s")
        return self._results.pop(pid)

    # --- the connection's life ----------------------------------------------------------------------------

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        s = self.settings
        if s.retry_first and s.reconnect:
            task_status.started()
            try:
                stream, accepted, pending = await self._connect(first=True)
            except (ConnectFailed, TLSFailed, BrokerRefused) as err:
                if isinstance(err, BrokerRefused) and err.reason_code not in _TRANSIENT_REFUSALS:
                    self._fail(err)
                    await self._send_channel.aclose()
                    return
                self._lost_reason = str(err)
                self._next_endpoint()
                found = await self._reconnect(first=True)
                if found is None:
                    await self._send_channel.aclose()
                    return
                stream, accepted, pending = found
        else:
            stream, accepted, pending = await self._connect(first=True)
            task_status.started()
        while True:
            await self._serve(stream, accepted, pending)
            if self._closing:
                break
            if not s.reconnect:
                self._fail(ConnectionLost(f"connection to {self.endpoint} lost: {self._lost_reason}"))
                break
            if self._to_primary:
                self._to_primary = False
                self._endpoint_index = 0
                self.endpoint = self.endpoints[0]
                found = await self._reconnect(pause=False)
            else:
                found = await self._reconnect()
            if found is None:
                break
            stream, accepted, pending = found
        await self._send_channel.aclose()

    def _next_endpoint(self) -> None:
        self._endpoint_index = (self._endpoint_index + 1) % len(self.endpoints)
        self.endpoint = self.endpoints[self._endpoint_index]

    async def _connect(self, first: bool) -> tuple[trio.abc.Stream, ConnectionAccepted, list[Any]]:
        s = self.settings
        versions = (s.version,) if s.version else (5, 4)
        for version in versions:
            # Reconnects continue the session. On 3.x, "clean session" ends the session with the connection, so
            # a client that means to reconnect asks for a persistent one from the start.
            clean = s.clean_start and first and not (s.reconnect and version < 5)
            try:
                return await self._handshake(version, clean)
            except BrokerRefused as err:
                if version == 5 and len(versions) > 1 and err.reason_code in (0x84, -1):
                    continue  # auto: the broker does not speak 5.0; try 3.1.1
                if version < 5 and self.conn.options.bridge and err.reason_code in (0x01, -1):
                    # mosquitto's bridge flag (protocol level | 0x80) is no part of MQTT: a broker that does not
                    # know it (RabbitMQ) refuses the level or closes. Without it, from now on.
                    self.bridge_flag_refused = True
                    return await self._handshake(version, clean)
                if err.tls_reset and not s.tls_client_cert:
                    raise TLSFailed(
                        f"{self.endpoint} reset the TLS connection in answer to CONNECT: it likely wants a client "
                        "certificate: give --cert and --key"
                    ) from None
                raise
        raise AssertionError("not reached")

    async def _handshake(
        self, version: int, clean_start: bool
    ) -> tuple[trio.abc.Stream, ConnectionAccepted, list[Any]]:
        s = self.settings
        conn = self.conn
        stream: trio.abc.Stream | None = None
        try:
            with trio.fail_after(s.connect_timeout):
                stream = await open_transport(self.endpoint, s.ssl_context)
                # 3.1 has no empty client identifiers; mosquitto's bridge flag goes once a broker refused it
                client_id = random_client_id("mqtt-") if version == 3 and not conn.client_id else None
                bridge = False if self.bridge_flag_refused else None
                conn.connect(clean_start=clean_start, version=version, client_id=client_id, bridge=bridge)
                received = 0
                reset = False
                try:
                    await stream.send_all(conn.data_to_send(trio.current_time()))
                except (trio.BrokenResourceError, OSError) as err:
                    # A reset before CONNECT was written: a TLS alert says why, else the read below ends it as
                    # "closed in answer to CONNECT".
                    self._raise_tls_failure(err)
                    reset = True
                while True:
                    try:
                        data = await stream.receive_some(READ_SIZE)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as err:
                        # A TLS alert after the handshake (TLS 1.3: "certificate required") is a TLS failure; a
                        # reset in answer to CONNECT is the same as closing.
                        self._raise_tls_failure(err)
                        reset = True
                        data = b""
                    received += len(data)
                    conn.receive_data(data, trio.current_time())
                    events = conn.events()
                    for i, event in enumerate(events):
                        if isinstance(event, ConnectionAccepted):
                            return stream, event, events[i + 1 :]
                        if isinstance(event, ConnectionRefused | Disconnected):
                            raise refused_error(self.endpoint, version_name(version), event, received, reset)
        except trio.TooSlowError:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise ConnectFailed(f"no answer from {self.endpoint} within {s.connect_timeout:g} s") from None
        except BaseException:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise
        raise AssertionError("not reached")

    def _raise_tls_failure(self, err: BaseException) -> None:
        """Raises TLSFailed when `err` (a failed read or write during the MQTT handshake) comes from TLS."""
        cause = err.__cause__ or err.__context__
        if not isinstance(cause, ssl.SSLError):
            return
        reason = cause.reason or str(cause)
        if "CERTIFICATE_REQUIRED" in reason.upper():
            raise TLSFailed(
                f"{self.endpoint} wants a client certificate (TLS alert: certificate required): give --cert and --key"
            ) from None
        raise TLSFailed(f"TLS with {self.endpoint} failed after the handshake: {reason}") from None

    async def _reconnect(
        self, first: bool = False, pause: bool = True
    ) -> tuple[trio.abc.Stream, ConnectionAccepted, list[Any]] | None:
        """Connects again with backoff; `pause` False: the first attempt at once (a move the client chose)."""
        s = self.settings
        give_up = trio.current_time() + s.reconnect_timeout
        delay = s.reconnect_delay
        last = self._lost_reason
        while not self._closing:
            now = trio.current_time()
            if now >= give_up:
                break
            if pause:
                wait = min(delay * random.uniform(0.8, 1.2), give_up - now)
                if s.on_retry is not None and last:
                    s.on_retry(last, wait)
                await trio.sleep(wait)
            pause = True
            try:
                found = await self._connect(first=first)
            except (ConnectFailed, TLSFailed) as err:
                last = str(err)
                delay = min(delay * 2, s.reconnect_max_delay)
                self._next_endpoint()
                continue
            except BrokerRefused as err:
                if err.reason_code in _TRANSIENT_REFUSALS:
                    last = str(err)
                    delay = min(delay * 2, s.reconnect_max_delay)
                    self._next_endpoint()
                    continue
                self._fail(err)
                return None
            self.reconnects += 1
            return found
        self._fail(ConnectionLost(f"connection to {self.endpoint} lost and not regained: {last}"))
        return None

    def _fail(self, error: ClientError) -> None:
        if self.failure is None:
            self.failure = error
        self._notify()

    async def _serve(self, stream: trio.abc.Stream, accepted: ConnectionAccepted, pending: list[Any]) -> None:
        conn = self.conn
        self._generation += 1
        self.version = conn.version
        self.connack = accepted
        self._ending = False
        self._lost_reason = ""
        self._pongs = 0
        self._markers.clear()
        self._qos0_queued = self._qos0_pending = 0  # unwritten QoS 0 messages went with the old connection
        self._conn_done = trio.Event()
        self._progress = trio.current_time()
        self._unsent = b""
        self._send_now = direct_sender(stream)
        if self._observer is not None:
            self._observer([accepted])
        if accepted.unacknowledged:
            self._backlog.extendleft(
                (p.topic, p.payload, p.qos, p.retain, p.properties, ctx, p.packet_id or 0)
                for p, ctx in reversed(accepted.unacknowledged)
            )
        if not accepted.session_present and self._generation > 1:
            for subs, props in self._subscriptions.values():
                conn.subscribe(subs, props)  # answered SUBACKs are not waited for: nobody waits
        self._drain_backlog()
        try:
            async with trio.open_nursery() as nursery:
                self._conn_scope = nursery.cancel_scope
                await self._dispatch(pending)
                self._notify()
                nursery.start_soon(self._writer, stream)
                nursery.start_soon(self._reader, stream)
                nursery.start_soon(self._keepalive)
                if not self.settings.round_robin and self._endpoint_index:
                    nursery.start_soon(self._primary_check)
        finally:
            self._conn_scope = None
            self._ending = True
            if conn.connected:
                # The writer (or a cancelled reader) ended it before the reader saw the broker close: tell the
                # connection, or the next connect() finds it still connected.
                conn.connection_lost(self._lost_reason or "the connection ended")
                events = conn.events()
                if self._observer is not None and events:
                    self._observer(events)
            self._conn_done.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            self._notify()

    async def _primary_check(self) -> None:
        """On an alternate address with round_robin False (mosquitto's default for bridges): the main address is
        tried every primary_retry seconds (a connection opened and closed, as mosquitto's bridge does); once it
        answers, no new QoS 1/2 message goes on this connection, what is in flight is drained (bounded by
        drain_timeout), and the client disconnects (the session kept) and connects to the main address: nothing
        in flight changes connection, so the cluster behind both addresses gets each message once."""
        s = self.settings
        primary = self.endpoints[0]
        while True:
            await trio.sleep(s.primary_retry)
            try:
                with trio.fail_after(s.connect_timeout):
                    probe = await open_transport(primary, s.ssl_context)
            except (ConnectFailed, TLSFailed, trio.TooSlowError, trio.BrokenResourceError, OSError):
                continue
            await trio.aclose_forcefully(probe)
            break
        conn = self.conn
        if s.on_primary_back is not None:
            s.on_primary_back(primary, conn.inflight)
        conn.close_window()
        with trio.move_on_after(s.drain_timeout):
            while conn.inflight and not self._ending:
                await self._changed.wait()
        self._to_primary = True  # the next connection is to the main address (also if this one ended meanwhile)
        if self._ending:
            return
        conn.disconnect()  # the session stays (clean session 0, or its expiry): the main address resumes it
        await self._dispatch(conn.events())

    def _drain_backlog(self) -> None:
        conn = self.conn
        backlog = self._backlog
        before = len(backlog)
        while backlog and conn.connected and not self._ending:
            topic, payload, qos, retain, props, context, pid = backlog[0]
            if not (conn.window_open if qos else self._qos0_queued < _QOS0_BACKLOG):
                break
            backlog.popleft()
            try:
                self._hand_over(topic, payload, qos, retain, props, context, pid)
            except PublishFailed as err:
                backlog.clear()
                self._fail(err)
                break
        if len(backlog) != before:
            self._wake.set()
            self._notify()

    def _end_connection(self, reason: str) -> None:
        if not self._lost_reason:
            self._lost_reason = reason
        self._ending = True
        self._wake.set()
        self._notify()

    async def _reader(self, stream: trio.abc.Stream) -> None:
        conn = self.conn
        linger = self.settings.linger
        peak = 0  # the most messages seen held or in flight on this connection: a window it lets us use
        while not self._ending:
            try:
                data = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as err:
                self._end_connection(f"reading failed: {err}")
                data = b""
            packets = conn.packets_received
            conn.receive_data(data, trio.current_time())
            events = conn.events()
            if events and self._observer is None:
                # The acknowledgements of what this read brought go out before the messages go to the owner: a
                # broker's window to us (mosquitto: 20 in flight) reopens while we print, not after.
                self._send_direct()
            await self._dispatch(events)
            if not data:
                self._end_connection("the broker closed the connection")
                return
            self._send_direct()
            if linger:
                # A busy stream then crosses in fewer, larger reads and writes: each costs a wake-up and system
                # calls in every process on its path (brokers included). A read of one packet is not followed
                # by a pause (a lone message's successor is not delayed). And only a connection seen with
                # enough messages held or in flight to carry _LINGER_RATE messages a second through the pauses
                # pauses at all: a flow that a small window limits (20 in flight, mosquitto's default) would
                # otherwise wait a linger per window. Flows without windows (QoS 0) take no pause.
                used = conn.held + conn.inflight
                if used > peak:
                    peak = used
                if peak >= linger * _LINGER_RATE and conn.packets_received - packets > 1:
                    self.pauses += 1
                    await trio.sleep(linger)
            gate = self.settings.read_gate
            if gate is not None:
                while not gate() and not self._ending:
                    await trio.sleep(0.002)  # TCP pushes back on the broker meanwhile

    def _send_direct(self) -> None:
        """What the reader's input produced (acknowledgements, messages handed over as the window opened) goes
        out with one non-blocking send() from the reader itself when the writer is idle and the socket takes
        it: a QoS 1 stream then costs no task switch per round trip. Anything else is the writer's."""
        send_now = self._send_now
        if send_now is None or self._writer_sending or self._unsent or self._ending:
            self._wake.set()
            return
        data = self.conn.data_to_send(trio.current_time())
        if not data:
            return
        try:
            sent = send_now(data)
        except OSError:  # would block, or the connection is gone: the writer finds out which
            sent = 0
        if sent < len(data):
            self._unsent = data[sent:]
            self._wake.set()
            return
        qos0 = self._qos0_queued
        if qos0:
            self._qos0_queued = 0
            self._qos0_pending -= qos0
            self.written += qos0
            if self._backlog:
                self._drain_backlog()
            self._notify()

    async def _writer(self, stream: trio.abc.Stream) -> None:
        conn = self.conn
        while True:
            data = conn.data_to_send(trio.current_time())
            if self._unsent:
                data = self._unsent + data
                self._unsent = b""
            if data:
                qos0 = self._qos0_queued
                self._qos0_queued = 0
                self._writer_sending = True
                try:
                    if self._ending:
                        with trio.move_on_after(1):
                            await stream.send_all(data)
                    else:
                        await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as err:
                    self._end_connection(f"writing failed: {err}")
                    break
                finally:
                    self._writer_sending = False
                self._qos0_pending -= qos0
                self.written += qos0
                if qos0:
                    if self._backlog:
                        self._drain_backlog()
                    self._notify()
                continue
            if self._ending:
                break
            self._wake = trio.Event()
            await self._wake.wait()
        if self._conn_scope is not None:
            self._conn_scope.cancel()

    async def _keepalive(self) -> None:
        conn = self.conn
        while not self._ending:
            now = trio.current_time()
            deadline = conn.next_deadline()
            await trio.sleep_until(min(deadline, now + 1) if deadline is not None else now + 1)
            conn.handle_timeout(trio.current_time())
            await self._dispatch(conn.events())
            self._wake.set()

    async def _dispatch(self, events: list[Any], changed: bool = False) -> None:
        observer = self._observer
        if observer is not None:
            observer(events)  # also when empty: a relay sends what the read produced from there
        # A read's messages go to the owner as one list: one task switch a read, not one a message.
        batch: list[Publish] = []
        for event in events:
            t = type(event)
            if t is MessagesReceived:
                if observer is None:
                    if batch:
                        batch += event.messages
                    else:
                        batch = event.messages  # (the connection no longer holds it)
            elif t is Acknowledged:
                self.acknowledged += len(event.contexts)
                changed = True
            elif t is PublishAcknowledged:
                if event.reason_code < 0x80:
                    self.acknowledged += 1
                else:
                    self.refused.append(event)
                changed = True
            elif t is SubscribeAcknowledged or t is UnsubscribeAcknowledged:
                self._results[event.packet_id] = event
                changed = True
            elif t is PongReceived:
                self._pongs += 1
                while self._markers and self._markers[0] <= self._pongs:
                    self._markers.popleft()
                    if batch:  # a marker comes after the messages received before it
                        await self._send_channel.send(batch)
                        batch = []
                    await self._send_channel.send(event)
            elif t is Disconnected:
                self._end_connection(event.reason)
            elif t is ConnectionAccepted:  # pragma: no cover - handled by _handshake
                pass
        if batch:
            await self._send_channel.send(batch)
        if changed:
            if self._backlog:
                self._drain_backlog()
            self._notify()


class MessageStream:
    """`Client.messages`: what the reader delivers (Publish, or PongReceived markers), one at a time (`receive()`,
    `async for`) or a read's messages at a time (`receive_batch()`), which costs the owner one task switch a read."""

    __slots__ = ("_batches", "_items", "_next")

    def __init__(self, batches: trio.MemoryReceiveChannel[list[Publish] | PongReceived]) -> None:
        self._batches = batches
        self._items: list[Publish] = []
        self._next = 0  # the first of _items not yet handed out

    async def receive(self) -> Publish | PongReceived:
        """The next message or marker; raises trio.EndOfChannel when the client has ended."""
        items = self._items
        if self._next < len(items):
            self._next += 1
            return items[self._next - 1]
        got = await self._batches.receive()
        if not isinstance(got, list):
            return got
        self._items = got
        self._next = 1
        return got[0]

    async def receive_batch(self) -> list[Publish] | PongReceived:
        """The messages of the next read (a non-empty list, in order), or a marker; raises trio.EndOfChannel
        when the client has ended. What receive() left of a read comes first."""
        if self._next < len(self._items):
            rest = self._items[self._next :]
            self._items, self._next = [], 0
            return rest
        return await self._batches.receive()

    def __aiter__(self) -> MessageStream:
        return self

    async def __anext__(self) -> Publish | PongReceived:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


@asynccontextmanager
async def open_client(settings: ClientSettings) -> AsyncIterator[Client]:
    """Connects (raising a ClientError when it cannot) and yields the client; on exit sends DISCONNECT.

    A single error from inside (the caller's block or the connection's tasks) comes out as itself, not wrapped
    in an exception group, so that callers can catch ClientError."""
    client = Client(settings)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(client._run)
            try:
                yield client
            finally:
                with trio.CancelScope(shield=True):
                    await client.disconnect()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return out
