"""The broker's persistence: BrokerCore's change records (core/persistence.py) in an SQLite file.

The standard library's sqlite3 in WAL mode: no new dependency, and a file users can inspect with `sqlite3`.
`commit` writes a group of changes in one transaction (one fsync with `synchronous = full`, none with
`normal`, whose WAL writes still survive a killed process); the server runs it in its commit thread
(net/committer.py) and sends the acknowledgements the group held only once it returned. One commit runs at a
time, so a burst of messages arriving during a commit goes into the next one: the busier the broker, the bigger
the groups.

Times: the core's clock is trio's (monotonic); the file holds wall-clock times, converted with the offset
taken when the store is opened, so that expiry intervals go on counting across a restart.

A file that cannot be read (not a database, corrupt, truncated, a newer schema) is moved aside with a time
stamp and the broker starts empty: `Store.open` says so in its `warning`.

The log: most per-message records live a few commits (a QoS 2 message is added, released, done; an incoming QoS 2
identifier added, released), so a commit writes them as one frame appended to the change file beside the database
(net/changefile.py; core/changelog.py encodes them) instead of a statement each, and a group holding nothing else
costs one write, no transaction. (Schemas 4 and 5 kept them as rows of a `log` table: a transaction, the pages
written to the WAL, again at the checkpoint, and deleted at the fold.) The store keeps their net effect on the
tables in memory (LogState):
what is added and done since the last fold cancels out and never reaches the tables. The tables are brought up to
date (folded: the net effect applied and the change file's generation moved on in one transaction, then the file
started again, empty) when the log passes LOG_MAX_BYTES, before a change that needs them whole (SessionRemoved
deletes a session's deliveries), and at close (the file is then removed); at open, after a kill, the change file's
frames are replayed into a LogState and folded before anything is read. A delivery queued but not sent in
its commit (its client offline, its window full) goes straight to its table: it is likely to stay, and the log
would only write its payload twice. So is everything else (sessions, retained messages): no log record touches
their tables. A file is its tables plus its log, read in that order: what `sqlite3` shows of deliveries and
incoming identifiers while the broker runs may be behind by the log. A commit is all or nothing: one frame (a group
of per-message records only) or one transaction (any other group: its changes for the tables and, if it has records
of its own, the log folded with them); never some of a group on file without the rest.

Schema versions: 1 held retained messages, sessions, subscriptions and deliveries; 2 added a session's will, a
delivery's packet identifier and QoS 2 state, and the incoming QoS 2 identifiers not yet released; 3 a session's bridge;
4 the log; 5 the log's record of a delivery added and sent in one commit (no table changes); 6 the change file, and
its tag in the `change_file` table (the `log` table is then only read, from a killed version 4 or 5 file). A file of
an older version is migrated when it is opened (one transaction: the `_MIGRATIONS` after its version); a new file is
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

from mqtt_cli.core.changelog import IncomingFate, LogState, LogUnreadable, decode
from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.errors import RemoteProtocolError
from mqtt_cli.core.packed import PackedRetained, QueuePacker
from mqtt_cli.core.packets import Will
from mqtt_cli.core.persistence import (
    Change,
    DeliveryAdded,
    RetainedSet,
    SessionSaved,
    StoredDelivery,
    StoredSession,
    log_only,
)
from mqtt_cli.core.properties import WILL, Properties, decode_properties, encode_properties
from mqtt_cli.core.session import Message, SubscriptionOptions
from mqtt_cli.net.changefile import CHANGES_SUFFIX, ChangeFile, Tag, changes_path, read

__all__ = ["SCHEMA_VERSION", "Restored", "Store", "StoreError", "store_files"]

#: Bumped by any change of the tables below; an older file is migrated on open, a newer one moved aside.
SCHEMA_VERSION = 6
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
    4: """
CREATE TABLE log (seq INTEGER PRIMARY KEY, data BLOB NOT NULL);
""",
    # No table changes: log rows may hold a record older brokers do not know (a delivery added and sent as one,
    # core/changelog.py), so they must move such a file aside rather than fail on its log.
    5: "",
    # The log's records move to a file of their own (net/changefile.py); the table is still read, once, from a
    # version 4 or 5 file killed with rows in it. `change_file` is the tag the file must carry to be this
    # database's (a random id, and the generation: one more at each fold).
    6: """
