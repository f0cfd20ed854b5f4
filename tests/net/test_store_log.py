"""The store's log: a commit's per-message records as one frame of the change file (schema 6; a row of the `log`
table in schemas 4 and 5), folded into the tables lazily. Files copied while their store is open are what a killed
broker leaves: opened, they restore exactly what was committed."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mqtt_cli.core.changelog import LogState, encode
from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.persistence import (
    Change,
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties
from mqtt_cli.core.session import Message
from mqtt_cli.net.changefile import Tag, changes_path, read
from mqtt_cli.net.store import SCHEMA_VERSION, Store, StoreError

_FOREVER = 0xFFFFFFFF


def _added(client: str, row: int, qos: int = 2) -> DeliveryAdded:
    props = Properties(user_properties=[("row", str(row))]) if row % 3 == 0 else EMPTY_PROPERTIES
    message = Message(f"t/{row % 4}", b"p%d" % row, qos, False, props, "pub", 1.0)
    return DeliveryAdded(client, row, message, qos, row % 2 == 0, (row % 3,) if row % 3 else ())


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _frames(path: Path) -> int:
    """Frames the change file holds for the database (as far as its tables say)."""
    (tag,) = _rows(path, "SELECT file_id, generation FROM change_file")
    written = read(changes_path(path), Tag(*tag))  # type: ignore[arg-type]
    assert written.damage is None
    return len(written.bodies)


def _killed(path: Path, into: Path) -> Path:
    """The files as a SIGKILL would leave them now: the database, its WAL and the change file, the store still
    open."""
    into.mkdir(exist_ok=True)
    for suffix in ("", "-wal", "-changes"):
        source = path.with_name(path.name + suffix)
        if source.exists():
            shutil.copyfile(source, into / (path.name + suffix))
    return into / path.name


def _killed_with_a_session(tmp_path: Path) -> Path:
    """A file holding session "c", as a kill would leave it."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    killed = _killed(path, tmp_path / "killed")
    store.close()
    return killed


def _deliveries(path: Path) -> list[tuple[object, ...]]:
    return _rows(path, "SELECT row, client_id, packet_id, released FROM deliveries ORDER BY row")


def _incoming(path: Path) -> list[tuple[object, ...]]:
    return _rows(path, "SELECT client_id, packet_id FROM incoming ORDER BY client_id, packet_id")


def test_a_qos2_flow_over_three_commits_never_reaches_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("sub", 4, _FOREVER, None, ()), SessionSaved("pub", 4, _FOREVER, None, ())])
    store.commit([_added("sub", 1), DeliverySent("sub", 1, 5), IncomingAdded("pub", 9)])
    store.commit([DeliveryReleased("sub", 1), IncomingReleased("pub", 9)])
    assert _frames(path) == 2  # one frame a commit
    store.commit([DeliveryDone("sub", 1)])
    assert _deliveries(path) == [] and _incoming(path) == []  # nothing written to the tables so far
    replayed, restored = Store.open(_killed(path, tmp_path / "killed"), SyncMode.normal, 0.0)
    replayed.close()
    assert all(not s.deliveries and not s.incoming and not s.queued for s in restored.sessions)
    store.fold()
    assert _frames(path) == 0
    assert _deliveries(path) == [] and _incoming(path) == []
    store.close()
    assert not changes_path(path).exists()  # a clean stop leaves the database alone


def test_the_log_is_folded_once_it_passes_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.LOG_MAX_BYTES = 200
    store.commit([SessionSaved("sub", 4, _FOREVER, None, ())])
    store.commit([_added("sub", 1), DeliverySent("sub", 1, 1)])
    assert _frames(path) == 1 and _deliveries(path) == []
    store.commit([_added("sub", row) for row in range(2, 12)] + [DeliverySent("sub", row, row) for row in range(2, 12)])
    assert _frames(path) == 0  # folded with this group's records, the file started again
    assert _deliveries(path) == [(row, "sub", row, 0) for row in range(1, 12)]
    store.commit([DeliveryDone("sub", 1), DeliveryReleased("sub", 2)])  # updates of rows on the tables: logged
    assert _deliveries(path)[:2] == [(1, "sub", 1, 0), (2, "sub", 2, 0)]
    store.close()  # folds
    assert _deliveries(path)[:1] == [(2, "sub", 2, 1)]
    assert not changes_path(path).exists()


