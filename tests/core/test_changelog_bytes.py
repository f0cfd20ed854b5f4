"""core/changelog.py writes the bytes schema 5 wrote: its encoder, made cheaper, against the one it replaced.

The log is on disk (a killed broker's file is replayed by the next version), so the encoding may not move: the
encoder of 2026-11-27 is kept here, verbatim but for names, as the reference, and the current `encode` and
`LogState.log` must give its bytes, record for record, for a table of changes and for generated ones.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt_cli.core.changelog import Logged, LogState, decode, encode
from mqtt_cli.core.persistence import (
    Change,
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    RetainedCleared,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
)
from mqtt_cli.core.properties import encode_properties
from mqtt_cli.core.session import Message
from tests.core.test_packed import PROPERTY_KINDS

# --- the reference: schema 5's encoder as first written ----------------------------------------------------------

_A = struct.Struct("<BqdBBBHHHIIH")
_AS = struct.Struct("<BqdBBBHHHIIHH")


def _ref_encode(changes: list[Logged], offset: float) -> bytes:
    parts: list[bytes] = []
    names: dict[str, bytes] = {}
    for c in changes:
        _ref_put(parts, c, names, offset)
    return b"".join(parts)


def _ref_put(parts: list[bytes], c: Logged, names: dict[str, bytes], offset: float) -> None:
    if type(c) is DeliveryReleased:
        parts.append(bytes((9,)))
        parts.append(c.row.to_bytes(8, "little", signed=True))
        return
    if type(c) is DeliveryDone:
        parts.append(bytes((10,)))
        parts.append(c.row.to_bytes(8, "little", signed=True))
        return
    if type(c) is DeliverySent:
        parts.append(bytes((8,)))
        parts.append(c.row.to_bytes(8, "little", signed=True))
        parts.append(c.packet_id.to_bytes(2, "little"))
        return
    cid = names.get(c.client_id)
    if cid is None:
        cid = names[c.client_id] = c.client_id.encode()
    if type(c) is DeliveryAdded:
        _ref_put_added(parts, c, cid, names, offset, -1)
        return
    if type(c) is IncomingAdded or type(c) is IncomingReleased:
        parts.append(bytes((5,)) if type(c) is IncomingAdded else bytes((6,)))
        parts.append(c.packet_id.to_bytes(2, "little"))
        parts.append(len(cid).to_bytes(2, "little"))
        parts.append(cid)


def _ref_put_added(
    parts: list[bytes], c: DeliveryAdded, cid: bytes, names: dict[str, bytes], offset: float, packet_id: int
) -> None:
    m = c.message
    topic = names.get(m.topic)
    if topic is None:
        topic = names[m.topic] = m.topic.encode()
    flags = (1 if m.retain else 0) | (2 if c.retain else 0)
    origin = b""
    if m.origin is not None:
        flags |= 4
        known = names.get(m.origin)
        origin = names[m.origin] = m.origin.encode() if known is None else known
    props = encode_properties(m.properties, 3) if m.properties.items else b""
    sids = c.subscription_ids
    if packet_id < 0:
        parts.append(_A.pack(1, c.row, m.received_at + offset, m.qos, flags, c.qos, len(cid), len(topic),
                             len(origin), len(props), len(m.payload), len(sids)))  # fmt: skip
    else:
        parts.append(_AS.pack(7, c.row, m.received_at + offset, m.qos, flags, c.qos, len(cid),
                              len(topic), len(origin), len(props), len(m.payload), len(sids), packet_id))  # fmt: skip
    parts.append(cid)
    parts.append(topic)
    parts.append(origin)
    parts.append(props)
    parts.append(m.payload)
    if sids:
        parts.append(struct.pack(f"<{len(sids)}I", *sids))


def _ref_log(changes: list[Change], start: int, offset: float) -> tuple[int, bytes]:
    """LogState.log's segment end and bytes (the state aside)."""
    parts: list[bytes] = []
    names: dict[str, bytes] = {}
    queued: dict[int, DeliveryAdded] = {}
    sent: set[int] | None = None
    n = len(changes)
    i = start
    while i < n:
        c = changes[i]
        if type(c) is SessionRemoved:
            break
        i += 1
        if type(c) is RetainedSet or type(c) is RetainedCleared or type(c) is SessionSaved:
            continue
        if type(c) is DeliveryAdded:
            row = c.row
            pid = -1
            after = changes[i] if i < n else None
            if type(after) is DeliverySent and after.row == row:
                pid = after.packet_id
                i += 1
            else:
                if sent is None:
                    sent = {d.row for d in changes if type(d) is DeliverySent}
                if row not in sent:
                    queued[row] = c
                    continue
            cid = names.get(c.client_id)
            if cid is None:
                cid = names[c.client_id] = c.client_id.encode()
            _ref_put_added(parts, c, cid, names, offset, pid)
            continue
        if type(c) is DeliveryDone and c.row in queued:
            del queued[c.row]
            continue
        _ref_put(parts, c, names, offset)  # type: ignore[arg-type]
    return i, b"".join(parts)


# --- the table -----------------------------------------------------------------------------------------------------


def _message(i: int, origin: str | None = "pub") -> Message:
    props = list(PROPERTY_KINDS.values())[i % len(PROPERTY_KINDS)]
    return Message(f"t/ü/{i % 3}", b"\x00p\xff" * (i % 5), i % 3, bool(i % 2), props, origin, 10.25 * i - 7)


