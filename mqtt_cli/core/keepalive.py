"""A client connection's keep alive timer (3.1.2.10): a PINGREQ when nothing was sent or received for a keep alive
period, the end of the connection when the broker said nothing for one and a half periods. Time comes in as a
number (seconds, any origin), as everywhere in the core."""

from __future__ import annotations

from enum import Enum

from .lifecycle import keepalive_deadline

__all__ = ["Due", "KeepaliveTimer"]


class Due(Enum):
    """What the timer says at its deadline (KeepaliveTimer.due)."""

    PING = "ping"  # send PINGREQ
    EXPIRED = "expired"  # the broker stopped answering: end the connection


class KeepaliveTimer:
    """`period`: the connection's keep alive in seconds (0: none). `pings_sent` counts the PINGREQs of this
    connection (the timer's and the owner's): PINGRESPs answer them in order."""

    __slots__ = ("last_received", "last_sent", "period", "ping_sent", "pings_sent")

    def __init__(self, period: int) -> None:
        self.period = period
        self.last_sent: float | None = None
        self.last_received: float | None = None
        self.ping_sent: float | None = None  # when the PINGREQ not yet answered went
        self.pings_sent = 0

    def restart(self, period: int) -> None:
        """A new connection (CONNECT queued)."""
        self.period = period
        self.last_received = self.ping_sent = None
        self.pings_sent = 0

    def ping(self, now: float | None) -> None:
        """A PINGREQ was queued (`now` None: the time of the last traffic stands in)."""
        self.pings_sent += 1
        if self.ping_sent is None:
            self.ping_sent = now if now is not None else (self.last_sent or self.last_received or 0.0)

    def deadline(self) -> float | None:
        """When `due()` must be asked next (None: no timer runs: no keep alive, or nothing received yet)."""
        ka = self.period
        received = self.last_received
        if not ka or received is None:
            return None
        dead = keepalive_deadline(received, ka)
        if self.ping_sent is not None:
            return dead
        last = received if self.last_sent is None else min(self.last_sent, received)
        return min(last + ka, dead)

    def due(self, now: float) -> Due | None:
        """What is due at `now`, if anything (a PING is counted as sent: the caller queues it)."""
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return None
        assert self.last_received is not None  # (deadline() says so)
        if now >= keepalive_deadline(self.last_received, self.period):
            return Due.EXPIRED
        self.pings_sent += 1
        self.ping_sent = now
        return Due.PING
