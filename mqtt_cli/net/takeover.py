"""Taking over mosquitto's persistence file (mosquitto.db) at a start without a database of this broker's.

Once: mosquitto's file is read (core/mosquitto_db.py), its records become this broker's change records
(core/mosquitto_takeover.py), and those are written into a new database made beside the one configured under a
name of its own, then renamed to it. So a start killed half-way leaves no database, and the next one takes over
again; once the database is there, mosquitto's file is never read again. mosquitto's file is only read: never
written, moved or removed (it is what the operator goes back to mosquitto with).

A file that cannot be read (another format version, damaged, cut short) stops the start: nothing it holds may
be dropped without the operator saying so (`--skip-mosquitto-db`, `[persistence] skip_mosquitto_db`).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from mqtt_cli.core.config import PersistenceSettings
from mqtt_cli.core.mosquitto_db import MAGIC, MosquittoDbError, parse
from mqtt_cli.core.mosquitto_takeover import Takeover, take_over
from mqtt_cli.net.changefile import CHANGES_SUFFIX
from mqtt_cli.net.store import Store, StoreError

__all__ = [
    "TAKEOVER_SUFFIX",
    "TakeoverError",
    "mosquitto_db_path",
    "skipped_mosquitto_db",
    "summary",
    "take_over_file",
]

SQLITE_MAGIC = b"SQLite format 3\x00"
#: The database being made, beside the configured one, until it is complete.
TAKEOVER_SUFFIX = ".taking-over"


class TakeoverError(Exception):
    """The start cannot go on (one line: the file, what is wrong, what to do)."""


def mosquitto_db_path(settings: PersistenceSettings) -> Path | None:
    """mosquitto's file to take over now: None when persistence is off, the database exists, it is to be skipped,
    or there is no such file. TakeoverError when the configured database is mosquitto's file itself."""
    if settings.path is None:
        return None
    path = Path(settings.path)
    source = path.parent / settings.mosquitto_db
    if _is_mosquitto_file(path):
        raise TakeoverError(
            f"persistence: {path} is mosquitto's persistence file, not this broker's database: give [persistence] "
            f"path another name (mosquitto.conf: persistence_file names mosquitto's file, taken over into "
            f"mqtt-cli.db beside it)"
        )
    if path.exists() or settings.skip_mosquitto_db or not source.is_file():
        return None
    return source


def skipped_mosquitto_db(settings: PersistenceSettings) -> Path | None:
    """mosquitto's file that would be taken over now but for `skip_mosquitto_db` (None: none)."""
    if settings.path is None or not settings.skip_mosquitto_db or Path(settings.path).exists():
        return None
    source = Path(settings.path).parent / settings.mosquitto_db
    return source if source.is_file() else None


def take_over_file(source: Path, settings: PersistenceSettings, now: float) -> Takeover:
    """Reads `source` and makes the database of `settings` hold what it holds (in a worker thread: file I/O).
    TakeoverError when `source` cannot be read or the database cannot be written."""
    assert settings.path is not None
    path = Path(settings.path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise TakeoverError(f"persistence: cannot read mosquitto's {source}: {exc.strerror or exc}") from None
    if data.startswith(SQLITE_MAGIC):  # this broker's kind: a database of its own that a persistence_file named
        raise TakeoverError(
            f"persistence: {source} is an SQLite database, not mosquitto's file: if it is this broker's database, "
            f"rename it to {path}; else move it away or start with --skip-mosquitto-db"
        )
    try:
        db = parse(data)
    except MosquittoDbError as exc:
        raise TakeoverError(
            f"persistence: mosquitto's {source} cannot be read ({exc}); nothing was taken over or changed: move it "
            "away, or start with --skip-mosquitto-db ([persistence] skip_mosquitto_db = true) to run without what it "
            "holds"
        ) from None
    result = take_over(db, now, time.time())
    building = path.with_name(path.name + TAKEOVER_SUFFIX)
    _remove(building)  # what a start killed while taking over left
    try:
        store, _ = Store.open(building, settings.synchronous, now)
        try:
            store.commit(result.changes)
        finally:
            store.close()
        os.replace(building, path)
    except (StoreError, OSError) as exc:
        _remove(building)
        why = str(exc) if isinstance(exc, StoreError) else f"{path}: {exc.strerror or exc}"
        raise TakeoverError(f"persistence: taking over {source}: {why}") from None
    return result


def summary(source: Path, path: str, t: Takeover) -> str:
    """The start's one line on what was taken over."""

    def n(count: int, what: str) -> str:
        return f"{count} {what}{'' if count == 1 else 's'}"

    line = (
        f"took over mosquitto's {source}: {n(t.retained, 'retained message')}, {n(t.sessions, 'persistent session')} "
        f"with {n(t.subscriptions, 'subscription')}, {n(t.queued, 'queued message')}, {t.inflight} in flight"
    )
    if t.incoming:
        line += f", {n(t.incoming, 'QoS 2 message')} received and published now"
    left = t.left_out
    if left:
        parts = [
            (left.expired_messages, "expired message"),
            (left.expired_sessions, "expired session"),
            (left.qos0_messages, "queued QoS 0 message"),
            (left.unacknowledged_incoming, "incoming QoS 2 message not acknowledged yet"),
            (left.orphans, "record without its session or message"),
        ]
        line += "; left out: " + ", ".join(n(c, w) for c, w in parts if c)
    return line + f"; {source.name} is left as it was, the broker keeps {path} from now on"


def _is_mosquitto_file(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _remove(building: Path) -> None:
    for suffix in ("", "-wal", "-shm", CHANGES_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.remove(building.with_name(building.name + suffix))
