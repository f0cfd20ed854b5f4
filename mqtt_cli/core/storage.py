"""Storage: the core's side of persistence (sans-IO). While it is on, what changes is appended to `changes` as the
records of persistence.py, and the acknowledgements that promise a message is kept wait in `held` for the commit
that holds it. `restore` puts back what the store kept, before any connection.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from .closing import TimerKind
from .lifecycle import (
    ConnectionState,
)
from .packed import PackedQueue, PackedRetained
from .packets import (
    Publish,
)
from .persistence import (
    Change,
    DeliveryDone,
    Pending,
    SessionRemoved,
    SessionSaved,
    StoredDelivery,
    StoredSession,
)
from .properties import EMPTY_PROPERTIES
from .server import ServerConnection
from .session import Delivery, Message, Session

if TYPE_CHECKING:
    from .broker import BrokerCore

_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED

# How long acknowledgements wait for the subscribers of their QoS 1 messages (acknowledged before a commit, a
# message is never written) before the commit that writes them; how long changes that only tidy the file (rows
# deleted) wait for company; and the pause before a failed commit is tried again (a full disk, say).
COMMIT_LINGER = 0.005
COMMIT_IDLE = 0.1
RETRY_COMMIT = 1.0

__all__ = [
    "COMMIT_IDLE",
    "COMMIT_LINGER",
    "RETRY_COMMIT",
    "HeldDelivery",
    "HeldRelease",
    "Storage",
    "StoreRecovered",
]


class HeldDelivery:
    """A QoS 2 delivery to an in-process client (a bridge) waiting in `held` for the commit of its packet
    identifier, as a network client's first QoS 2 PUBLISH does: the remote broker may hold the message under that
    identifier only once a restart would re-send it under the same one."""

    __slots__ = ("message", "packet_id", "qos", "retain")

    def __init__(self, message: Message, qos: int, retain: bool, packet_id: int) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.packet_id = packet_id


class HeldRelease:
    """The PUBREL of an in-process client's QoS 2 delivery (a bridge's, to the remote broker) waiting in `held` for
    the commit saying its PUBREC came, as a network client's PUBREL does."""

    __slots__ = ("packet_id",)

    def __init__(self, packet_id: int) -> None:
        self.packet_id = packet_id


class StoreRecovered:
    """Commits are written again: how long they failed, and how many acknowledgements were withheld meanwhile."""

    __slots__ = ("after", "withheld")

    def __init__(self, after: float, withheld: int) -> None:
        self.after = after
        self.withheld = withheld


