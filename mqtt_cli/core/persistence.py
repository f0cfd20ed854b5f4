"""What the broker asks to be stored, as data: the change records BrokerCore appends while persistence is on.

Sans-IO: BrokerCore appends these to `changes` (as it appends to `notices` and each connection's `out`), and the
network layer hands them to net/store.py, which writes them in grouped transactions. Acknowledgements that
promise a message is kept (a QoS 1 PUBACK, a QoS 2 PUBREC, the PUBCOMP that ends an incoming QoS 2 flow) and a
first QoS 2 PUBLISH to a persistent session's client (its packet identifier must be on file before the client can
hold it) wait in `held` until the commit holding what they acknowledge is done. Times are the core's clock;
the store turns them into wall-clock times and back.

`StoredSession` and `StoredDelivery` are what the store gives back at start, for `BrokerCore.restore`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .packed import PackedQueue
from .packets import Will
from .session import Message, SubscriptionOptions

__all__ = [
    "COMMIT_BOUNDS",
    "Change",
    "CommitLatency",
    "DeliveryAdded",
    "DeliveryDone",
    "DeliveryReleased",
    "DeliverySent",
    "IncomingAdded",
    "IncomingReleased",
    "Pending",
    "RetainedCleared",
    "RetainedSet",
    "SessionRemoved",
    "SessionSaved",
    "StoredDelivery",
    "StoredSession",
    "log_only",
]


@dataclass(frozen=True, slots=True)
class RetainedSet:
    message: Message


@dataclass(frozen=True, slots=True)
class RetainedCleared:
    topic: str


@dataclass(frozen=True, slots=True)
class SessionSaved:
    """A persistent session's state beyond its queue: written whole (it changes rarely: CONNECT, SUBSCRIBE...)."""

    client_id: str
    version: int
    expiry_interval: int
    expires_at: float | None  # set while disconnected (core clock)
    subscriptions: tuple[tuple[str, SubscriptionOptions], ...]
    username: str | None = None  # the user it belongs to (an ACL hands it to no other)
    will: Will | None = None  # still due: published if the connection ends other than by DISCONNECT 0x00
    will_at: float | None = None  # a delayed will's time (core clock), once its connection has closed
    bridge: str | None = None  # the embedded bridge whose local side it is (removed at start once not configured)


@dataclass(frozen=True, slots=True)
class SessionRemoved:
    client_id: str


# The records made per message (below, to IncomingReleased) are not frozen: a frozen dataclass's __init__ sets each
# field through object.__setattr__, several times slower, and the broker makes up to six of them per message.
# Nothing changes them once made. Each spells its __init__ (init=False): this module is compiled, and mypyc builds
# a class whose __init__ the class body defines with a direct C call, where the one dataclasses generates stays
# interpreted (about ten times the cost).


@dataclass(slots=True, init=False)
class DeliveryAdded:
    """A QoS 1/2 message for a persistent session, queued or in flight until its client acknowledges it.
    `row` orders a session's deliveries and names this one in DeliveryDone. `packet_id`: the identifier it went
    out with as it was added (the common case: one record, not a DeliverySent after it); -1: queued, a DeliverySent
    says when it goes."""

    client_id: str
    row: int
    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]
    packet_id: int

    def __init__(
        self,
        client_id: str,
        row: int,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        packet_id: int = -1,
    ) -> None:
        self.client_id = client_id
        self.row = row
        self.message = message
        self.qos = qos
        self.retain = retain
        self.subscription_ids = subscription_ids
        self.packet_id = packet_id


@dataclass(slots=True, init=False)
class DeliveryDone:
    """Acknowledged by its client (or dropped: expired, over a limit): nothing more to keep."""

    client_id: str
    row: int

    def __init__(self, client_id: str, row: int) -> None:
        self.client_id = client_id
        self.row = row


@dataclass(slots=True, init=False)
class DeliverySent:
    """The packet identifier a delivery went out with (re-sent with it, DUP set, after a restart)."""

    client_id: str
    row: int
    packet_id: int

    def __init__(self, client_id: str, row: int, packet_id: int) -> None:
        self.client_id = client_id
        self.row = row
        self.packet_id = packet_id