def test_a_queued_delivery_goes_straight_to_its_table(tmp_path: Path) -> None:
    """Not sent in its commit (an offline client): likely to stay, so not through the log (its payload once)."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("off", 4, _FOREVER, None, ()), _added("off", 1, qos=1), _added("off", 2)])
    assert _deliveries(path) == [(1, "off", None, 0), (2, "off", None, 0)]
    assert _frames(path) == 0
    store.commit([DeliverySent("off", 1, 3), DeliveryDone("off", 2)])  # the client is back
    assert _deliveries(path) == [(1, "off", None, 0), (2, "off", None, 0)]  # in the log
    killed = _killed(path, tmp_path / "killed")
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.close()
    (session,) = restored.sessions
    assert [(d.row, d.packet_id) for d in session.deliveries] == [(1, 3)] and not session.queued
    assert _deliveries(killed) == [(1, "off", 3, 0)]
    store.close()


def test_session_removed_applies_to_the_log_before_it_not_to_what_follows(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ()), SessionSaved("d", 4, _FOREVER, None, ())])
    store.commit(
        [_added("c", 1), DeliverySent("c", 1, 1), IncomingAdded("c", 4), _added("d", 2), DeliverySent("d", 2, 2)]
    )
    store.commit([
        _added("c", 3), DeliverySent("c", 3, 3), IncomingAdded("c", 5),  # in this group, before the removal
        SessionRemoved("c"),
        SessionSaved("c", 4, _FOREVER, None, ()),
        _added("c", 4), DeliverySent("c", 4, 1), IncomingAdded("c", 4),  # the new session's: kept
        DeliveryReleased("d", 2),
    ])  # fmt: skip
    # One transaction: what came before the removal folded, then deleted; what follows folded too (a group that
    # writes the tables takes the log with it).
    assert _deliveries(path) == [(2, "d", 2, 1), (4, "c", 1, 0)] and _frames(path) == 0
    killed = _killed(path, tmp_path / "killed")
    Store.open(killed, SyncMode.normal, 0.0)[0].close()
    assert _deliveries(killed) == [(2, "d", 2, 1), (4, "c", 1, 0)]
    assert _incoming(killed) == [("c", 4)]
    store.close()
    assert _deliveries(path) == [(2, "d", 2, 1), (4, "c", 1, 0)] and _incoming(path) == [("c", 4)]


def _version_5(path: Path, log_rows: list[bytes]) -> None:
    """`path` made what a version 5 broker killed with `log_rows` in its log would have left."""
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE change_file")
        db.executemany("INSERT INTO log (data) VALUES (?)", [(r,) for r in log_rows])
        db.execute("UPDATE schema_version SET version = 5")
    changes_path(path).unlink(missing_ok=True)


def test_a_group_for_the_tables_is_one_transaction_with_its_records_and_the_log(tmp_path: Path) -> None:
    """A QoS 2 PUBLISH queued for an offline session and its incoming identifier, in one group: on file together or
    not at all (the delivery without the identifier would be delivered again when the publisher re-sends it)."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("off", 4, _FOREVER, None, ()), SessionSaved("pub", 4, _FOREVER, None, ())])
    store.commit([IncomingAdded("pub", 1), _added("on", 1), DeliverySent("on", 1, 1)])  # a frame
    assert _frames(path) == 1
    store.commit([IncomingAdded("pub", 2), _added("off", 2)])  # queued: the tables
    assert _frames(path) == 0  # the frame's records folded in the same transaction, the file started again
    assert _deliveries(path) == [(1, "on", 1, 0), (2, "off", None, 0)]
    assert _incoming(path) == [("pub", 1), ("pub", 2)]
    store.close()


