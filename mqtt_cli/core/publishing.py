"""Publishing: a client's PUBLISH (its topic, what refuses it, the start of a QoS 2 flow, routing, its answer) and
the acknowledgements of both directions' QoS 1/2 flows, the common ones from the packet identifier alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .encoder import encode
from .errors import RemoteProtocolError
from .lifecycle import (
    receive_maximum_exceeded,
    resolve_topic_alias,
)
from .outbox import Notice, NoticeKind
from .packets import (
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
)
from .persistence import (
    DeliveryReleased,
    IncomingAdded,
    IncomingReleased,
)
from .reasons import ReasonCode
from .server import ServerConnection
from .session import Message, Session

if TYPE_CHECKING:
    from .broker import BrokerCore


__all__ = ["Publishing"]


class Publishing:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        self.storage = core.storage
        self.delivery = core.delivery
        self.router = core.router
        self.closing = core.closing
        self.topics = core.topics
        self.stats = core.stats

    # --- PUBLISH and its flows --------------------------------------------------------------------------------

    def on_publish(self, conn: ServerConnection, p: Publish, now: float) -> None:
        """A PUBLISH, in steps: its topic (aliases), what refuses it, the QoS 2 flow's start, routing, the answer."""
        stats = self.stats
        stats.publish_received_qos[p.qos] += 1
        stats.publish_received_bytes_qos[p.qos] += len(p.payload)
        topic = p.topic
        props = p.properties
        if props.items:  # 5.0 only: the codec refuses properties before
            resolved = self._resolved_topic(conn, p, now)
            if resolved is None:
                return
            topic = resolved
            if props.topic_alias is not None:
                props = props.replace(topic_alias=None)
        if self._refused(conn, p, topic, now):
            return
        qos = p.qos
        pubrec = b""
        if qos == 2:
            pubrec = self._qos2_received(conn, p, now)
            if not pubrec:
                return
        if topic[:1] == "$" and topic[:9] == "$CONTROL/" and conn.policy is not None and conn.policy.dynsec is not None:
            # Requests to the broker, not messages: answered, never routed (mosquitto's control topics).
            self.core.admission.control(conn, conn.policy.dynsec, topic, p.payload, now)
            if conn.closed:  # the request changed its own rights
                return
            matched = True
        elif not qos and not p.retain and not props.items:
            # A plain QoS 0 message (fan-in, fan-out): when nothing about its subscriptions and their clients
            # needs more than the bytes, they are written without building the broker's Message.
            entries = self.router.subscriptions.match(topic)
            if not entries:
                stats.dropped_no_subscriber += 1
                return
            if self.router.forward(entries, topic, p.payload, conn.client_id):
                return
            message = Message(topic, p.payload, qos, False, props, conn.client_id, now)
            if not self.router.route_to(entries, message, now):
                stats.dropped_no_subscriber += 1
            return
        else:
            message = Message(topic, p.payload, qos, p.retain, props, conn.client_id, now)
            matched = self.router.route(message, now)
            if not matched and not qos:
                stats.dropped_no_subscriber += 1
        if qos == 1:
            # PUBACK written directly: the short form is the same in every version.
            assert p.packet_id is not None  # the codec checks: QoS > 0 has a packet id
            pid = p.packet_id.to_bytes(2, "big")
            if matched or conn.version < 5:
                ack = b"\x40\x02" + pid
            else:
                ack = b"\x40\x03" + pid + b"\x10"  # no matching subscribers
            if self.storage.changes is None:
                self.out.write(conn, ack)
            else:
                self.storage.held.append((conn, ack))
        elif qos == 2 and self.storage.changes is not None:
            self.storage.held.append((conn, pubrec))

    def _resolved_topic(self, conn: ServerConnection, p: Publish, now: float) -> str | None:
        """A 5.0 PUBLISH with properties: its topic, through its topic alias if it has one; None when the connection
        is closed for it (an unknown alias, a subscription identifier a client may not send)."""
        topic = p.topic
        props = p.properties
        alias = props.topic_alias
        if alias is not None:
            aliases = conn.aliases_in
            if aliases is None:  # made at the first alias: most connections never use one
                aliases = conn.aliases_in = {}
            try:
                topic = resolve_topic_alias(aliases, conn.topic_alias_maximum, alias, topic)
            except RemoteProtocolError as err:
                self.closing.close(conn, now, reason=err.reason_code, detail=str(err))
                return None
        if props.subscription_identifier is not None:
            why = "PUBLISH from a client with a subscription identifier"
            self.closing.close(conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail=why)
            return None
        return topic

    def _refused(self, conn: ServerConnection, p: Publish, topic: str, now: float) -> bool:
        """Whether the PUBLISH is not taken (True: dealt with, the connection closed or the message dropped): a
        topic the broker refuses, retain where it is not available, $SYS, the ACL, message_size_limit, a store
        that cannot be written."""
        if topic not in self.topics.ok:
            why = self.topics.problem(topic)
            if why is not None:
                self.closing.close(conn, now, reason=why[0], detail=f"PUBLISH topic name: {why[1]}")
                return True
        if p.retain and not conn.retain_available:  # as its CONNACK said (a reload changes it for new ones)
            self.closing.close(conn, now, reason=ReasonCode.RETAIN_NOT_SUPPORTED, detail="retain is not available")
            return True
        qos = p.qos
        denied = None
        if topic[:5] == "$SYS/" or topic == "$SYS":
            denied = "$SYS is the broker's"  # its own figures: a client cannot publish or retain there (as mosquitto)
        elif conn.acl is not None and not conn.acl.can_write(topic):
            denied = "the ACL does not let it write there"
        if denied is not None:
            self.drop_publish(conn, p, ReasonCode.NOT_AUTHORIZED, f"PUBLISH to {topic!r}: {denied}")
            return True
        limit = self.core.config.limits.message_size_limit
        if limit and len(p.payload) > limit:
            # mosquitto answers 0x95, which PUBACK and PUBREC may not carry; 0x97 (quota exceeded) may.
            over = f"PUBLISH to {topic!r}: {len(p.payload)} bytes over message_size_limit"
            self.drop_publish(conn, p, ReasonCode.QUOTA_EXCEEDED, over)
            return True
        # Nothing can be stored: a 5.0 publisher is told so (0x97) and keeps the message (not taken, not delivered);
        # a re-send of a QoS 2 message stored before still gets its plain PUBREC (_qos2_received).
        if qos and self.storage.failing and conn.version == 5 and (qos == 1 or not self.stored_before(conn, p)):
            self.unstored(conn, p)
            return True
        return False

    def _qos2_received(self, conn: ServerConnection, p: Publish, now: float) -> bytes:
        """A QoS 2 PUBLISH's flow starts: its PUBREC, written now or (with persistence) after the route, held for
        the commit; b"" when it is dealt with here (a re-send, acknowledged only; over the receive maximum)."""
        session = conn.session
        assert session is not None and p.packet_id is not None  # the codec checks: QoS > 0 has a packet id
        if not session.incoming.publish_received(p):
            # A re-send: acknowledge only; with persistence, after the commit that holds the first one.
            self.acknowledge(conn, encode(PubRec(p.packet_id), conn.version))
            return b""
        limit = conn.receive_maximum_announced
        if receive_maximum_exceeded(len(session.incoming), limit) and conn.version == 5:
            why = f"receive maximum {limit} exceeded"
            self.closing.close(conn, now, reason=ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, detail=why)
            return b""
        # PUBREC first, 0x00 whether anyone subscribed or not, as mosquitto: the message is ours from here, and
        # the publisher hears so before its own subscription (if any) hears the message. With persistence, it
        # waits for the commit of what the message changed (held), as a PUBACK does.
        pubrec = b"\x50\x02" + p.packet_id.to_bytes(2, "big")
        changes = self.storage.changes
        if changes is None:
            self.out.write(conn, pubrec)
        elif session.expiry_interval:
            # Its re-send after a restart must find the identifier: acknowledged, not delivered again.
            changes.append(IncomingAdded(session.client_id, p.packet_id))
        return pubrec

    def drop_publish(self, conn: ServerConnection, p: Publish, reason: int, detail: str) -> None:
        """A PUBLISH not taken, the connection kept: acknowledged so the client's flow ends (3.x: as if taken, as
        mosquitto does); 5.0 is told why in PUBACK / PUBREC."""
        self.out.notices.append(Notice(NoticeKind.DROPPED, conn.client_id, conn.peer, detail))
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        qos = p.qos
        if qos:
            assert p.packet_id is not None  # the codec checks: QoS > 0 has a packet id
            pid = p.packet_id.to_bytes(2, "big")
            kind = b"\x40" if qos == 1 else b"\x50"
            if conn.version == 5:
                self.acknowledge(conn, kind + b"\x03" + pid + bytes((reason,)))  # a failed PUBREC ends QoS 2 too
            elif qos == 1:
                self.acknowledge(conn, kind + b"\x02" + pid)
            else:
                session = conn.session
                assert session is not None
                session.incoming.publish_received(p)  # 3.x: the flow goes on to PUBREL / PUBCOMP
                self.acknowledge(conn, kind + b"\x02" + pid)

    def stored_before(self, conn: ServerConnection, p: Publish) -> bool:
        pid = p.packet_id
        return conn.session is not None and pid is not None and pid in conn.session.incoming

    def unstored(self, conn: ServerConnection, p: Publish) -> None:
        """The store cannot be written: PUBACK/PUBREC 0x97 at once (held acknowledgements wait for a commit that
        cannot come now). Counted, not logged one by one: the network layer logs the failure."""
        self.stats.rejected[0x97] = self.stats.rejected.get(0x97, 0) + 1
        kind = b"\x40" if p.qos == 1 else b"\x50"
        assert p.packet_id is not None  # QoS 1/2: the codec checks
        self.out.write(conn, kind + b"\x03" + p.packet_id.to_bytes(2, "big") + b"\x97")

    def acknowledge(self, conn: ServerConnection, data: bytes) -> None:
        """A PUBACK/PUBREC: at once, or with persistence behind the held ones, so acknowledgements keep the order
        of their PUBLISHes [MQTT-4.6.0-2] and none goes before the commit of what came before it."""
        if self.storage.changes is None:
            self.out.write(conn, data)
        else:
            self.storage.held.append((conn, data))

    def on_puback(self, conn: ServerConnection, p: PubAck | PubRec | PubComp, now: float) -> None:
        session = conn.session
        assert session is not None
        kind = type(p)
        if kind is PubAck or kind is PubComp:
            if self.flow_ended(session, p.packet_id, kind is PubAck, now):
                return
        elif p.reason_code < 0x80:
            if self.pubrec_taken(conn, session, p.packet_id):
                return
            if session.outgoing.pubrec_again(p.packet_id):
                # Behind the first PUBREL when that one waits for a commit.
                self.acknowledge(conn, b"\x62\x02" + p.packet_id.to_bytes(2, "big"))
                return
        held = False
        try:
            _, pubrel = session.outgoing.acknowledge(p)
            if session.rows is not None:
                if pubrel is None:
                    # PUBACK, PUBCOMP or a failed PUBREC: the flow is over, nothing more to re-send from the file.
                    self.storage.delivery_done(session, p.packet_id)
                else:
                    row = session.rows.get(p.packet_id, 0)
                    if row and self.storage.changes is not None:
                        # PUBREL waits for the commit saying so: sent before it, a restart would re-send the
                        # PUBLISH, which a client that completed the flow takes for a new message.
                        self.storage.changes.append(DeliveryReleased(session.client_id, row))
                        held = True
        except RemoteProtocolError as err:
            if p.packet_id not in session.outgoing:
                # An acknowledgement for nothing in flight (a client acknowledging twice, or after our restart)
                # is ignored, as mosquitto does; a PUBREC is answered so the client's flow can end (5.0: 0x92,
                # 4.3.3). Neither version calls it a protocol error. A wrong kind of acknowledgement for a message
                # in flight still is one.
                if isinstance(p, PubRec):
                    self.out.send(
                        conn, PubRel(p.packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if conn.version == 5 else 0)
                    )
                return
            self.closing.close(conn, now, reason=err.reason_code, detail=str(err))
            return
        if pubrel is not None:
            if held:
                self.storage.held.append((conn, encode(pubrel, conn.version)))
            else:
                self.out.send(conn, pubrel)
        else:
            self.delivery.pump(session, now)

    def on_pubrel(self, conn: ServerConnection, p: PubRel, now: float) -> None:
        session = conn.session
        assert session is not None
        if not self.pubrel_taken(conn, session, p.packet_id):
            # Not awaiting PUBREL (a re-send after its PUBCOMP, or never received): 5.0 answers 0x92.
            self.out.send(conn, session.incoming.release(p, conn.version))

    # The common cases of the acknowledgements, from the packet identifier alone (a `plain_acks` reader gives the
    # broker most of them as ints: `_on_plain_ack`). Each returns False, having changed nothing, when it is not the
    # common case: the caller then takes the packet's general path.

    def on_plain_ack(self, conn: ServerConnection, ack: int, now: float) -> bool:
        """A PUBACK, PUBREC, PUBREL or PUBCOMP with reason 0 and no properties, as `plain_ack(first, packet id)`."""
        session = conn.session
        if session is None:
            return False
        first = ack >> 16
        pid = ack & 0xFFFF
        if first == 0x40 or first == 0x70:
            return self.flow_ended(session, pid, first == 0x40, now)
        if first == 0x50:
            return self.pubrec_taken(conn, session, pid)
        return self.pubrel_taken(conn, session, pid)

    def flow_ended(self, session: Session, pid: int, puback: bool, now: float) -> bool:
        """PUBACK or PUBCOMP (any reason code) ending a QoS 1 or 2 flow in flight: what acknowledge() would do."""
        outgoing = session.outgoing
        if (outgoing.puback(pid) if puback else outgoing.pubcomp(pid)) is None:
            return False
        if session.rows is not None:
            self.storage.delivery_done(session, pid)
        self.delivery.pump(session, now)
        return True

    def pubrec_taken(self, conn: ServerConnection, session: Session, pid: int) -> bool:
        """A successful PUBREC for a QoS 2 message in flight: PUBREL written directly, the short form is the same in
        every version; with persistence after the commit saying so when the message is on file (sent before it, a
        restart would re-send the PUBLISH, which a client that completed the flow takes for a new message)."""
        if not session.outgoing.pubrec(pid):
            return False
        release = b"\x62\x02" + pid.to_bytes(2, "big")
        rows = session.rows
        row = rows.get(pid, 0) if rows is not None else 0
        if row and self.storage.changes is not None:
            self.storage.changes.append(DeliveryReleased(session.client_id, row))
            self.storage.held.append((conn, release))
        else:
            self.out.write(conn, release)
        return True

    def pubrel_taken(self, conn: ServerConnection, session: Session, pid: int) -> bool:
        """A PUBREL for an identifier awaiting it: PUBCOMP written directly, the short form is the same in every
        version. With persistence, the end of the flow goes after the commit of the release: sent before it, a
        restart would keep the identifier, and the publisher's next message under it would be taken for a re-send
        and lost."""
        if not session.incoming.released(pid):
            return False
        pubcomp = b"\x70\x02" + pid.to_bytes(2, "big")
        if self.storage.changes is not None and session.expiry_interval:
            self.storage.changes.append(IncomingReleased(session.client_id, pid))
            self.storage.held.append((conn, pubcomp))
        else:
            self.out.write(conn, pubcomp)
        return True