@dataclass(slots=True, init=False)
class DeliveryReleased:
    """PUBREC came for a QoS 2 delivery: what is left of its flow is the PUBREL (re-sent after a restart)."""

    client_id: str
    row: int

    def __init__(self, client_id: str, row: int) -> None:
        self.client_id = client_id
        self.row = row


@dataclass(slots=True, init=False)
class IncomingAdded:
    """A QoS 2 PUBLISH received from a persistent session's client and not yet released (PUBREL): its re-send after
    a restart is acknowledged, not delivered again."""

    client_id: str
    packet_id: int

    def __init__(self, client_id: str, packet_id: int) -> None:
        self.client_id = client_id
        self.packet_id = packet_id


@dataclass(slots=True, init=False)
class IncomingReleased:
    client_id: str
    packet_id: int

    def __init__(self, client_id: str, packet_id: int) -> None:
        self.client_id = client_id
        self.packet_id = packet_id


Change = (
    RetainedSet
    | RetainedCleared
    | SessionSaved
    | SessionRemoved
    | DeliveryAdded
    | DeliveryDone
    | DeliverySent
    | DeliveryReleased
    | IncomingAdded
    | IncomingReleased
)


def log_only(changes: list[Change]) -> bool:
    """Whether `changes` are all per-message records the store logs (no session, retained message or queued
    delivery for its tables): each delivery added is sent at once (with its packet identifier, as the core makes
    them, or its DeliverySent right after it). Such a group is one frame of the store's change file, nothing else."""
    n = len(changes)
    i = 0
    while i < n:
        c = changes[i]
        i += 1
        if type(c) is DeliveryAdded:  # (narrowed by `type(...) is`: native attribute reads when compiled)
            if c.packet_id >= 0:
                continue
            if i == n:
                return False
            after = changes[i]
            if type(after) is not DeliverySent or after.row != c.row:
                return False
            i += 1
        elif (
            type(c) is not DeliverySent
            and type(c) is not DeliveryReleased
            and type(c) is not DeliveryDone
            and type(c) is not IncomingAdded
            and type(c) is not IncomingReleased
        ):
            return False
    return True


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    row: int
    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]
    packet_id: int | None = None  # in flight with this identifier (None: queued, not sent yet)
    released: bool = False  # QoS 2: PUBREC came, PUBREL is what to re-send


@dataclass(frozen=True, slots=True)
class StoredSession:
    client_id: str
    version: int
    expiry_interval: int
    expires_at: float | None
    subscriptions: tuple[tuple[str, SubscriptionOptions], ...]
    deliveries: tuple[StoredDelivery, ...]  # in the order they were queued
    username: str | None = None
    will: Will | None = None
    will_at: float | None = None
    incoming: tuple[int, ...] = ()  # QoS 2 packet identifiers received and not released
    # The store's restore packs the queued deliveries here (core/packed.py: a few bytes beyond each payload);
    # `deliveries` then holds those in flight. Both are restored, `queued` first.
    queued: PackedQueue | None = None
    bridge: str | None = None  # SessionSaved.bridge


#: Upper bounds (seconds) of the commit latency histogram's buckets: an fsync on a disk takes 1-20 ms.
COMMIT_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _zeros() -> list[int]:
    return [0] * (len(COMMIT_BOUNDS) + 1)


@dataclass(slots=True)
class CommitLatency:
    """How long commits took, as a Prometheus histogram: `counts[i]` commits took at most COMMIT_BOUNDS[i] (and
    more than the bound before); the last count is those over every bound. The network layer measures (it has
    the clock); a failed commit is not counted."""

    counts: list[int] = field(default_factory=_zeros)
    total: float = 0.0  # seconds, summed

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(COMMIT_BOUNDS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)


_DELIVERY_STEPS = (DeliveryAdded, DeliverySent, DeliveryReleased, DeliveryDone)


class _Batch:
    """What the core changed and held in one batch (the network layer collects after each batch of input), and
    how many of its QoS 1 deliveries their subscribers have not acknowledged yet. (A plain class: built per batch,
    natively when compiled.)"""

    __slots__ = ("at", "changes", "hard", "held", "pure", "seq", "taken", "waiting", "written")

    def __init__(
        self,
        changes: list[Change],
        held: list[tuple[Any, Any]],
        at: float,
        seq: int,
        hard: bool = False,
        taken: bool = False,
    ) -> None:
        self.changes = changes
        self.held = held
        self.waiting = 0
        self.at = at  # collected (core clock)
        self.seq = seq  # collected in this order
        self.hard = hard  # holds a change its acknowledgements (and those after them) wait for until it is written
        self.pure = False  # its changes are its QoS 1 deliveries, added and sent: dropped once they are all done
        self.taken = taken  # its changes are in a commit (being written, or written)
        self.written = False


