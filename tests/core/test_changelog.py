"""core/changelog.py: a commit's per-message records as one log row, decoded back to what was encoded."""

from __future__ import annotations

import pytest

from mqtt_cli.core.changelog import Logged, LogUnreadable, decode, encode
from mqtt_cli.core.persistence import (
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
)
from mqtt_cli.core.session import Message
from tests.core.test_packed import PROPERTY_KINDS

_FIELDS = ("topic", "payload", "qos", "retain", "properties", "origin", "received_at", "expires_at")


def _records() -> list[Logged]:
    out: list[Logged] = []
    for i, props in enumerate(PROPERTY_KINDS.values()):
        origin = (None, "pub", "")[i % 3]  # the broker itself, a client, an empty client id
        message = Message(f"t/ü/{i}", b"\x00p\xff" * i, i % 3, bool(i % 2), props, origin, 10.5 + i)
        out.append(DeliveryAdded(f"client-é{i % 2}", 1000 + i, message, 2 - i % 3, not i % 2, tuple(range(i))))
    out += [
        DeliverySent("client-é0", 1000, 65535),
        DeliveryReleased("client-é0", 1000),
        DeliveryDone("client-é1", 1 << 40),
        IncomingAdded("pub", 1),
        IncomingReleased("pub", 65535),
        DeliveryAdded("c", 7, Message("x", b"y" * 70_000, 1, False, PROPERTY_KINDS["none"], "p", -3.0), 1, False, ()),
    ]
    return out


def _comparable(c: Logged) -> tuple[object, ...]:
    if type(c) is DeliveryAdded:
        m = c.message
        return (c.client_id, c.row, c.qos, c.retain, c.subscription_ids, *(getattr(m, f) for f in _FIELDS))
    return (type(c), c)


def test_decode_gives_back_what_was_encoded_through_the_wall_clock() -> None:
    records = _records()
    data = encode(records, 1000.0)
    back = decode(data, 1000.0)
    assert [type(c) for c in back] == [type(c) for c in records]
    assert [_comparable(c) for c in back] == [_comparable(c) for c in records]
    moved = decode(data, 990.0)[0]  # read by a broker whose clock started 10 s later
    assert type(moved) is DeliveryAdded and moved.message.received_at == records[0].message.received_at + 10  # type: ignore[union-attr]


def test_an_empty_group_is_an_empty_row() -> None:
    assert encode([], 0.0) == b""
    assert decode(b"", 0.0) == []


@pytest.mark.parametrize("cut", [1, 5, 20, -1])
def test_a_truncated_row_is_unreadable(cut: int) -> None:
    data = encode(_records(), 0.0)
    with pytest.raises(LogUnreadable):
        decode(data[:cut], 0.0)


def test_garbage_is_unreadable() -> None:
    with pytest.raises(LogUnreadable, match="unknown record tag 99"):
        decode(b"\x63garbage", 0.0)
    with pytest.raises(LogUnreadable):
        decode(encode([IncomingAdded("c", 1)], 0.0) + b"\x02", 0.0)