def test_a_group_with_no_records_leaves_the_change_file_as_it_is(tmp_path: Path) -> None:
    """A retained message or a session saved: its transaction needs nothing of the log (no fold, no fsync of a new
    change file with `synchronous = full`); the frames before it stay where they are, and both restore."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    store.commit([_added("c", 1), DeliverySent("c", 1, 1)])
    retained = Message("r", b"kept", 1, True, EMPTY_PROPERTIES, "pub", 1.0)
    store.commit([RetainedSet(retained), SessionSaved("d", 4, _FOREVER, None, ())])
    assert _frames(path) == 1 and _deliveries(path) == []
    again, restored = Store.open(_killed(path, tmp_path / "killed"), SyncMode.normal, 0.0)
    again.close()
    assert sorted(s.client_id for s in restored.sessions) == ["c", "d"] and len(restored.retained) == 1
    assert [d.row for s in restored.sessions for d in s.deliveries] == [1]
    store.close()


def test_a_log_row_that_does_not_decode_moves_the_file_aside(tmp_path: Path) -> None:
    killed = _killed_with_a_session(tmp_path)
    row = encode([_added("c", 1)], 0.0)
    _version_5(killed, [row[:-1]])  # a truncated row
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.close()
    assert again.warning is not None and "log row" in again.warning and "moved to" in again.warning
    assert restored.sessions == []
    (aside,) = [
        p for p in killed.parent.iterdir() if ".unreadable-" in p.name and not p.name.endswith(("-wal", "-shm"))
    ]
    assert _rows(aside, "SELECT count(*) FROM log") == [(1,)]  # kept as it was, for whoever looks


def test_a_change_file_damaged_part_way_restores_what_came_before_and_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    store.commit([_added("c", 1), DeliverySent("c", 1, 1)])
    store.commit([_added("c", 2), DeliverySent("c", 2, 2)])
    store.commit([_added("c", 3), DeliverySent("c", 3, 3)])
    killed = _killed(path, tmp_path / "killed")
    store.close()
    changes = changes_path(killed)
    data = bytearray(changes.read_bytes())
    third = len(data) - 20  # inside the last frame's body
    data[third] ^= 0xFF
    changes.write_bytes(bytes(data))
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.close()
    assert again.warning is not None and "damaged" in again.warning and "moved to" in again.warning
    (session,) = restored.sessions
    assert [d.row for d in session.deliveries] == [1, 2]  # the frames before the damage
    (aside,) = [p for p in killed.parent.iterdir() if p.name.startswith("p.db-changes.unreadable-")]
    assert aside.read_bytes() == bytes(data)  # kept as it was, for whoever looks


def test_a_frame_cut_short_by_a_kill_is_left_out_quietly(tmp_path: Path) -> None:
    """The last write of a process killed while appending: that group was never acknowledged."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    store.commit([_added("c", 1), DeliverySent("c", 1, 1)])
    store.commit([_added("c", 2), DeliverySent("c", 2, 2)])
    killed = _killed(path, tmp_path / "killed")
    store.close()
    changes = changes_path(killed)
    changes.write_bytes(changes.read_bytes()[:-5])
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.commit([_added("c", 3), DeliverySent("c", 3, 3)])  # appended after the cut, not after the torn bytes
    again.close()
    assert again.warning is None
    (session,) = restored.sessions
    assert [d.row for d in session.deliveries] == [1]
    assert _deliveries(killed) == [(1, "c", 1, 0), (3, "c", 3, 0)]


