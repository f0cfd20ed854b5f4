"""Store.commit's grouping: what a commit leaves on file (once its log is folded into the tables) is what its
changes, written one by one, would leave."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.persistence import (
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    SessionRemoved,
    SessionSaved,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.session import Message
from mqtt_cli.net.store import Store


def _added(client: str, row: int) -> DeliveryAdded:
    message = Message("t", b"p%d" % row, 2, False, EMPTY_PROPERTIES, "pub", 1.0)
    return DeliveryAdded(client, row, message, 2, False, ())


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_a_group_leaves_the_file_as_its_changes_in_order_would(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    session = SessionSaved("c", 4, 0xFFFFFFFF, None, ())
    store.commit([session, _added("c", 1), DeliverySent("c", 1, 7)])
    store.commit([
        DeliveryReleased("c", 1),
        _added("c", 2), DeliverySent("c", 2, 8), DeliveryDone("c", 2),  # added and done within: never written
        _added("c", 3), DeliverySent("c", 3, 9), DeliverySent("c", 3, 10),  # the later identifier stays
        IncomingAdded("c", 5), IncomingReleased("c", 5), IncomingAdded("c", 5),  # identifier used again: kept
        IncomingAdded("c", 6), IncomingReleased("c", 6),
        SessionRemoved("d"), SessionSaved("d", 4, 0xFFFFFFFF, None, ()), _added("d", 4),  # after the barrier
    ])  # fmt: skip
    store.fold()
    assert _rows(path, "SELECT row, client_id, packet_id, released FROM deliveries ORDER BY row") == [
        (1, "c", 7, 1), (3, "c", 10, 0), (4, "d", None, 0),
    ]  # fmt: skip
    assert _rows(path, "SELECT client_id, packet_id FROM incoming") == [("c", 5)]
    store.commit([DeliveryDone("c", 1), SessionRemoved("d"), _added("d", 5)])
    store.fold()
    # The removal applies to what came before it, not to the delivery after it.
    assert _rows(path, "SELECT row, client_id FROM deliveries ORDER BY row") == [(3, "c"), (5, "d")]
    store.close()


def test_a_delivery_sent_in_the_group_that_adds_it_is_written_once_with_its_identifier(tmp_path: Path) -> None:
    """The identifier goes with the row while it is unwritten; after a barrier wrote it, as an update."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([
        SessionSaved("c", 4, 0xFFFFFFFF, None, ()),
        _added("c", 1), DeliverySent("c", 1, 7),  # folded
        _added("c", 2), SessionRemoved("z"), DeliverySent("c", 2, 8),  # row 2 written by the barrier: updated
        _added("c", 3),  # not sent yet
    ])  # fmt: skip
    store.commit([DeliverySent("c", 3, 9)])
    store.fold()
    assert _rows(path, "SELECT row, packet_id FROM deliveries ORDER BY row") == [(1, 7), (2, 8), (3, 9)]
    store.close()