class Pending:
    """What the next commits write, and the acknowledgements held until then, or until they no longer need to be.

    An acknowledgement may go out once everything the core changed before it is on file *or no longer needs to
    be*. A QoS 1 delivery to a persistent session, sent to its online client, which acknowledges it before a commit
    took it leaves the file as it was (the pair is dropped). So a batch's acknowledgements go out when its QoS 1
    deliveries are done or written, whichever comes first, and those of every batch before it have gone. Anything
    else (a QoS 2 delivery, whose PUBLISH waits for its row; a queued delivery; a retained message; a session; an
    incoming QoS 2 identifier; an update of a row on file) makes its batch "hard": its acknowledgements, and so
    those after them (they keep their order), wait for the commit that writes it, which is due at once.

    `due` says when to commit: at once for a hard batch or a full group, `linger` after the oldest batch still
    waiting for its subscribers. A commit takes the batches that are due (`take`): younger ones stay, so a message
    is written only when its subscriber took longer than `linger`."""

    __slots__ = ("_batches", "_elided", "_hard", "_live", "_segments", "_seq", "committing", "count")

    #: Changes kept at most before a commit is due (what a busy, always-acknowledging subscriber accumulates).
    MAX_CHANGES = 16384

    def __init__(self) -> None:
        self.count = 0  # changes in `_batches`
        self.committing = False  # a group taken, not yet written
        self._batches: deque[_Batch] = deque()  # not taken yet, in order
        self._segments: deque[_Batch] = deque()  # those whose acknowledgements have not gone, in order
        self._live: dict[int, _Batch] = {}  # row -> its batch: QoS 1 deliveries added, not done, not yet written
        self._elided: set[int] = set()  # rows added and done before a commit took them
        self._hard: _Batch | None = None  # the first hard batch not taken yet
        self._seq = 0

    def add(self, changes: list[Change], held: list[tuple[Any, Any]], now: float) -> list[tuple[Any, Any]]:
        """One batch: the core's new changes and the acknowledgements it held meanwhile (both kept: the caller
        gives the core new lists). Returns the acknowledgements that may go out now, in order."""
        self._seq += 1
        batch = _Batch(changes, held, now, self._seq)
        hard = False
        live = self._live
        added = sent = 0  # QoS 1 deliveries added in this batch, and sent in it (the core sends one as it adds it)
        steps = 0  # their records: one for a delivery added as it was sent, two with a DeliverySent
        elided = 0  # DeliveryDone of rows added in batches not taken: not kept (nor, later, their DeliveryAdded)
        dropped: list[int] = []  # their rows
        for c in changes:
            if type(c) is DeliveryAdded:
                if c.qos == 1:
                    live[c.row] = batch
                    batch.waiting += 1
                    added += 1
                    steps += 1
                    if c.packet_id >= 0:
                        sent += 1
                else:
                    hard = True
            elif type(c) is DeliveryDone:
                # (The row boxed once, and get + del rather than pop(row, None): compiled, each dict operation boxes
                # an int anew, and a method call costs more than both.)
                key: Any = c.row
                of = live.get(key)
                if of is not None:
                    del live[key]
                    of.waiting -= 1
                    if not of.taken:
                        elided += 1
                        dropped.append(key)
                        if not of.waiting and of.pure:
                            # Nothing of it is left to write: its records go now, not at the next commit (fewer
                            # objects kept alive, less for the garbage collector to go through).
                            self.count -= len(of.changes)
                            of.changes = []
                        else:
                            self._elided.add(key)  # its records, where they still are, are left out by take
            elif type(c) is DeliverySent and live.get(c.row) is batch:
                sent += 1  # (its identifier goes with its INSERT, if it is written)
                steps += 1
            else:
                hard = True
        if sent < added:
            # Queued, not sent (an offline subscriber, a full window): no acknowledgement is coming soon. Written
            # at once, as everything else, rather than after the linger.
            hard = True
        if elided == len(changes):  # (the common batch: a subscriber's acknowledgements)
            changes = batch.changes = []
        elif elided:
            gone = set(dropped)
            changes = [c for c in changes if not (type(c) is DeliveryDone and c.row in gone)]
            batch.changes = changes
        if changes:
            batch.pure = not hard and len(changes) == steps
            if batch.pure and not batch.waiting:  # done within the batch itself
                changes = batch.changes = []
        batches = self._batches
        if changes:
            batches.append(batch)
            self.count += len(changes)
        while batches and not batches[0].changes:  # (its acknowledgements, if any, are in `_segments`)
            batches.popleft()
        if not batches and self._elided:
            # No record is left that names them (take filters by them): forgotten now, not at the next commit,
            # which never comes while every delivery is acknowledged in time (the set grew without bound).
            self._elided = set()
        if hard:
            batch.hard = True
            if self._hard is None:
                self._hard = batch
        if held or batch.waiting or hard:
            self._segments.append(batch)
        return self._releasable()

    def _releasable(self) -> list[tuple[Any, Any]]:
        segments = self._segments
        out: list[tuple[Any, Any]] = []
        while segments:
            first = segments[0]
            if not first.written and (first.waiting or first.hard):
                break
            segments.popleft()
            out += first.held
        return out

    def withheld(self) -> int:
        """Acknowledgements held now."""
        return sum(len(s.held) for s in self._segments)

    def due(self, linger: float, idle: float) -> float | None:
        """When to commit (core clock; None: nothing to, or a commit is being written): at once (-inf) for a hard
        batch or a full group, `linger` after the oldest batch waiting for its subscribers, `idle` after the oldest
        change otherwise (what only tidies the file: rows deleted)."""
        if self.committing or not self._batches:
            return None
        if self._hard is not None or self.count >= self.MAX_CHANGES:
            return -math.inf
        for s in self._segments:
            if not s.taken:  # the first not written is waiting (else it would have gone)
                return s.at + linger
        return self._batches[0].at + idle

    def take(self, now: float, linger: float) -> list[Change]:
        """For a commit: the changes of the batches that are due (all, with a hard one; else up to the first batch
        waiting for its subscribers for less than `linger`), without the pairs that write nothing. Their
        acknowledgements go when it is written (`committed`) or, for those that wait for no hard change, when their
        deliveries are done, if that comes first; `failed` if it cannot be written."""
        stop: float = math.inf  # the first batch kept (its seq)
        if self._hard is None and self.count < self.MAX_CHANGES:
            for s in self._segments:
                if s.at + linger > now:
                    stop = float(s.seq)
                    break
        elided = self._elided
        changes: list[Change] = []
        batches = self._batches
        while batches and batches[0].seq < stop:
            b = batches.popleft()
            b.taken = True
            changes += b.changes
        for s in self._segments:
            if s.seq >= stop:
                break
            s.taken = True
        self._hard = None
        if elided:
            # A pair taken apart by the cut (added before it, done after) is dropped from the batches kept too.
            changes = [c for c in changes if not (isinstance(c, _DELIVERY_STEPS) and c.row in elided)]
            for b in batches:
                b.changes = [c for c in b.changes if not (isinstance(c, _DELIVERY_STEPS) and c.row in elided)]
            self._elided = set()
        self.count = sum(len(b.changes) for b in batches)
        self.committing = True
        return changes

    def committed(self) -> list[tuple[Any, Any]]:
        """The taken group is on file: the acknowledgements that may go now."""
        self.committing = False
        for s in self._segments:
            if not s.taken:
                break
            s.written = True
        # Its rows are on file: a DeliveryDone of one is written as it comes (a DELETE).
        self._live = {row: b for row, b in self._live.items() if not b.taken}
        return self._releasable()

    def failed(self, changes: list[Change], now: float) -> None:
        """The taken group could not be written: it goes back in front of what came since, to be tried again; its
        acknowledgements wait for it."""
        self.committing = False
        front = _Batch(changes, [], now, 0, hard=True, taken=True)  # (taken: a DeliveryDone of its rows is kept)
        self._batches.appendleft(front)
        self._segments.appendleft(front)
        self.count += len(changes)
        self._hard = front
