"""Store.load's frozen retained messages (core/packed.py: PackedRetained) against what was committed: a real
SQLite file written by one Store and read by another, every property a retained message can carry."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.packed import PackedRetained
from mqtt_cli.core.persistence import RetainedSet
from mqtt_cli.core.session import Message
from mqtt_cli.net.store import Store
from tests.core.test_packed import PROPERTY_KINDS


def test_retained_messages_come_back_frozen_and_thaw_to_what_was_stored(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 100.0)
    messages = [
        Message(f"r/{kind}/ü", f"payload {kind}".encode(), i % 3, True, props, "pub" if i % 2 else None, 90.0 + i)
        for i, (kind, props) in enumerate(PROPERTY_KINDS.items())
    ]
    gone = Message("r/gone", b"x", 1, True, PROPERTY_KINDS["expiry"], "pub", 100.0 - 61)  # 60 s: expired
    store.commit([RetainedSet(m) for m in [*messages, gone]])
    store.close()

    again, restored = Store.open(path, SyncMode.normal, 100.0)
    again.close()
    packed = restored.retained
    assert isinstance(packed, PackedRetained)
    by_topic = {packed.topic(f): packed.thaw(f) for f in packed.frozen}
    assert sorted(by_topic) == sorted(m.topic for m in messages)  # the expired one is not restored
    for m in messages:
        t = by_topic[m.topic]
        assert (t.topic, t.payload, t.qos, t.retain, t.properties, t.origin) == (
            m.topic, m.payload, m.qos, True, m.properties, m.origin)  # fmt: skip
        # Through the wall clock and back: the same instant, to the clock's rounding.
        assert t.received_at == pytest.approx(m.received_at, abs=0.5)
        assert (t.expires_at is None) == (m.expires_at is None)
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT count(*) FROM retained WHERE topic = 'r/gone'").fetchone() == (0,)
    finally:
        db.close()