def test_a_change_file_of_another_database_is_not_replayed(tmp_path: Path) -> None:
    """A database deleted by hand and made again: the change file left beside it is not its own."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    store.commit([_added("c", 1), DeliverySent("c", 1, 1)])
    killed = _killed(path, tmp_path / "killed")
    store.close()
    for suffix in ("", "-wal"):
        killed.with_name(killed.name + suffix).unlink(missing_ok=True)
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.close()
    assert again.warning is None and restored.sessions == [] and _deliveries(killed) == []


def test_a_version_3_file_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("off", 4, _FOREVER, None, ()), _added("off", 1), IncomingAdded("off", 3)])
    store.close()
    with sqlite3.connect(path) as db:  # version 3 is version 4 without the log
        db.execute("DROP TABLE log")
        db.execute("DROP TABLE change_file")
        db.execute("UPDATE schema_version SET version = 3")
    again, restored = Store.open(path, SyncMode.normal, 0.0)
    assert again.warning is None
    (session,) = restored.sessions
    assert session.incoming == (3,) and session.queued is not None and len(session.queued) == 1
    again.commit([DeliverySent("off", 1, 7)])  # the log works in the migrated file
    again.close()
    assert _rows(path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION == 6
    assert _deliveries(path) == [(1, "off", 7, 0)]


def test_a_version_4_file_killed_with_its_log_is_migrated_and_replayed(tmp_path: Path) -> None:
    """Version 4 logged a delivery added and sent as two records; version 5 reads those rows as they are."""
    killed = _killed_with_a_session(tmp_path)
    # Version 4's records: a delivery added (as now), then sent, naming its client (tag 2, gone since).
    sent = struct.pack("<BqHH", 2, 1, 7, 1) + b"c"
    old_row = encode([_added("c", 1)], 0.0) + sent + encode([IncomingAdded("c", 3), _added("c", 2)], 0.0)
    _version_5(killed, [old_row])  # what a version 4 broker killed after that commit left
    with sqlite3.connect(killed) as db:
        db.execute("UPDATE schema_version SET version = 4")
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.close()
    assert again.warning is None
    assert _rows(killed, "SELECT version FROM schema_version") == [(6,)]
    assert _deliveries(killed) == [(1, "c", 7, 0), (2, "c", None, 0)] and _incoming(killed) == [("c", 3)]
    (session,) = restored.sessions
    assert session.incoming == (3,)


def test_a_version_5_file_killed_with_its_log_is_migrated_and_replayed(tmp_path: Path) -> None:
    """Version 5 kept the log as rows of its `log` table; version 6 replays them once, then writes frames."""
    killed = _killed_with_a_session(tmp_path)
    # As version 5 wrote them: an incoming identifier; a delivery added and sent as one record, then released.
    first = LogState().log([IncomingAdded("c", 3)], 0, 0.0).data
    second = LogState().log([_added("c", 2), DeliverySent("c", 2, 8), DeliveryReleased("c", 2)], 0, 0.0).data
    assert second[0] == 7  # the merged record
    _version_5(killed, [first, second])
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    assert again.warning is None
    assert _rows(killed, "SELECT version FROM schema_version") == [(6,)]
    assert _rows(killed, "SELECT count(*) FROM log") == [(0,)]  # replayed once, into the tables
    (session,) = restored.sessions
    assert [(d.row, d.packet_id, d.released) for d in session.deliveries] == [(2, 8, True)]
    assert session.incoming == (3,)
    again.commit([DeliveryDone("c", 2)])
    assert _frames(killed) == 1
    again.close()
    assert _deliveries(killed) == [] and _incoming(killed) == [("c", 3)]


def test_a_failed_commit_leaves_the_log_as_it_was_and_is_tried_again(tmp_path: Path) -> None:
    """The transaction is rolled back (a full disk, say): the store's view of the log is read from the files
    again, so the same changes committed again are not counted twice."""
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ()), _added("c", 1), DeliverySent("c", 1, 1)])
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE fail (x)")
        db.execute("INSERT INTO fail VALUES (1)")
        db.execute("CREATE TRIGGER no_queue BEFORE INSERT ON deliveries WHEN EXISTS (SELECT 1 FROM fail) "
                   "BEGIN SELECT RAISE(ABORT, 'disk full, say'); END")  # fmt: skip
    group: list[Change] = [DeliveryDone("c", 1), _added("c", 2), DeliverySent("c", 2, 2), IncomingAdded("c", 8),
                           _added("c", 3)]  # fmt: skip
    with pytest.raises(StoreError, match="disk full, say"):
        store.commit(group)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM fail")
    store.commit(group)
    store.commit([IncomingReleased("c", 8)])
    store.close()
    assert _deliveries(path) == [(2, "c", 2, 0), (3, "c", None, 0)] and _incoming(path) == []


_FILE_SIZE_LIMIT = """
import json, resource, sys
from pathlib import Path
from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.persistence import DeliveryAdded, DeliveryDone, DeliverySent, IncomingAdded, SessionSaved
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.session import Message
from mqtt_cli.net.store import Store, StoreError

