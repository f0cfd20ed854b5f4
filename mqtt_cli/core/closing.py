"""Closing: a connection's end (a 5.0 DISCONNECT with a reason, the session detached), wills (at once or after
their delay), session ends (at once or after their expiry interval), and the timers that run the delayed ones.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final

from .lifecycle import (
    LifecycleEvent,
)
from .outbox import Notice, NoticeKind
from .packets import (
    Disconnect,
)
from .persistence import (
    SessionRemoved,
)
from .properties import EMPTY_PROPERTIES, Properties
from .reasons import REASONS_BY_PACKET, ReasonCode
from .server import ServerConnection
from .session import Message, Session

if TYPE_CHECKING:
    from .broker import BrokerCore

# Reasons the broker closes a connection for that are no fault (logged `disconnected` with the reason, not `error`).
_CHOSEN: Final = frozenset(
    {
        ReasonCode.SESSION_TAKEN_OVER,
        ReasonCode.ADMINISTRATIVE_ACTION,
        ReasonCode.SERVER_SHUTTING_DOWN,
        ReasonCode.USE_ANOTHER_SERVER,
        ReasonCode.SERVER_MOVED,
    }
)

__all__ = ["CONNECT_TIMEOUT", "NEVER_EXPIRES", "SWEEP_INTERVAL", "Closing", "Timer", "TimerKind"]

NEVER_EXPIRES = 0xFFFFFFFF
CONNECT_TIMEOUT = 10.0  # seconds a new connection has to send its CONNECT
SWEEP_INTERVAL = 0.5  # seconds between keep-alive checks (a late close by half a second is within the spec)


class TimerKind(Enum):
    WILL = "will"  # a will's delay ends
    EXPIRE = "expire"  # a session's expiry interval ends


@dataclass(order=True, slots=True)
class Timer:
    when: float
    seq: int
    kind: TimerKind = field(compare=False)
    client_id: str = field(compare=False)


class Closing:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        self.storage = core.storage
        self.delivery = core.delivery
        self.router = core.router
        self.stats = core.stats
        self.sessions = core.sessions
        self.timers: list[Timer] = []
        self.seq = 0

    def close(
        self,
        conn: ServerConnection,
        now: float,
        *,
        reason: int | None,
        detail: str,
        refused: str | None = None,
        event: LifecycleEvent = LifecycleEvent.DISCONNECT_SENT,
    ) -> None:
        """Ends a connection: 5.0 DISCONNECT with `reason` when there is one, then the session is detached.
        `refused`: a CONNECT refused, why (counted by that name). `event`: what ends it, for the state table (the
        broker's own decision unless said otherwise)."""
        if conn.closed:
            return
        if refused is not None:
            self.stats.count_refused(refused)
        if reason is not None and conn.connected and conn.version == 5 and reason in REASONS_BY_PACKET[14]:
            why = (
                Properties(reason_string=detail[:200])
                if detail and self.core.config.limits.reason_strings
                else EMPTY_PROPERTIES
            )
            self.out.send(conn, Disconnect(reason, why))
        conn.advance(event)
        self.out.dirty[conn] = None
        kind = (
            NoticeKind.REFUSED
            if refused
            else NoticeKind.DISCONNECTED
            if reason is None or reason in _CHOSEN
            else NoticeKind.ERROR
        )
        self.out.notices.append(Notice(kind, conn.client_id, conn.peer, detail, reason))
        session = conn.session
        if session is None or session.connection is not conn:
            return
        session.connection = None
        self.core.connected -= 1
        if session.will is not None:
            delay = (session.will.properties.will_delay_interval or 0) if conn.version == 5 else 0
            if delay and session.expiry_interval:
                session.will_at = now + delay
                self.schedule(session.will_at, TimerKind.WILL, session.client_id)
            else:
                self.publish_will(session, now)
        if session.expiry_interval == 0:
            self.end_session(session, now)
            return
        idle = self.idle_expiry(session)
        if idle is not None:
            session.expires_at = now + idle
            self.schedule(session.expires_at, TimerKind.EXPIRE, session.client_id)
        self.storage.save_session(session)

    def idle_expiry(self, session: Session) -> float | None:
        """Seconds a disconnected client's session is kept: its expiry interval, or for one that never expires,
        persistent_client_expiration (None: for ever). An embedded bridge's local session is the broker's own."""
        if session.expiry_interval != NEVER_EXPIRES:
            return session.expiry_interval
        limit = self.core.config.limits.persistent_client_expiration
        return limit if limit and session.bridge is None else None

    def end_session(self, session: Session, now: float) -> None:
        if self.delivery.dropping:
            self.delivery.drops_end(session)
        if session.will is not None and session.connection is None and session.will_at is not None:
            # A delayed will goes out at once when the session ends first (3.1.3.2.2).
            session.will_at = None
            self.publish_will(session, now)
        for flt in session.subscriptions:
            self.router.unsubscribe(flt, session.client_id)
        session.subscriptions.clear()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
            self.router.views.pop(session.client_id, None)
            if self.storage.changes is not None:
                self.storage.changes.append(SessionRemoved(session.client_id))

    def publish_will(self, session: Session, now: float) -> None:
        will = session.will
        session.will = None
        if will is None:
            return
        view = self.router.views.get(session.client_id)
        if view is not None and not view.can_write(will.topic):
            # Checked when it goes out, against the ACL then in force (as mosquitto 2.0.11: CONNECT is accepted).
            self.out.notices.append(Notice(NoticeKind.DROPPED, session.client_id, "-", f"will to {will.topic!r}: ACL"))
            return
        props = will.properties.replace(will_delay_interval=None) if will.properties.items else EMPTY_PROPERTIES
        self.router.route(Message(will.topic, will.payload, will.qos, will.retain, props, session.client_id, now), now)

    def sweep(self, now: float) -> None:
        """Closes connections silent past their keep alive (1.5x), or without a CONNECT after CONNECT_TIMEOUT (from
        the start: a trickle of bytes does not extend it)."""
        core = self.core
        for conn in list(core.connections):
            if conn.closed:
                continue
            if conn.connected:
                deadline = conn.keepalive_deadline()  # the rule both roles apply (core/lifecycle.py)
                if deadline is not None and now >= deadline:
                    self.close(conn, now, reason=ReasonCode.KEEP_ALIVE_TIMEOUT, detail="keep alive timeout")
            elif now >= conn.opened_at + CONNECT_TIMEOUT:
                core.connection_lost(conn, now)
                conn.close_requested = True
                self.out.dirty[conn] = None

    def run_due(self, now: float) -> float | None:
        """Publishes the delayed wills and ends the sessions whose time has come; returns when the next is due."""
        timers = self.timers
        while timers and timers[0].when <= now:
            timer = heapq.heappop(timers)
            session = self.sessions.get(timer.client_id)
            if session is None or session.connection is not None:
                continue
            if timer.kind is TimerKind.WILL and session.will_at == timer.when:
                session.will_at = None
                self.publish_will(session, now)
                self.storage.save_session(session)  # the file forgets the will
            elif timer.kind is TimerKind.EXPIRE and session.expires_at == timer.when:
                self.stats.sessions_expired += 1
                self.end_session(session, now)
        return timers[0].when if timers else None

    def schedule(self, when: float, kind: TimerKind, client_id: str) -> None:
        self.seq += 1
        heapq.heappush(self.timers, Timer(when, self.seq, kind, client_id))  # (BrokerCore.output: the earliest)