CREATE TABLE change_file (file_id INTEGER NOT NULL, generation INTEGER NOT NULL);
INSERT INTO change_file VALUES (random() & 9223372036854775807, 0);
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

    #: Log bytes written since the last fold before the next commit folds: bounds what a start replays (a few MB
    #: decode in well under a second) and what the store keeps in memory (LogState: an entry or less a record),
    #: while a QoS 2 message's records (added, released, done within a few commits) almost always cancel before.
    LOG_MAX_BYTES = 4 << 20

    def __init__(
        self, path: Path, db: sqlite3.Connection, synchronous: SyncMode, now: float, warning: str | None
    ) -> None:
        self.path = path
        self._db = db
        self._offset = time.time() - now  # core clock -> wall clock
        self.warning = warning  # the one line to log when the file was moved aside
        self._state: LogState | None = LogState()  # what the log holds; None: unknown (a commit failed), read again
        self._sids: dict[tuple[int, ...], str] = {}  # subscription identifiers -> their JSON text
        row = db.execute("SELECT file_id, generation FROM change_file").fetchone()
        if row is None:
            raise _Unreadable("an empty change_file table")
        self._tag = Tag(*row)  # what the change file must carry, as the tables say
        self._changes = ChangeFile(changes_path(path), synchronous)
        self._sync_full = synchronous is SyncMode.full
        self._restart = True  # the change file is to be started for `_tag` before its next frame

    @classmethod
    def open(cls, path: Path, synchronous: SyncMode, now: float) -> tuple[Store, Restored]:
        """Opens (or creates) the file and reads what it holds (its log folded first); a file that cannot be read
        is moved aside and a new one started (`warning` says so). StoreError when no file can be opened at all."""
        db = None
        try:
            db = _connect(path, synchronous)
            _check(db)
            store = cls(path, db, synchronous, now, None)
            store._replay()
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
            store = cls(path, db, synchronous, now, None)
            store._replay()
        except (sqlite3.Error, OSError, _Unreadable) as exc:
            raise StoreError(f"persistence: {path}: {getattr(exc, 'strerror', None) or exc}") from None
        store.warning = f"{path} cannot be read ({why}); moved to {aside}, starting with nothing restored"
        return store, store.load(now)

    def _replay(self) -> None:
        """What a killed broker had not folded (the log table's rows, from a version 4 or 5 file, then the change
        file's frames) into the tables, before they are read; the change file started again, empty. A change file
        damaged part-way is restored up to the damage and moved aside (`warning` says so)."""
        state, damage = self._read_log()
        if state.size:
            with self._db:
                tag = self._fold(state, self._tag)
            self._tag = tag
        if damage is not None:
            aside = _aside_name(self._changes.path)
            os.replace(self._changes.path, aside)
            self.warning = (
                f"{self._changes.path} is damaged ({damage}); what it held before that is restored, the file moved "
                f"to {aside}"
            )
        self._start_changes(self._tag)
        self._state = state

    def _read_log(self) -> tuple[LogState, str | None]:
        """The log's records since the last fold, and what damage ended the change file's (None: none)."""
        state = LogState()
        rows = [data for (data,) in self._db.execute("SELECT data FROM log ORDER BY seq")]
        written = read(self._changes.path, self._tag)
        for data in rows + written.bodies:
            try:
                records = decode(data, self._offset)
            except LogUnreadable as exc:
                raise _Unreadable(str(exc)) from None
            for c in records:
                state.apply(c)
            state.size += len(data) or 1  # (an empty row is a row to delete: it counts)
        return state, written.damage

    def _start_changes(self, tag: Tag) -> None:
        """The change file emptied for `tag`, the database's now. If that fails (OSError), it is tried again before
        the next frame: none may go to a file with the tag before."""
        self._tag = tag
        self._restart = True
        self._changes.start(tag)
        self._restart = False

    def _fold(self, state: LogState, tag: Tag) -> Tag:
        """The log's net effect into the tables, in the caller's transaction; returns the change file's tag after
        `tag` (the caller keeps it once the transaction is committed)."""
        _fold(self._db, state, self._offset, self._sids)
        tag = Tag(tag.file_id, tag.generation + 1)
        self._db.execute("UPDATE change_file SET generation = ?", (tag.generation,))
        return tag

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
        packer = QueuePacker(_publish_properties)
        deliveries: dict[str, list[StoredDelivery]] = {}
        for row in packer.add_all(db.execute("SELECT * FROM deliveries ORDER BY row"), off):  # in flight: few
            rid, client_id, topic, payload, mqos, mretain, props, origin, received, qos, retain, sids, pid, rel = row
            message = self._message(topic, payload, mqos, bool(mretain), props, origin, received)
            stored = StoredDelivery(rid, message, qos, bool(retain), tuple(json.loads(sids)), pid, bool(rel))
            deliveries.setdefault(client_id, []).append(stored)
        queued = packer.finish()
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
        """Writes `changes`, in order, all or nothing: a group of per-message records only (a delivery sent, an
        incoming identifier: core/changelog.py LogState.log) as one frame of the change file; any other group in
        one transaction, its changes for the tables and, if it has records, the log folded with them (the change
        file's frames and this group's records), the change file then started again. (Some of a group on file
        without the rest is a state that never was: a delivery without the incoming identifier of the same
        PUBLISH would be delivered again when the publisher re-sends it.) Raises StoreError when it cannot be
        written."""
        db = self._db
        off = self._offset
        try:
            state = self._state
            if state is None:  # the last commit failed: what the log holds, as it was before it
                state = self._state = self._read_log()[0]
            if self._restart:  # a fold's next generation (the file could not be started then)
                self._start_changes(self._tag)
            # Deliveries added and sent in this group go to the log (their subscriber is online: their end is
            # likely near); those only queued, straight to their table.
            n = len(changes)
            segment = state.log(changes, 0, off)
            data = segment.data
            if (
                segment.end == n
                and not segment.direct
                and not segment.queued
                and state.size + len(data) <= self.LOG_MAX_BYTES
            ):
                # The common group: one frame, no transaction.
                if data:
                    self._changes.append(data)
                    state.size += len(data)
                return
            tag = self._tag
            # This group's records, if any, go in this transaction (folded with the log before them): never some
            # of a group on file without the rest. A group with none leaves the change file as it is.
            logged = bool(data)
            with db:
                while True:
                    for c in segment.direct:
                        if type(c) is SessionSaved:
                            _save_session(db, c, off)
                        elif type(c) is RetainedSet:
                            m = c.message
                            db.execute(
                                "INSERT OR REPLACE INTO retained VALUES (?, ?, ?, ?, ?, ?)",
                                (m.topic, m.payload, m.qos, encode_properties(m.properties, _PUBLISH), m.origin,
                                 m.received_at + off),
                            )  # fmt: skip
                        else:
                            db.execute("DELETE FROM retained WHERE topic = ?", (c.topic,))  # type: ignore[union-attr]
                    if segment.queued:
                        _insert(db, [_as_row(a, None, False, off, self._sids) for a in segment.queued])
                    if segment.end == n:
                        break
                    # A SessionRemoved: its deletes apply to what came before it, the log's records too (folded
                    # first).
                    if logged or state.size:
                        tag = self._fold(state, tag)
                    _remove_session(db, changes[segment.end].client_id)  # type: ignore[union-attr]
                    segment = state.log(changes, segment.end + 1, off)
                    logged = bool(segment.data)
                if logged:
                    tag = self._fold(state, tag)  # (with this group's records: nothing left for a frame)
            if tag != self._tag:
                self._start_changes(tag)
        except (sqlite3.Error, OSError) as exc:
            self._state = None  # rolled back, or not all written: read again from the files, as they are
            raise self._failed(exc) from None

    def commit_at_once(self, changes: list[Change]) -> bool:
        """Writes `changes` now and returns True when that costs a write to the OS only: per-message records
        (persistence.log_only), `synchronous = normal`, no fold due. Otherwise, or if the write fails, returns False
        having written nothing: `commit` (in the commit thread) writes them, or says why it cannot. So the trio
        thread can commit the common QoS 2 group itself, without handing it to the thread and waiting for it."""
        state = self._state
        if self._sync_full or state is None or self._restart or state.size > self.LOG_MAX_BYTES:
            return False
        if not log_only(changes):
            return False
        data = state.log(changes, 0, self._offset).data
        if data:
            try:
                self._changes.append(data)
            except OSError:
                self._state = None  # (records applied, not written: read again by `commit`)
                return False
            state.size += len(data)
        return True

    def fold(self) -> None:
        """The log into the tables now, the change file started again (StoreError if it cannot be written)."""
        try:
            state = self._state
            if state is None:
                state = self._state = self._read_log()[0]
            tag = self._tag
            if state.size:
                with self._db:
                    tag = self._fold(state, tag)
            if state.size or self._restart:
                self._start_changes(tag)
        except (sqlite3.Error, OSError) as exc:
            self._state = None
            raise self._failed(exc) from None

    def _failed(self, exc: sqlite3.Error | OSError) -> StoreError:
        """A commit's or fold's failure, naming the file that could not be written and why."""
        if isinstance(exc, sqlite3.Error):
            return StoreError(f"persistence: {self.path}: {exc}")
        return StoreError(f"persistence: {self._changes.path}: {exc.strerror or exc}")

    def close(self) -> None:
        """Folds the log and closes the file: a clean stop leaves the database alone, with no change file."""
        try:
            self.fold()
        except StoreError:
            self._changes.close()  # kept: what it holds is not in the tables
        else:
            with contextlib.suppress(OSError):
                self._changes.remove()
        with contextlib.suppress(sqlite3.Error):
            self._db.close()