path = Path(sys.argv[1])
store, _ = Store.open(path, SyncMode.normal, 0.0)
def added(row):
    return DeliveryAdded("c", row, Message("t", b"x" * 2000, 2, False, EMPTY_PROPERTIES, "pub", 1.0), 2, False, ())
store.commit([SessionSaved("c", 4, 0xFFFFFFFF, None, ())])
store.commit([added(1), DeliverySent("c", 1, 1)])
size = Path(str(path) + "-changes").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, resource.RLIM_INFINITY))  # the next frame does not fit
group = [DeliveryDone("c", 1), added(2), DeliverySent("c", 2, 2), IncomingAdded("c", 5)]
try:
    store.commit(group)
    failed = None
except StoreError as exc:
    failed = str(exc)
after_failure = Path(str(path) + "-changes").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))  # room again
store.commit(group)  # what the server does: the same group, tried again
print(json.dumps({"failed": failed, "size": size, "after_failure": after_failure}))
"""


def test_a_frame_that_cannot_be_written_is_cut_off_and_the_group_tried_again(tmp_path: Path) -> None:
    """A file-size limit on the change file (a full disk): the commit fails with what the file said, the half
    written frame is cut off again, and the group committed again is there once after a kill."""
    path = tmp_path / "p.db"
    done = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMIT, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["failed"] is not None and "-changes" in out["failed"] and "too large" in out["failed"]
    assert out["after_failure"] == out["size"]  # nothing of the failed frame left
    again, restored = Store.open(path, SyncMode.normal, 0.0)
    again.close()
    (session,) = restored.sessions
    assert [(d.row, d.packet_id) for d in session.deliveries] == [(2, 2)] and session.incoming == (5,)


def _random_groups(seed: int, groups: int) -> list[list[Change]]:
    """What a broker might commit: deliveries' lives (queued or sent at once, sent, released, done), incoming QoS 2
    identifiers, sessions removed and made again, cut into groups at random."""
    rng = random.Random(seed)
    clients = ["a", "b", "ü"]
    live: dict[int, tuple[str, bool, bool]] = {}  # row -> client, sent, released
    incoming: set[tuple[str, int]] = set()
    row = 0
    out: list[list[Change]] = [[SessionSaved(c, 4, _FOREVER, None, ()) for c in clients]]
    for _ in range(groups):
        group: list[Change] = []
        for _ in range(rng.randrange(1, 12)):
            step = rng.random()
            client = rng.choice(clients)
            if step < 0.3:
                row += 1
                group.append(_added(client, row, rng.choice((1, 2))))
                sent = rng.random() < 0.6
                if sent:
                    group.append(DeliverySent(client, row, rng.randrange(1, 65536)))
                live[row] = (client, sent, False)
            elif step < 0.6 and live:
                r = rng.choice(sorted(live))
                owner, sent, released = live[r]
                if not sent:
                    group.append(DeliverySent(owner, r, rng.randrange(1, 65536)))
                    live[r] = (owner, True, False)
                elif not released and rng.random() < 0.5:
                    group.append(DeliveryReleased(owner, r))
                    live[r] = (owner, True, True)
                else:
                    group.append(DeliveryDone(owner, r))
                    del live[r]
            elif step < 0.8:
                pid = rng.randrange(1, 6)
                if (client, pid) in incoming:
                    group.append(IncomingReleased(client, pid))
                    incoming.discard((client, pid))
                else:
                    group.append(IncomingAdded(client, pid))
                    incoming.add((client, pid))
            elif step < 0.83:
                group += [SessionRemoved(client), SessionSaved(client, 4, _FOREVER, None, ())]
                live = {r: v for r, v in live.items() if v[0] != client}
                incoming = {k for k in incoming if k[0] != client}
        out.append(group)
    return out


def _model(groups: list[list[Change]]) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The tables the changes, applied one by one, leave: deliveries (row, client, packet id, released), incoming."""
    rows: dict[int, list[object]] = {}
    incoming: set[tuple[str, int]] = set()
    for c in (c for g in groups for c in g):
        if type(c) is DeliveryAdded:
            rows[c.row] = [c.row, c.client_id, None, 0]
        elif type(c) is DeliverySent:
            rows[c.row][2] = c.packet_id
        elif type(c) is DeliveryReleased:
            rows[c.row][3] = 1
        elif type(c) is DeliveryDone:
            del rows[c.row]
        elif type(c) is IncomingAdded:
            incoming.add((c.client_id, c.packet_id))
        elif type(c) is IncomingReleased:
            incoming.discard((c.client_id, c.packet_id))
        elif type(c) is SessionRemoved:
            rows = {r: v for r, v in rows.items() if v[1] != c.client_id}
            incoming = {k for k in incoming if k[0] != c.client_id}
    return [tuple(rows[r]) for r in sorted(rows)], sorted(incoming)


