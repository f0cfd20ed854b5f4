"""The data side of `mqtt bench`: the latency histogram, the figures of a run and their exact merge across worker
processes, and `--expect` conditions. Sans-IO: times are numbers passed in. Latency is measured on the wall clock
(CLOCK_REALTIME, ns), the clock of the kernel's receive timestamps; the spans of a run (start, end of publishing,
last delivery) on CLOCK_MONOTONIC, every process's. The payload layout, the histogram's buckets and the work per
message (building PUBLISH packets, scanning what arrives, loss/duplicate/reorder counts): core/benchwire.py.

Merging two histograms adds their counts bucket by bucket: the merge is exact (the same as recording all values
in one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from .benchwire import HEADER, HEADER_SIZE, PAD_BYTE, Latencies, bucket_of, bucket_range

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "PAD_BYTE",
    "Clock",
    "Condition",
    "ErrorKind",
    "Figures",
    "Histogram",
    "bucket_of",
    "bucket_range",
    "expand_topic",
    "make_payload",
    "merged",
    "parse_expect",
    "read_payload",
    "subscription_filter",
    "summary",
]


def make_payload(size: int, sent_ns: int, publisher: int, seq: int) -> bytes:
    """One payload of `max(size, HEADER_SIZE)` bytes."""
    return HEADER.pack(sent_ns, publisher, seq) + PAD_BYTE * (size - HEADER_SIZE)


def read_payload(payload: bytes | memoryview) -> tuple[int, int, int] | None:
    """(sent_ns, publisher, seq) of a bench payload, or None for a payload too short to be one."""
    if len(payload) < HEADER_SIZE:
        return None
    return HEADER.unpack_from(payload)


@dataclass
class Histogram:
    """Latency counts by bucket (benchwire.bucket_of), with the exact minimum, maximum and sum."""

    counts: dict[int, int] = field(default_factory=dict)
    total: int = 0
    min_us: int | None = None
    max_us: int = 0
    sum_us: int = 0

    def record(self, us: int) -> None:
        if us < 0:
            us = 0
        b = bucket_of(us)
        counts = self.counts
        counts[b] = counts.get(b, 0) + 1
        self.total += 1
        self.sum_us += us
        if us > self.max_us:
            self.max_us = us
        if self.min_us is None or us < self.min_us:
            self.min_us = us

    def absorb(self, latencies: Latencies) -> None:
        """Adds what `latencies` counted since it was last taken (and takes it)."""
        if not latencies.total:
            return
        self.total += latencies.total
        self.sum_us += latencies.sum_us
        self.max_us = max(self.max_us, latencies.max_us)
        if self.min_us is None or latencies.min_us < self.min_us:
            self.min_us = latencies.min_us
        counts = self.counts
        for b, n in latencies.take():
            counts[b] = counts.get(b, 0) + n

    def merge(self, other: Histogram) -> None:
        for b, n in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + n
        self.total += other.total
        self.sum_us += other.sum_us
        self.max_us = max(self.max_us, other.max_us)
        if other.min_us is not None and (self.min_us is None or other.min_us < self.min_us):
            self.min_us = other.min_us

    def percentile(self, p: float) -> int | None:
        """Nearest-rank percentile: the highest value of the bucket holding that rank (capped at the exact
        maximum), as HdrHistogram reports it; None when empty."""
        if not self.total:
            return None
        rank = max(1, -(-self.total * p // 100))  # ceil
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(bucket_range(b)[1], self.max_us)
        return self.max_us

    def buckets(self) -> Iterator[tuple[int, int, int]]:
        """(low_us, high_us, count) of each non-empty bucket, in order."""
        for b in sorted(self.counts):
            low, high = bucket_range(b)
            yield low, high, self.counts[b]


class Clock(Enum):
    """Where the receive times of latency samples came from."""

    KERNEL = "kernel"  # the kernel's arrival timestamp of the segment (SO_TIMESTAMPNS)
    USER = "user"  # the wall clock read when recv() returned


class ErrorKind(Enum):
    UNREACHABLE = "unreachable"  # refused, unreachable, DNS: no TCP connection
    TIMEOUT = "timeout"  # no CONNACK in time
    TLS = "tls"
    REFUSED = "refused"  # CONNACK with a failure code
    SUBSCRIBE_REFUSED = "subscribe_refused"
    DROPPED = "dropped"  # the broker closed a connected client during the run
    PROTOCOL = "protocol"  # something we could not parse


@dataclass
class Figures:
    """The counts of a run (or of one worker's part of it). Times are absolute nanoseconds; merged exactly."""

    pubs: int = 0  # publishers asked for
    subs: int = 0  # subscribers asked for
    conns: int = 0  # plain connections asked for (conn)
    connected: int = 0
    failed: int = 0
    subscribers: int = 0
    sent: int = 0  # PUBLISH packets written
    acked: int = 0  # PUBACK (QoS 1) / PUBCOMP (QoS 2) received; equals sent at QoS 0
    delivered: int = 0  # PUBLISH packets the subscribers received, duplicates included
    distinct: int = 0  # distinct (subscriber, publisher, seq) received
    dups: int = 0
    reordered: int = 0
    foreign: int = 0  # deliveries without a bench payload
    kernel_samples: int = 0  # latency samples whose receive time is the kernel's (the rest: the user clock's)
    gen_cpu_ns: int = 0  # the bench's own time on a CPU while publishing and receiving (all its processes)
    gen_wait_ns: int = 0  # ... and runnable, waiting for a CPU (Linux schedstat; 0 elsewhere)
    broker_cpu_ns: int | None = None  # the same for the broker, over the same span (--broker-pid)
    broker_wait_ns: int | None = None
    errors: dict[str, int] = field(default_factory=dict)
    latency: Histogram = field(default_factory=Histogram)
    first_connect_ns: int | None = None
    last_connack_ns: int | None = None
    pub_end_ns: int | None = None
    last_delivery_ns: int | None = None

    def error(self, kind: ErrorKind, n: int = 1) -> None:
        self.errors[kind.value] = self.errors.get(kind.value, 0) + n

    def merge(self, other: Figures) -> None:
        for name in _ADDED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.latency.merge(other.latency)
        self.first_connect_ns = _pick(min, self.first_connect_ns, other.first_connect_ns)
        for name in ("last_connack_ns", "pub_end_ns", "last_delivery_ns", "broker_cpu_ns", "broker_wait_ns"):
            setattr(self, name, _pick(max, getattr(self, name), getattr(other, name)))


_ADDED = ("pubs", "subs", "conns", "connected", "failed", "subscribers", "sent", "acked", "delivered", "distinct",
          "dups", "reordered", "foreign", "kernel_samples", "gen_cpu_ns", "gen_wait_ns")  # fmt: skip


def _pick(fn: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return fn(a, b)


def merged(parts: Iterable[Figures]) -> Figures:
    out = Figures()
    for part in parts:
        out.merge(part)
    return out


def summary(f: Figures, start_ns: int | None, *, histogram: bool = True) -> dict[str, object]:
    """Every figure of a run as a flat JSON-ready mapping, named as the C load generator mqttload names them
    where they mean the same; `start_ns` is when publishing started (all clients connected and subscribed).
    `clients` is what -c asked for: publishers (pub, pubsub), subscribers (sub) or connections (conn); `pubs`
    and `subs` count the two roles apart, as emqtt-bench does."""
    expected = f.sent * f.subscribers
    lost = max(0, expected - f.distinct) if f.subscribers else 0

    def span(end: int | None) -> float:
        return max(0.0, (end - start_ns) / 1e9) if end is not None and start_ns is not None else 0.0

    pub_seconds = span(f.pub_end_ns)
    seconds = span(f.last_delivery_ns) if f.delivered else pub_seconds
    conn_seconds = (
        (f.last_connack_ns - f.first_connect_ns) / 1e9
        if f.last_connack_ns is not None and f.first_connect_ns is not None
        else 0.0
    )
    h = f.latency
    active = max(seconds, pub_seconds)

    def cpu(ns: int | None) -> tuple[float | None, float | None]:
        if ns is None:
            return None, None
        return round(ns / 1e9, 3), round(100 * ns / 1e9 / active, 1) if active else None

    gen_cpu_s, gen_cpu_pct = cpu(f.gen_cpu_ns if f.pubs or f.subs else None)
    broker_cpu_s, broker_cpu_pct = cpu(f.broker_cpu_ns)
    out: dict[str, object] = {
        "clients": (f.pubs or f.conns) or f.subs, "pubs": f.pubs, "subs": f.subs,
        "connected": f.connected, "failed": f.failed, "subscribers": f.subscribers,
        "sent": f.sent, "acked": f.acked, "delivered": f.delivered, "expected": expected, "lost": lost,
        "dups": f.dups, "reordered": f.reordered, "foreign": f.foreign,
        "seconds": round(seconds, 6), "pub_seconds": round(pub_seconds, 6),
        "published_per_s": round(f.sent / pub_seconds, 1) if pub_seconds else 0.0,
        "delivered_per_s": round(f.delivered / seconds, 1) if seconds else 0.0,
        "conn_seconds": round(conn_seconds, 6),
        "conn_per_s": round(f.connected / conn_seconds, 1) if conn_seconds else 0.0,
        "samples": h.total, "min_us": h.min_us, "p50_us": h.percentile(50), "p90_us": h.percentile(90),
        "p99_us": h.percentile(99), "p999_us": h.percentile(99.9), "max_us": h.max_us if h.total else None,
        "mean_us": round(h.sum_us / h.total, 1) if h.total else None,
        "clock": (Clock.KERNEL if f.kernel_samples == h.total else Clock.USER).value if h.total else None,
        "kernel_samples": f.kernel_samples,
        "gen_cpu_s": gen_cpu_s, "gen_cpu_pct": gen_cpu_pct,
        "gen_wait_pct": cpu(f.gen_wait_ns if f.pubs or f.subs else None)[1],
        "broker_cpu_s": broker_cpu_s, "broker_cpu_pct": broker_cpu_pct, "broker_wait_pct": cpu(f.broker_wait_ns)[1],
        "errors": dict(sorted(f.errors.items())),
    }  # fmt: skip
    if histogram:
        out["histogram"] = [[low, high, n] for low, high, n in h.buckets()]
    return out


# --- --expect ---------------------------------------------------------------------------------------------------

_LATENCY = {"p50": "p50_us", "p90": "p90_us", "p99": "p99_us", "p999": "p999_us", "max": "max_us", "min": "min_us",
            "mean": "mean_us"}  # fmt: skip
_ALIASES = {"loss": "lost", "dup": "dups", "duplicates": "dups"}
_UNITS = {"us": 1, "ms": 1000, "s": 1_000_000}
_COND = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|==|=|<|>)\s*([0-9.]+)\s*(us|ms|s|%)?\s*$")


@dataclass(frozen=True)
class Condition:
    text: str
    key: str  # a key of summary()
    op: str
    value: float
    percent_of: str | None = None  # "lost" with %: a share of `expected`

    def check(self, figures: Mapping[str, object]) -> bool:
        raw = figures.get(self.key)
        if not isinstance(raw, int | float):
            return False  # no sample (None: e.g. no latency measured): the condition cannot hold
        actual = float(raw)
        if self.percent_of is not None:
            of = figures.get(self.percent_of)
            base = float(of) if isinstance(of, int | float) else 0.0
            actual = 100.0 * actual / base if base else 0.0
        return {"<": actual < self.value, "<=": actual <= self.value, ">": actual > self.value,
                ">=": actual >= self.value, "=": actual == self.value, "==": actual == self.value}[self.op]  # fmt: skip


def parse_expect(text: str, known: Iterable[str]) -> list[Condition]:
    """`loss=0,p99<5ms,delivered_per_s>=1000` -> conditions; ValueError says which part is wrong."""
    names = set(known)
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _COND.match(part.lower())
        if not m:
            raise ValueError(f"{part.strip()!r}: expected NAME OP VALUE, e.g. loss=0 or p99<5ms")
        name, op, number, unit = m.groups()
        value = float(number)
        key = _LATENCY.get(name, _ALIASES.get(name, name))
        if key.endswith("_us"):
            value *= _UNITS.get(unit or "us", 0) if unit != "%" else 0
            if unit == "%":
                raise ValueError(f"{part.strip()!r}: a latency takes us, ms or s")
        elif unit in ("us", "ms", "s"):
            raise ValueError(f"{part.strip()!r}: {name} is not a latency; no unit")
        if key not in names:
            raise ValueError(f"{part.strip()!r}: unknown figure {name!r}")
        percent_of = None
        if unit == "%":
            if key not in ("lost", "dups", "reordered"):
                raise ValueError(f"{part.strip()!r}: % only for loss, dups and reordered")
            percent_of = "expected"
        out.append(Condition(part.strip(), key, op, value, percent_of))
    if not out:
        raise ValueError("no condition")
    return out


# --- topics ---------------------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"%[icu]")


def expand_topic(template: str, number: int, client_id: str, username: str | None) -> str:
    """-t with %i (client number), %c (client id), %u (user name) replaced."""
    return _PLACEHOLDER.sub(lambda m: {"%i": str(number), "%c": client_id, "%u": username or ""}[m.group()], template)


def subscription_filter(template: str) -> str:
    """The filter that matches every publisher's topic: each level holding a placeholder becomes '+'."""
    return "/".join("+" if _PLACEHOLDER.search(level) else level for level in template.split("/"))