def _fold(db: sqlite3.Connection, state: LogState, off: float, sids: dict[tuple[int, ...], str]) -> None:
    """Applies the log's net effect to the tables and empties the log, in the caller's transaction."""
    added, pids, released = state.added, state.packet_ids, state.released
    if added:
        _insert(db, [_as_row(a, pids.get(row), row in released, off, sids) for row, a in sorted(added.items())])
    new_ids = [(p, r) for r, p in pids.items() if r not in added]
    if new_ids:
        db.executemany("UPDATE deliveries SET packet_id = ? WHERE row = ?", new_ids)
    now_released = [(r,) for r in released if r not in added]
    if now_released:
        db.executemany("UPDATE deliveries SET released = 1 WHERE row = ?", now_released)
    if state.done:
        db.executemany("DELETE FROM deliveries WHERE row = ?", [(r,) for r in state.done])
    if state.incoming:
        gone = IncomingFate.GONE
        db.executemany(
            "INSERT OR IGNORE INTO incoming VALUES (?, ?)", [k for k, v in state.incoming.items() if v is not gone]
        )
        db.executemany(
            "DELETE FROM incoming WHERE client_id = ? AND packet_id = ?",
            [k for k, v in state.incoming.items() if v is gone],
        )
    if state.size:
        db.execute("DELETE FROM log")
    state.clear()