@pytest.mark.parametrize("seed", range(12))
def test_a_file_killed_at_any_commit_restores_what_was_committed(tmp_path: Path, seed: int) -> None:
    groups = _random_groups(seed, 60)
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.LOG_MAX_BYTES = random.Random(seed).choice((300, 3000, 1 << 20))  # folds now and then, or never
    for i, group in enumerate(groups, 1):
        store.commit(group)
        if i % 7 == 0 or i == len(groups):
            killed = _killed(path, tmp_path / f"killed-{i}")
            again, restored = Store.open(killed, SyncMode.normal, 0.0)
            again.close()
            deliveries, incoming = _model(groups[:i])
            assert (_deliveries(killed), _incoming(killed)) == (deliveries, incoming), f"after group {i}"
            by_client = {s.client_id: s for s in restored.sessions}
            back = sorted(
                (d.row, cid, d.packet_id, int(d.released)) for cid, s in by_client.items() for d in s.deliveries
            )
            queued = sorted((d.row, cid, None, 0) for cid, s in by_client.items() for d in (s.queued or ()))
            assert sorted(back + queued) == deliveries
    store.close()
    assert (_deliveries(path), _incoming(path)) == _model(groups)
    assert not changes_path(path).exists()


# --- commit_at_once: the trio thread's own commit of a group that is one frame -----------------------------------


def test_commit_at_once_writes_a_per_message_group_as_one_frame(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    assert store.commit_at_once([IncomingAdded("c", 4), _added("c", 1), DeliverySent("c", 1, 1)])
    assert store.commit_at_once([])  # nothing to write: done
    assert _frames(path) == 1
    killed = _killed(path, tmp_path / "killed")
    again, restored = Store.open(killed, SyncMode.normal, 0.0)
    again.close()
    (session,) = restored.sessions
    assert [(d.row, d.packet_id) for d in session.deliveries] == [(1, 1)] and session.incoming == (4,)
    store.close()


@pytest.mark.parametrize(
    "group",
    [
        [_added("c", 1)],  # queued: its table
        [SessionSaved("d", 4, _FOREVER, None, ())],
        [SessionRemoved("c")],
    ],
    ids=["queued", "session saved", "session removed"],
)
def test_commit_at_once_leaves_what_needs_a_transaction_to_commit(tmp_path: Path, group: list[Change]) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    assert not store.commit_at_once(group)
    assert _frames(path) == 0  # nothing written, nothing applied: commit() writes it as before
    store.commit(group)
    store.close()


def test_commit_at_once_leaves_a_due_fold_and_full_sync_to_commit(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    store, _ = Store.open(path, SyncMode.normal, 0.0)
    store.LOG_MAX_BYTES = 20
    store.commit([SessionSaved("c", 4, _FOREVER, None, ())])
    assert store.commit_at_once([_added("c", 1), DeliverySent("c", 1, 1)])  # past the bound now
    assert not store.commit_at_once([DeliveryReleased("c", 1)])  # the fold is the commit thread's
    store.commit([DeliveryReleased("c", 1)])
    assert _frames(path) == 0 and _deliveries(path) == [(1, "c", 1, 1)]
    store.close()
    synced, _ = Store.open(tmp_path / "full.db", SyncMode.full, 0.0)
    assert not synced.commit_at_once([])  # an fdatasync is not for the trio thread
    synced.close()
