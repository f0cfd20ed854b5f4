"""The broker's persistence: BrokerCore's change records (core/persistence.py) in an SQLite file.

The standard library's sqlite3 in WAL mode: no new dependency, and a file users can inspect with `sqlite3`.
`commit` writes a group of changes in one transaction (one fsync with `synchronous = full`, none with
`normal`, whose WAL writes still survive a killed process); the server runs it in a worker thread and sends
the acknowledgements the group held only once it returned. One commit runs at a time, so a burst of
messages arriving during a commit goes into the next one: the busier the broker, the bigger the groups.

Times: the core's clock is trio's (monotonic); the file holds wall-clock times, converted with the offset
taken when the store is opened, so that expiry intervals go on counting across a restart.

A file that cannot be read (not a database, corrupt, truncated, a newer schema) is moved aside with a time
stamp and the broker starts empty: `Store.open` says so in its `warning`.

Schema versions: 1 held retained messages, sessions, subscriptions and deliveries; 2 added a session's will, a
delivery's packet identifier and QoS 2 state, and the incoming QoS 2 identifiers not yet released. A file of an
older version is migrated when it is opened (one transaction: the `_MIGRATIONS` after its version); a new file is
made by the same steps, so a migrated file and a new one have the same tables, column for column.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.errors import RemoteProtocolError
from mqtt_cli.core.packed import PackedQueue, PackedRetained, Shape
from mqtt_cli.core.packets import Will
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
    StoredDelivery,
    StoredSession,
    coalesce,
)
from mqtt_cli.core.properties import WILL, Properties, decode_properties, encode_properties
from mqtt_cli.core.session import Message, SubscriptionOptions

__all__ = ["SCHEMA_VERSION", "Restored", "Store", "StoreError"]

#: Bumped by any change of the tables below; an older file is migrated on open, a newer one moved aside.
SCHEMA_VERSION = 3
_PUBLISH = 3  # packet type whose properties a message keeps

# Version 1, as first released: every file starts from it, then takes the migrations in turn.
_SCHEMA_1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE retained (
    topic TEXT PRIMARY KEY, payload BLOB NOT NULL, qos INTEGER NOT NULL, properties BLOB NOT NULL,
    origin TEXT, received_at REAL NOT NULL
);
CREATE TABLE sessions (
    client_id TEXT PRIMARY KEY, version INTEGER NOT NULL, expiry_interval INTEGER NOT NULL, expires_at REAL,
    username TEXT
);
CREATE TABLE subscriptions (
    client_id TEXT NOT NULL, filter TEXT NOT NULL, qos INTEGER NOT NULL, no_local INTEGER NOT NULL,
    retain_as_published INTEGER NOT NULL, retain_handling INTEGER NOT NULL, identifier INTEGER,
    PRIMARY KEY (client_id, filter)
);
CREATE TABLE deliveries (
    row INTEGER PRIMARY KEY, client_id TEXT NOT NULL, topic TEXT NOT NULL, payload BLOB NOT NULL,
    message_qos INTEGER NOT NULL, message_retain INTEGER NOT NULL, properties BLOB NOT NULL, origin TEXT,
    received_at REAL NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL, subscription_ids TEXT NOT NULL
);
CREATE INDEX deliveries_by_client ON deliveries (client_id, row);
"""

# version -> the DDL that takes a file of the version before to it. Columns are added at the end of their
# tables: the statements below read and write rows by position.
_MIGRATIONS: dict[int, str] = {
    2: """
ALTER TABLE sessions ADD COLUMN will_topic TEXT;
ALTER TABLE sessions ADD COLUMN will_payload BLOB;
ALTER TABLE sessions ADD COLUMN will_qos INTEGER;
ALTER TABLE sessions ADD COLUMN will_retain INTEGER;
ALTER TABLE sessions ADD COLUMN will_properties BLOB;
ALTER TABLE sessions ADD COLUMN will_at REAL;
ALTER TABLE deliveries ADD COLUMN packet_id INTEGER;
ALTER TABLE deliveries ADD COLUMN released INTEGER NOT NULL DEFAULT 0;
CREATE TABLE incoming (
    client_id TEXT NOT NULL, packet_id INTEGER NOT NULL, PRIMARY KEY (client_id, packet_id)
) WITHOUT ROWID;
""",
    3: """
ALTER TABLE sessions ADD COLUMN bridge TEXT;
""",
}


