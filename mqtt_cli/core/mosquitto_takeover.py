"""mosquitto's persisted state (core/mosquitto_db.py) as this broker's change records (core/persistence.py).

Sans-IO: the network layer reads the file, hands the parsed records here with the clock (the core's `now` and
the wall clock's `wall`, in seconds: mosquitto's times are wall-clock ones), and writes the changes returned into
a new store, once. What each of mosquitto's records becomes:

- a retained message: RetainedSet, with its properties; its message expiry counts on from what is left of it;
- a persistent session (CLIENT) and its subscriptions: SessionSaved (its expiry time, if its client had gone, or
  none: its expiry interval then starts at the first start, as for a session whose client was connected);
- a message for a session (CLIENT_MSG, outgoing): DeliveryAdded, queued; one sent and not acknowledged (waiting
  for PUBACK or PUBREC, or marked DUP) also DeliverySent with its packet identifier; a QoS 2 one whose PUBREC came
  (PUBREL to re-send, waiting for PUBCOMP) also DeliveryReleased;
- a QoS 2 message received from a session's client and acknowledged with PUBREC (CLIENT_MSG, incoming, waiting
  for PUBREL): mosquitto publishes it at PUBREL, this broker at PUBLISH, so it is published here, to the sessions
  taken over (their subscriptions, as the broker routes), and its packet identifier kept (IncomingAdded): the
  client's PUBREL is then answered, and the message not published twice.

Left out, and counted (`Takeover.left_out`, said in the start's log line): what expired while mosquitto was
down (messages, sessions), sessions that ended with their connection (expiry interval 0), QoS 0 messages queued
for offline clients (this broker queues none), and incoming QoS 2 messages not yet acknowledged (their client
sends them again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .mosquitto_db import ClientMessage, Direction, MessageState, MosquittoDb, StoredMessage
from .persistence import (
    Change,
    DeliveryAdded,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    RetainedCleared,
    RetainedSet,
    SessionSaved,
)
from .session import Message, SubscriptionOptions
from .topics import TopicTrie

__all__ = ["LeftOut", "Takeover", "take_over"]

_NEVER = 0xFFFFFFFF  # mosquitto's session expiry interval of a 3.x persistent session
_SENT = frozenset({MessageState.WAIT_FOR_PUBACK, MessageState.WAIT_FOR_PUBREC})
_RELEASED = frozenset({MessageState.RESEND_PUBREL, MessageState.WAIT_FOR_PUBCOMP})
_RESENDABLE = frozenset({MessageState.PUBLISH_QOS1, MessageState.PUBLISH_QOS2})


@dataclass(slots=True)
class LeftOut:
    expired_messages: int = 0
    expired_sessions: int = 0  # expired, or ended with their connection (expiry interval 0)
    qos0_messages: int = 0
    unacknowledged_incoming: int = 0  # QoS 2 received without PUBREC yet: their clients send them again
    orphans: int = 0  # subscriptions and messages of a client without a session, references to no message

    def __bool__(self) -> bool:
        return any((self.expired_messages, self.expired_sessions, self.qos0_messages, self.unacknowledged_incoming,
                    self.orphans))  # fmt: skip


@dataclass(slots=True)
class Takeover:
    """What to write into the new store, in order, and what it holds."""

    changes: list[Change] = field(default_factory=list)
    retained: int = 0
    sessions: int = 0
    subscriptions: int = 0
    queued: int = 0
    inflight: int = 0
    incoming: int = 0  # QoS 2 messages received and acknowledged by mosquitto, published at the take-over
    left_out: LeftOut = field(default_factory=LeftOut)


def take_over(db: MosquittoDb, now: float, wall: float) -> Takeover:
    """The change records that make a new store hold what `db` held (times: `now` on the core's clock is `wall`)."""
    t = _TakingOver(db, now, wall)
    t.retained()
    t.sessions()
    incoming = t.client_messages()
    if incoming:
        t.publish_incoming(incoming)
    return t.out


class _TakingOver:
    """One take-over, in steps: the messages (read first, as the other records refer to them), the retained
    messages, the sessions with their subscriptions, the messages for and from the sessions' clients."""

    def __init__(self, db: MosquittoDb, now: float, wall: float) -> None:
        self.db = db
        self.now = now
        self.wall = wall
        self.out = Takeover()
        self.left = self.out.left_out
        self.messages: dict[int, Message] = {}
        self.expired: set[int] = set()  # store ids: each expired message counted once, however many refer to it
        for m in db.messages:
            message = _message(m, now, wall)
            if message is None:
                self.expired.add(m.store_id)
            else:
                self.messages[m.store_id] = message
        self.left.expired_messages = len(self.expired)
        self.saved: dict[str, SessionSaved] = {}  # the sessions taken over, by client identifier
        self.known = {c.client_id for c in db.clients}  # (saved: those of them taken over)
        self.row = 0  # the last delivery row used

    def _missing(self, store_id: int) -> None:
        if store_id not in self.expired:
            self.left.orphans += 1  # a reference to a message the file does not hold

    def retained(self) -> None:
        for store_id in self.db.retained:
            message = self.messages.get(store_id)
            if message is None:
                self._missing(store_id)
                continue
            if not message.retain:  # (mosquitto clears the flag of the $SYS messages it keeps: never retained here)
                message = Message(message.topic, message.payload, message.qos, True, message.properties,
                                  message.origin, message.received_at)  # fmt: skip
            self.out.changes.append(RetainedSet(message))
            self.out.retained += 1

    def sessions(self) -> None:
        """The persistent sessions still alive, with their subscriptions."""
        subscriptions: dict[str, list[tuple[str, SubscriptionOptions]]] = {}
        for s in self.db.subscriptions:
            opts = SubscriptionOptions(s.qos, s.no_local, s.retain_as_published, 0, s.identifier or None)
            subscriptions.setdefault(s.client_id, []).append((s.topic, opts))
        left = self.left
        for c in self.db.clients:
            expires_at = None
            if c.session_expiry_time > 0:  # its client had gone (or persistent_client_expiration was set)
                if c.session_expiry_time <= self.wall:
                    left.expired_sessions += 1
                    continue
                expires_at = c.session_expiry_time - self.wall + self.now
            if c.session_expiry_interval == 0:  # a 5.0 session ending with its connection, which the stop ended
                left.expired_sessions += 1
                continue
            subs = tuple(subscriptions.get(c.client_id, ()))
            v5 = c.session_expiry_interval != _NEVER or any(
                o.no_local or o.retain_as_published or o.subscription_identifier for _, o in subs
            )
            self.saved[c.client_id] = SessionSaved(
                c.client_id, 5 if v5 else 4, c.session_expiry_interval, expires_at, subs, c.username
            )
        for client_id, kept in subscriptions.items():
            if client_id in self.saved:
                self.out.subscriptions += len(kept)
            elif client_id not in self.known:
                left.orphans += len(kept)
        self.out.changes += self.saved.values()
        self.out.sessions = len(self.saved)

    def client_messages(self) -> list[tuple[ClientMessage, Message]]:
        """The messages queued or in flight for the sessions' clients; returns the QoS 2 ones received from them
        and acknowledged with PUBREC (once each), which `publish_incoming` publishes."""
        incoming: list[tuple[ClientMessage, Message]] = []
        received: set[tuple[str, int]] = set()  # (client, packet identifier) of those
        in_flight: set[tuple[str, int]] = set()
        left = self.left
        for cm in self.db.client_messages:
            if cm.client_id not in self.saved:
                if cm.client_id not in self.known:
                    left.orphans += 1
                continue  # (else its session expired: counted there)
            message = self.messages.get(cm.store_id)
            if message is None:
                self._missing(cm.store_id)
                continue
            if cm.direction is Direction.IN:
                if cm.state is MessageState.WAIT_FOR_PUBREL and cm.qos == 2 and cm.mid:
                    if (cm.client_id, cm.mid) not in received:
                        received.add((cm.client_id, cm.mid))
                        incoming.append((cm, message))
                else:
                    left.unacknowledged_incoming += 1
                continue
            if cm.qos == 0:
                left.qos0_messages += 1
                continue
            self._delivery(cm, message, in_flight)
        return incoming

    def _delivery(self, cm: ClientMessage, message: Message, in_flight: set[tuple[str, int]]) -> None:
        """A QoS 1 or 2 message for a session's client: queued, or in flight with its packet identifier."""
        out = self.out
        self.row += 1
        row = self.row
        sids = cm.properties.subscription_identifiers if cm.properties.items else ()
        out.changes.append(DeliveryAdded(cm.client_id, row, message, cm.qos, cm.retain, sids))
        # Sent already: waiting for its acknowledgement, or marked DUP (mosquitto's state after a reconnection).
        sent = cm.state in _SENT or cm.state in _RELEASED or (cm.dup and cm.state in _RESENDABLE)
        if sent and cm.mid and (cm.client_id, cm.mid) not in in_flight:  # (an identifier in use twice: queued)
            in_flight.add((cm.client_id, cm.mid))
            out.changes.append(DeliverySent(cm.client_id, row, cm.mid))
            if cm.qos == 2 and cm.state in _RELEASED:
                out.changes.append(DeliveryReleased(cm.client_id, row))
            out.inflight += 1
        else:
            out.queued += 1

    def publish_incoming(self, incoming: list[tuple[ClientMessage, Message]]) -> None:
        """Publishes the acknowledged incoming QoS 2 messages to the sessions taken over, as the broker routes."""
        trie: TopicTrie[str, SubscriptionOptions] = TopicTrie()
        for client_id, saved in self.saved.items():
            for flt, opts in saved.subscriptions:
                trie.add(flt, client_id, opts)
        for cm, message in incoming:
            self.row = _publish(self.out, trie, message, self.row)
            self.out.changes.append(IncomingAdded(cm.client_id, cm.mid))
            self.out.incoming += 1


def _message(m: StoredMessage, now: float, wall: float) -> Message | None:
    """A stored message as this broker's (None: expired), received now: its expiry is what is left of it."""
    props = m.properties
    if m.expiry_time > 0:
        left = m.expiry_time - wall
        if not 0 < left <= 0xFFFFFFFF:  # (beyond any message expiry interval: mosquitto drops it too)
            return None
        props = props.replace(message_expiry_interval=max(1, int(left)))
    if props.items and (props.topic_alias is not None or props.subscription_identifiers):
        props = props.replace(topic_alias=None, subscription_identifiers=())  # a connection's, a delivery's
    return Message(m.topic, m.payload, m.qos, m.retain, props, m.source_id, now)


def _publish(out: Takeover, trie: TopicTrie[str, SubscriptionOptions], message: Message, row: int) -> int:
    """A message published at the take-over: queued for the sessions whose subscriptions match (one delivery each,
    at the highest QoS they ask, with every matching subscription's identifier, as the broker routes), retained if
    it is. Returns the last delivery row used."""
    targets: dict[str, tuple[int, bool, tuple[int, ...]]] = {}
    for _flt, client_id, opts in trie.match(message.topic):
        if opts.no_local and client_id == message.origin:
            continue
        qos, rap, sids = targets.get(client_id, (0, False, ()))
        ident = opts.subscription_identifier
        targets[client_id] = (max(qos, opts.qos), rap or opts.retain_as_published,
                              (*sids, ident) if ident else sids)  # fmt: skip
    for client_id, (sub_qos, rap, sids) in targets.items():
        qos = min(message.qos, sub_qos)
        if not qos:
            out.left_out.qos0_messages += 1
            continue
        row += 1
        out.changes.append(DeliveryAdded(client_id, row, message, qos, message.retain and rap, sids))
    if message.retain:  # (an empty payload clears the topic's retained message, as a PUBLISH does)
        out.changes.append(RetainedSet(message) if message.payload else RetainedCleared(message.topic))
    return row