class Storage:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        # None while off, so the hot paths pay one None check. When on, what is to be stored, and the
        # acknowledgements that must wait for the commit holding it (conn, bytes).
        self.changes: list[Change] | None = None
        self.held: list[tuple[ServerConnection, Any]] = []  # bytes, or an in-process client's token
        self.row = 0  # the last delivery row handed out
        # The commits: what they write and the acknowledgements they hold (persistence.Pending), the group handed
        # out for the commit being written, and when the next one is due.
        self.pending = Pending()
        self.taken: list[Change] = []
        self.commit_at = math.inf
        # While no commit can be written (commit_failed until commit_done): 5.0 publishers are told 0x97 (not
        # stored), and the failed group is tried again every RETRY_COMMIT seconds.
        self.failing = False
        self.failing_since = 0.0
        self.retry_at = 0.0

    # --- commits: the network layer writes the groups this hands out ----------------------------------------

    def collect(self, now: float) -> list[Change] | None:
        """What the core changed and the acknowledgements it held since the last pass join the pending commits;
        those that wait for nothing (their messages' subscribers acknowledged them, nothing else to write) go out
        now. Returns the group to commit now, if one is due (else `commit_at` says when one is)."""
        pending = self.pending
        self._gather(now)
        self.commit_at = math.inf
        if pending.committing:
            return None
        if self.failing and now < self.retry_at:
            self.commit_at = self.retry_at
            return None
        due = pending.due(COMMIT_LINGER, COMMIT_IDLE)
        if due is None:
            return None
        if due > now:
            self.commit_at = due
            return None
        group = pending.take(now, COMMIT_LINGER)
        if not group:  # pairs that cancel out: nothing to write, what they held goes now
            self.release(pending.committed())
            return None
        self.taken = group
        return group

    def holding(self) -> bool:
        """Whether acknowledgements are held back, or changes wait to be collected, since the last output."""
        return bool(self.changes) or bool(self.held)

    def _gather(self, now: float) -> None:
        changes = self.changes
        if changes or self.held:
            assert changes is not None
            ready = self.pending.add(changes, self.held, now)
            self.changes = []
            self.held = []
            if ready:
                self.release(ready)

    def commit_done(self, now: float, took: float) -> StoreRecovered | None:
        """The group handed out is on file (it took `took` seconds): the acknowledgements it held go out. After
        failures, what ended them."""
        self.core.stats.commit_latency.observe(took)
        recovered = None
        if self.failing:
            self.failing = False
            recovered = StoreRecovered(now - self.failing_since, self.pending.withheld())
        self.taken = []
        self.release(self.pending.committed())
        return recovered

    def commit_failed(self, now: float) -> int | None:
        """The group handed out could not be written: kept, ahead of what came since, and tried again after
        RETRY_COMMIT. At the first failure of an episode, the acknowledgements withheld now (else None)."""
        self.pending.failed(self.taken, now)
        self.taken = []
        self.retry_at = now + RETRY_COMMIT
        if self.failing:
            return None
        self.failing = True
        self.failing_since = now
        self.core.stats.store_failures += 1
        return self.pending.withheld()

    def last_commit(self, now: float) -> list[Change]:
        """At shutdown: everything not yet written, in one group."""
        if self.changes is None:
            return []
        self._gather(now)
        return self.pending.take(math.inf, 0.0)

    def take_changes(self) -> list[Change]:
        """The changes made since persistence was enabled (a restore's), to be written at once, before any
        connection: they hold no acknowledgement."""
        changes = self.changes or []
        self.changes = []
        return changes

    # --- persistence ----------------------------------------------------------------------------------------

    def enable_persistence(self) -> None:
        """From now on, changes worth keeping go to `changes`, and PUBACK/PUBREC to `held` (see persistence)."""
        if self.changes is None:
            self.changes = []

    def restore(
        self, sessions: Iterable[StoredSession], retained: Iterable[Message] | PackedRetained, now: float
    ) -> None:
        """What the store kept, before any connection: retained messages, and sessions with their
        subscriptions and the deliveries not yet acknowledged (those that were in flight go first again, as new
        sends). A session whose client was connected when the broker stopped starts its expiry now."""
        if isinstance(retained, PackedRetained):  # from the store: kept frozen, thawed when delivered
            for frozen in retained.take():
                self.core.router.retained.set_frozen(retained.topic(frozen), frozen, retained.thaw)
        else:
            for message in retained:
                self.core.router.retained.set(message.topic, message)
        due: list[Session] = []  # wills of connections the stop ended, published once every session is back
        for stored in sessions:
            session = Session(stored.client_id, stored.version)
            session.will = stored.will
            if stored.expiry_interval == 0:
                # Kept only for its will: the stop ended its connection and its session, so the will is due.
                if stored.will is not None:
                    due.append(session)
                if self.changes is not None:
                    self.changes.append(SessionRemoved(stored.client_id))
                continue
            session.username = stored.username
            session.bridge = stored.bridge
            session.expiry_interval = stored.expiry_interval
            session.expires_at = stored.expires_at
            connected = session.expires_at is None and stored.will_at is None
            idle = self.core.closing.idle_expiry(session)
            if session.expires_at is None and idle is not None:
                session.expires_at = now + idle
            if session.expires_at is not None:
                self.core.closing.schedule(session.expires_at, TimerKind.EXPIRE, session.client_id)
            if stored.will is not None:
                if stored.will_at is not None:  # its connection had closed; the will delay was running
                    session.will_at = stored.will_at
                    self.core.closing.schedule(stored.will_at, TimerKind.WILL, session.client_id)
                elif connected:
                    # Its connection was ended by the stop, not by a DISCONNECT: the will is due [MQTT-3.1.2-8],
                    # after its delay counted from now (as the session's expiry is).
                    delay = (stored.will.properties.will_delay_interval or 0) if stored.version == 5 else 0
                    if delay and session.expiry_interval:
                        session.will_at = now + delay
                        self.core.closing.schedule(session.will_at, TimerKind.WILL, session.client_id)
                    else:
                        due.append(session)
            for pid in stored.incoming:
                session.incoming.accept(pid)
            for flt, opts in stored.subscriptions:
                self.core.router.subscribe(flt, session.client_id, opts)
                session.subscriptions[flt] = opts
            if stored.queued:
                session.queue = stored.queued
                session.queued_bytes = stored.queued.size
                self.row = max(self.row, stored.queued.last_row)
            if stored.deliveries:
                queue: deque[Delivery] | PackedQueue = session.queue or deque()
                for d in stored.deliveries:
                    self.row = max(self.row, d.row)
                    if d.packet_id is not None:
                        # In flight when the broker stopped: re-sent after the next CONNACK with its packet
                        # identifier and DUP, or as PUBREL once PUBREC came (4.4).
                        self.restore_inflight(session, d, now)
                        continue
                    queue.append(Delivery(d.message, d.qos, d.retain, d.subscription_ids, d.row))
                    session.queued_bytes += d.message.size
                if queue:
                    session.queue = queue
            self.core.sessions[session.client_id] = session
            if connected:  # its expiry (and will delay) start now: on file
                self.save_session(session)
        for session in due:
            self.core.closing.publish_will(session, now)
            if session.expiry_interval:
                self.save_session(session)

    def restore_inflight(self, session: Session, d: StoredDelivery, now: float) -> None:
        m = d.message
        props = m.delivery_properties(now, d.subscription_ids) if session.version == 5 else EMPTY_PROPERTIES
        publish = Publish(m.topic, m.payload, d.qos, d.retain, True, d.packet_id, props)
        session.outgoing.restore(publish, d.released, m)
        if session.rows is None:
            session.rows = {}
        assert d.packet_id is not None  # a stored delivery in flight has its packet identifier
        session.rows[d.packet_id] = d.row

    def release(self, held: list[tuple[ServerConnection, Any]]) -> None:
        """The commit holding what these acknowledgements promise is done: they go out (to open connections; an
        in-process client's `taken` is told, with the token its publish_internal gave)."""
        for conn, data in held:
            if conn.state is not _CLOSED:
                if conn.sink is not None:
                    kind = type(data)
                    if kind is HeldDelivery:
                        conn.sink.deliver(data.message, data.qos, data.retain, data.packet_id)
                    elif kind is HeldRelease:
                        conn.sink.released(data.packet_id)
                    else:
                        conn.sink.taken(data)
                else:
                    self.out.write(conn, data)

    def save_session(self, session: Session) -> None:
        """A persistent session as it is now; a session that ends with its connection only while it has a will
        (the will is due if the broker stops before the client disconnects)."""
        changes = self.changes
        if changes is not None and (session.expiry_interval or session.will is not None):
            subs = tuple(session.subscriptions.items())
            changes.append(
                SessionSaved(
                    session.client_id,
                    session.version,
                    session.expiry_interval,
                    session.expires_at,
                    subs,
                    session.username,
                    session.will,
                    session.will_at,
                    session.bridge,
                )
            )

    def delivery_done(self, session: Session, packet_id: int) -> None:
        rows = session.rows
        if rows:
            key: Any = packet_id  # (boxed once; get + del: compiled, cheaper than the pop method call)
            row = rows.get(key, 0)
            if row:
                del rows[key]
                if self.changes is not None:
                    self.changes.append(DeliveryDone(session.client_id, row))