class StoreError(Exception):
    """The database cannot be created or written (one line: the file and why)."""


@dataclass(frozen=True, slots=True)
class Restored:
    sessions: list[StoredSession]
    retained: PackedRetained
    removed_sessions: int  # expired while the broker was down: removed from the file


class Store:
    """One SQLite file. Not thread-safe: one call at a time (the server runs one commit at a time)."""

    def __init__(self, path: Path, db: sqlite3.Connection, now: float, warning: str | None) -> None:
        self.path = path
        self._db = db
        self._offset = time.time() - now  # core clock -> wall clock
        self.warning = warning  # the one line to log when the file was moved aside

    @classmethod
    def open(cls, path: Path, synchronous: SyncMode, now: float) -> tuple[Store, Restored]:
        """Opens (or creates) the file and reads what it holds; a file that cannot be read is moved aside and a
        new one started (`warning` says so). StoreError when no file can be opened at all."""
        db = None
        try:
            db = _connect(path, synchronous)
            _check(db)
            store = cls(path, db, now, None)
            return store, store.load(now)
        except (sqlite3.DatabaseError, _Unreadable) as exc:
            if db is not None:
                with contextlib.suppress(sqlite3.Error):
                    db.close()
            why = str(exc)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"persistence: {path}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            aside = _move_aside(path)
            db = _connect(path, synchronous)
            _check(db)
        except (sqlite3.Error, OSError, _Unreadable) as exc:
            raise StoreError(f"persistence: {path}: {getattr(exc, 'strerror', None) or exc}") from None
        warning = f"{path} cannot be read ({why}); moved to {aside}, starting with nothing restored"
        store = cls(path, db, now, warning)
        return store, store.load(now)

    def load(self, now: float) -> Restored:
        """What the file holds, in core times; expired sessions and retained messages are removed from it. A
        file that fails here (corrupt pages found while reading) raises sqlite3.DatabaseError."""
        db = self._db
        wall = now + self._offset
        with db:
            gone = db.execute(
                "SELECT client_id FROM sessions WHERE expires_at IS NOT NULL AND expires_at <= ?", (wall,)
            ).fetchall()
            for (client_id,) in gone:
                _remove_session(db, client_id)
            db.execute("DELETE FROM deliveries WHERE client_id NOT IN (SELECT client_id FROM sessions)")
            db.execute("DELETE FROM incoming WHERE client_id NOT IN (SELECT client_id FROM sessions)")
        # Retained messages are frozen as they are read (core/packed.py): one bytes object each, no Message.
        retained = PackedRetained()
        retained_shapes: dict[tuple[object, ...], int] = {}
        off = self._offset
        expired: list[tuple[str]] = []
        for topic, payload, qos, props, origin, received in db.execute("SELECT * FROM retained ORDER BY topic"):
            kept = (origin, props, qos)
            shape = retained_shapes.get(kept)
            if shape is None:
                shape = retained_shapes[kept] = retained.shape(origin, _properties(props, _PUBLISH), qos)
            received -= off
            expires_at = retained.expires_at(shape, received)
            if expires_at is not None and now >= expires_at:  # as Message.expired
                expired.append((topic,))
                continue
            retained.add(topic, payload, shape, received)
        if expired:
            with db:
                db.executemany("DELETE FROM retained WHERE topic = ?", expired)
        subs: dict[str, list[tuple[str, SubscriptionOptions]]] = {}
        for client_id, flt, qos, no_local, rap, rh, sid in db.execute(
            "SELECT * FROM subscriptions ORDER BY client_id, filter"
        ):
            opts = SubscriptionOptions(qos, bool(no_local), bool(rap), rh, sid)
            subs.setdefault(client_id, []).append((flt, opts))
        # Queued deliveries (most of a big file) are packed as they are read, with no objects kept per message:
        # what many share (topic, publisher, properties, flags, subscription identifiers) made once, a Shape.
        deliveries: dict[str, list[StoredDelivery]] = {}
        queued: dict[str, PackedQueue] = {}
        shapes: list[Shape] = []
        shape_ids: dict[tuple[object, ...], int] = {}
        sids_seen: dict[str, tuple[int, ...]] = {}
        origins: dict[str | None, str | None] = {}
        for row in db.execute("SELECT * FROM deliveries ORDER BY row"):
            rid, client_id, topic, payload, mqos, mretain, props, origin, received, qos, retain, sids, pid, rel = row
            if pid is not None:  # in flight: few, restored as objects
                message = self._message(topic, payload, mqos, bool(mretain), props, origin, received)
                stored = StoredDelivery(rid, message, qos, bool(retain), tuple(json.loads(sids)), pid, bool(rel))
                deliveries.setdefault(client_id, []).append(stored)
                continue
            packed = queued.get(client_id)
            if packed is None:
                packed = queued[client_id] = PackedQueue(shapes)
            key = (topic, origin, props, mqos, mretain, qos, retain, sids)
            shape = shape_ids.get(key)
            if shape is None:
                shape = shape_ids[key] = len(shapes)
                properties = _properties(props, _PUBLISH)
                origin = origins.setdefault(origin, origin)  # one string per publisher, not per shape
                ids = sids_seen.get(sids)
                if ids is None:
                    ids = sids_seen[sids] = tuple(json.loads(sids))
                shapes.append(Shape(topic, origin, properties, mqos, bool(mretain), qos, bool(retain), ids))
            packed.add(rid, received - off, shape, payload, len(payload) + len(topic))
        for packed in queued.values():
            packed.trim()
        incoming: dict[str, list[int]] = {}
        for client_id, pid in db.execute("SELECT client_id, packet_id FROM incoming ORDER BY client_id, packet_id"):
            incoming.setdefault(client_id, []).append(pid)
        sessions = []
        for row in db.execute("SELECT * FROM sessions ORDER BY client_id"):
            client_id, version, expiry, expires, username, wtopic, wpayload, wqos, wretain, wprops, will_at = row[:11]
            bridge = row[11]
            will = None
            if wtopic is not None:
                will = Will(wtopic, bytes(wpayload), wqos, bool(wretain), _properties(wprops, WILL))
            sessions.append(
                StoredSession(
                    client_id,
                    version,
                    expiry,
                    None if expires is None else expires - off,
                    tuple(subs.get(client_id, ())),
                    tuple(deliveries.get(client_id, ())),
                    username,
                    will,
                    None if will_at is None else will_at - off,
                    tuple(incoming.get(client_id, ())),
                    queued.get(client_id),
                    bridge,
                )
            )
        return Restored(sessions, retained, len(gone))

    def _message(
        self, topic: str, payload: bytes, qos: int, retain: bool, props: bytes, origin: str | None, received: float
    ) -> Message:
        properties = _properties(props, _PUBLISH)
        return Message(topic, bytes(payload), qos, retain, properties, origin, received - self._offset)

    def commit(self, changes: list[Change]) -> None:
        """Writes `changes` in one transaction (in order; without what persistence.coalesce drops). Raises
        StoreError when the file cannot be written."""
        db = self._db
        off = self._offset
        batch = _Batch()
        try:
            with db:
                for c in coalesce(changes):
                    kind = type(c)
                    # The per-message records go to the batch, written with one executemany per statement.
                    if kind is DeliveryAdded:
                        a: DeliveryAdded = c  # type: ignore[assignment]
                        m = a.message
                        sids = json.dumps(a.subscription_ids) if a.subscription_ids else "[]"
                        batch.added_at[a.row] = len(batch.added)
                        batch.added.append(
                            (a.row, a.client_id, m.topic, m.payload, m.qos, m.retain,
                             encode_properties(m.properties, _PUBLISH), m.origin, m.received_at + off, a.qos, a.retain,
                             sids, None)
                        )  # fmt: skip
                    elif kind is DeliveryDone:
                        batch.done.append((c.row,))  # type: ignore[union-attr]
                    elif kind is DeliverySent:
                        s: DeliverySent = c  # type: ignore[assignment]
                        at = batch.added_at.get(s.row)
                        if at is None:
                            batch.sent.append((s.packet_id, s.row))
                        else:  # sent in the group that adds it (a subscriber online): one INSERT, no UPDATE
                            batch.added[at] = (*batch.added[at][:12], s.packet_id)
                    elif kind is DeliveryReleased:
                        batch.released.append((c.row,))  # type: ignore[union-attr]
                    elif kind is IncomingAdded:
                        key = (c.client_id, c.packet_id)  # type: ignore[union-attr]
                        if key in batch.incoming_released_keys:  # an identifier used again: its release first
                            batch.write(db)
                        batch.incoming_added.append(key)
                    elif kind is IncomingReleased:
                        key = (c.client_id, c.packet_id)  # type: ignore[union-attr]
                        batch.incoming_released.append(key)
                        batch.incoming_released_keys.add(key)
                    else:
                        batch.write(db)  # what came before, first: sessions and deliveries keep their order
                        if kind is RetainedSet:
                            m = c.message  # type: ignore[union-attr]
                            db.execute(
                                "INSERT OR REPLACE INTO retained VALUES (?, ?, ?, ?, ?, ?)",
                                (m.topic, m.payload, m.qos, encode_properties(m.properties, _PUBLISH), m.origin,
                                 m.received_at + off),
                            )  # fmt: skip
                        elif kind is RetainedCleared:
                            db.execute("DELETE FROM retained WHERE topic = ?", (c.topic,))  # type: ignore[union-attr]
                        elif kind is SessionSaved:
                            _save_session(db, c, off)  # type: ignore[arg-type]
                        elif kind is SessionRemoved:
                            _remove_session(db, c.client_id)  # type: ignore[union-attr]
                batch.write(db)
        except sqlite3.Error as exc:
            raise StoreError(f"persistence: {self.path}: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()


class _Batch:
    """Per-message records of one commit, by statement. Written in the order of a delivery's life (added, sent,
    released, done) and of an incoming identifier's (added, released), which is each record's own order: rows are
    never reused, and an incoming identifier used again ends the batch before it (`commit`)."""

    __slots__ = (
        "added", "added_at", "done", "incoming_added", "incoming_released", "incoming_released_keys", "released", "sent"
    )  # fmt: skip

    def __init__(self) -> None:
        self.added: list[tuple[object, ...]] = []
        self.added_at: dict[int, int] = {}  # row -> its index in `added`, while not yet written
        self.sent: list[tuple[int, int]] = []
        self.released: list[tuple[int]] = []
        self.done: list[tuple[int]] = []
        self.incoming_added: list[tuple[str, int]] = []
        self.incoming_released: list[tuple[str, int]] = []
        self.incoming_released_keys: set[tuple[str, int]] = set()

    def write(self, db: sqlite3.Connection) -> None:
        if self.added:
            db.executemany(
                "INSERT OR REPLACE INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)", self.added
            )
            self.added.clear()
            self.added_at.clear()
        if self.sent:
            db.executemany("UPDATE deliveries SET packet_id = ? WHERE row = ?", self.sent)
            self.sent.clear()
        if self.released:
            db.executemany("UPDATE deliveries SET released = 1 WHERE row = ?", self.released)
            self.released.clear()
        if self.done:
            db.executemany("DELETE FROM deliveries WHERE row = ?", self.done)
            self.done.clear()
        if self.incoming_added:
            db.executemany("INSERT OR IGNORE INTO incoming VALUES (?, ?)", self.incoming_added)
            self.incoming_added.clear()
        if self.incoming_released:
            db.executemany("DELETE FROM incoming WHERE client_id = ? AND packet_id = ?", self.incoming_released)
            self.incoming_released.clear()
            self.incoming_released_keys.clear()


class _Unreadable(Exception):
    """This broker's file in a form it cannot restore from (a newer schema, not its tables)."""


def _connect(path: Path, synchronous: SyncMode) -> sqlite3.Connection:
    # check_same_thread off: trio's worker threads take turns, one commit at a time.
    db = sqlite3.connect(path, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {synchronous.value.upper()}")
    return db


def _check(db: sqlite3.Connection) -> None:
    """Creates the tables in an empty file; checks the version of a file that has them (_Unreadable if newer)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        _migrate(db, _SCHEMA_1 + "INSERT INTO schema_version VALUES (1);", 1)
        return
    if "schema_version" not in tables:
        raise _Unreadable("no schema_version table: not this broker's file")
    row = db.execute("SELECT version FROM schema_version").fetchone()
    if row is None:
        raise _Unreadable("an empty schema_version table")
    if row[0] > SCHEMA_VERSION:
        raise _Unreadable(f"schema version {row[0]}, newer than this broker's {SCHEMA_VERSION}")
    # Reading every page now finds a corrupt or truncated file before anything is restored from it.
    problem = db.execute("PRAGMA quick_check").fetchone()[0]
    if problem != "ok":
        raise _Unreadable(f"quick_check: {problem}")
    if row[0] < SCHEMA_VERSION:
        _migrate(db, "", row[0])


def _migrate(db: sqlite3.Connection, first: str, version: int) -> None:
    """`first` (DDL, may be empty) and the migrations after `version`, in one transaction: a file is at one version
    or the next, never half-way."""
    steps = "".join(_MIGRATIONS[v] for v in range(version + 1, SCHEMA_VERSION + 1))
    db.executescript(f"BEGIN; {first}{steps} UPDATE schema_version SET version = {SCHEMA_VERSION}; COMMIT;")


def _properties(data: bytes, packet_type: int) -> Properties:
    errors: list[RemoteProtocolError] = []
    properties, _ = decode_properties(data, 0, len(data), packet_type, errors)
    if errors:
        raise sqlite3.DatabaseError(f"stored properties: {errors[0]}")
    return properties


def _move_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    aside = path.with_name(f"{path.name}.unreadable-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.unreadable-{stamp}-{n}")
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            os.replace(extra, aside.with_name(aside.name + suffix))
    return aside


def _save_session(db: sqlite3.Connection, c: SessionSaved, off: float) -> None:
    expires = None if c.expires_at is None else c.expires_at + off
    w = c.will
    will = (
        (None,) * 6
        if w is None
        else (w.topic, w.payload, w.qos, w.retain, encode_properties(w.properties, WILL),
              None if c.will_at is None else c.will_at + off)
    )  # fmt: skip
    db.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (c.client_id, c.version, c.expiry_interval, expires, c.username, *will, c.bridge))  # fmt: skip
    db.execute("DELETE FROM subscriptions WHERE client_id = ?", (c.client_id,))
    db.executemany(
        "INSERT INTO subscriptions VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (c.client_id, flt, o.qos, o.no_local, o.retain_as_published, o.retain_handling,
             o.subscription_identifier)
            for flt, o in c.subscriptions
        ],
    )  # fmt: skip


def _remove_session(db: sqlite3.Connection, client_id: str) -> None:
    db.execute("DELETE FROM sessions WHERE client_id = ?", (client_id,))
    db.execute("DELETE FROM subscriptions WHERE client_id = ?", (client_id,))
    db.execute("DELETE FROM deliveries WHERE client_id = ?", (client_id,))
    db.execute("DELETE FROM incoming WHERE client_id = ?", (client_id,))