def _as_row(
    a: DeliveryAdded, packet_id: int | None, released: bool, off: float, sids: dict[tuple[int, ...], str]
) -> tuple[object, ...]:
    """A delivery as a row of its table (`sids`: JSON texts made so far, most sessions using one or none)."""
    m = a.message
    ids = a.subscription_ids
    if ids:
        text = sids.get(ids)
        if text is None:
            if len(sids) >= 1024:
                sids.clear()
            text = sids[ids] = json.dumps(ids)
    else:
        text = "[]"
    props = encode_properties(m.properties, _PUBLISH) if m.properties.items else b"\x00"
    return (a.row, a.client_id, m.topic, m.payload, m.qos, m.retain, props, m.origin, m.received_at + off, a.qos,
            a.retain, text, packet_id, released)  # fmt: skip


def _insert(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    if rows:
        db.executemany("INSERT OR REPLACE INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        rows.clear()


class _Unreadable(Exception):
    """This broker's file in a form it cannot restore from (a newer schema, not its tables)."""


def _connect(path: Path, synchronous: SyncMode) -> sqlite3.Connection:
    # check_same_thread off: opened in a trio worker thread, then written by the commit thread (net/committer.py)
    # and, at shutdown, the trio thread: one at a time, never two at once.
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


def _publish_properties(data: bytes) -> Properties:
    return _properties(data, _PUBLISH)


def _properties(data: bytes, packet_type: int) -> Properties:
    errors: list[RemoteProtocolError] = []
    properties, _ = decode_properties(data, 0, len(data), packet_type, errors)
    if errors:
        raise sqlite3.DatabaseError(f"stored properties: {errors[0]}")
    return properties


def _aside_name(path: Path) -> Path:
    """A name next to `path` for it moved aside: time-stamped, never one in use."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    aside = path.with_name(f"{path.name}.unreadable-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.unreadable-{stamp}-{n}")
    return aside


_COMPANIONS = ("-wal", "-shm", CHANGES_SUFFIX)  # SQLite's files and the change file, after the database's name


def store_files(path: Path) -> list[Path]:
    """The database at `path` and the files that go with it (which may not exist)."""
    return [path, *(path.with_name(path.name + suffix) for suffix in _COMPANIONS)]


def _move_aside(path: Path) -> Path:
    """The database and the files that go with it (SQLite's, and the change file) moved aside together."""
    aside = _aside_name(path)
    os.replace(path, aside)
    for suffix in _COMPANIONS:
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