def _table() -> list[Change]:
    """Every record kind, the rows and identifiers at their limits, strings shared and not, empty and not ASCII."""
    out: list[Change] = []
    rows = [0, 1, 255, 256, 65535, 1 << 31, (1 << 54) - 1, 1 << 54, (1 << 62) - 1, 1 << 62, (1 << 63) - 1]
    rows += [-1, -(1 << 63)]
    origins: list[str | None] = [None, "pub", "", "pübé", "pub"]
    for i, row in enumerate(rows):
        client = ["c", "", "clïent-é", "c" * 300][i % 4]
        pid = [1, 255, 256, 65535, 0][i % 5]
        sids = tuple(range(i % 4)) + ((1 << 32) - 1,) * (i % 2)
        out.append(DeliveryAdded(client, row, _message(i, origins[i % 5]), 2 - i % 3, bool(i % 2), sids))
        if i % 3 == 0:
            out.append(DeliverySent(client, row, pid))  # sent at once: one record
        out += [IncomingAdded(client, pid), DeliverySent(client, row, pid ^ 1), DeliveryReleased(client, row)]
        out += [IncomingReleased(client, pid), DeliveryDone(client, row)]
    out += [
        DeliveryAdded("q", 5000, _message(1), 1, False, ()),  # queued: its table
        DeliveryAdded("q", 5001, _message(2), 1, False, ()),
        DeliveryDone("q", 5001),  # queued and done: nowhere
        DeliveryDone("q", 5002),  # a table row's
        RetainedSet(_message(3)),
        RetainedCleared("t/x"),
        DeliveryAdded("s", 5003, _message(4), 2, True, (7,)),
        IncomingAdded("s", 9),
        DeliverySent("s", 5003, 17),  # sent later in the group: logged, then its own record
        DeliveryReleased("s", 1 << 60),
        DeliveryDone("s", -5),
    ]
    return out


def _logged(changes: list[Change]) -> list[Logged]:
    kinds = (DeliveryAdded, DeliverySent, DeliveryReleased, DeliveryDone, IncomingAdded, IncomingReleased)
    return [c for c in changes if isinstance(c, kinds)]


_GOLDEN = (
    "0701000000000000000000000000001cc000040201000600030000000000000000000000010063742fc3bc2f30"
    "7075620901000000000000000a0100000000000000050100010063060100010063"
)


def test_the_encoding_is_schema_5s() -> None:
    """The reference itself pinned: an added-and-sent delivery, released, done, an identifier in and out."""
    changes: list[Change] = [
        DeliveryAdded("c", 1, Message("t/ü/0", b"", 0, False, PROPERTY_KINDS["none"], "pub", -7.0), 2, False, ()),
        DeliverySent("c", 1, 1),
        DeliveryReleased("c", 1),
        DeliveryDone("c", 1),
        IncomingAdded("c", 1),
        IncomingReleased("c", 1),
    ]
    assert _ref_log(changes, 0, 0.0) == (6, bytes.fromhex(_GOLDEN))
    assert LogState().log(changes, 0, 0.0).data == bytes.fromhex(_GOLDEN)


def test_encode_writes_the_bytes_of_the_reference_record_for_record() -> None:
    records = _logged(_table())
    for c in records:
        assert encode([c], 1000.5) == _ref_encode([c], 1000.5), c
    assert encode(records, -3.0) == _ref_encode(records, -3.0)
    assert len(decode(encode(records, 0.0), 0.0)) == len(records)


def test_log_writes_the_bytes_of_the_reference_segment_by_segment() -> None:
    table = _table()
    changes: list[Change] = [*table[:20], SessionRemoved("c"), *table[20:], SessionRemoved("q")]
    state = LogState()
    start = 0
    while start <= len(changes):
        segment = state.log(changes, start, 250.0)
        assert (segment.end, segment.data) == _ref_log(changes, start, 250.0)
        start = segment.end + 1


_clients = st.sampled_from(["c", "", "dé", "x" * 70])


@st.composite
def _groups(draw: st.DrawFn) -> list[Change]:
    out: list[Change] = []
    for _ in range(draw(st.integers(0, 30))):
        client = draw(_clients)
        row = draw(st.one_of(st.integers(0, 100), st.integers(-(1 << 63), (1 << 63) - 1)))
        pid = draw(st.integers(0, 65535))
        kind = draw(st.integers(0, 7))
        if kind <= 1:
            message = _message(draw(st.integers(0, 50)), draw(st.sampled_from([None, "pub", "dé"])))
            sids = tuple(draw(st.lists(st.integers(0, (1 << 32) - 1), max_size=3)))
            out.append(DeliveryAdded(client, row, message, draw(st.integers(0, 2)), draw(st.booleans()), sids))
            if kind == 1:
                out.append(DeliverySent(client, row, pid))
        else:
            out.append(
                [
                    DeliverySent(client, row, pid),
                    DeliveryReleased(client, row),
                    DeliveryDone(client, row),
                    IncomingAdded(client, pid),
                    IncomingReleased(client, pid),
                    SessionRemoved(client),
                ][kind - 2]
            )
    return out


def _net(state: LogState) -> tuple[object, ...]:
    return (state.added.keys(), state.packet_ids, state.released, state.done, state.incoming)


@settings(max_examples=300, deadline=None)
@given(_groups(), st.floats(-1e9, 1e9))
def test_generated_groups_encode_as_the_reference_did(changes: list[Change], offset: float) -> None:
    assert encode(_logged(changes), offset) == _ref_encode(_logged(changes), offset)
    state = LogState()
    start = 0
    while start <= len(changes):
        segment = state.log(changes, start, offset)
        assert (segment.end, segment.data) == _ref_log(changes, start, offset)
        replayed = LogState()  # what the store makes of the row after a kill: what `log` made of the changes
        for c in decode(segment.data, offset):
            replayed.apply(c)
        assert _net(replayed) == _net(state)
        state.clear()  # (the store folds before a SessionRemoved)
        start = segment.end + 1
