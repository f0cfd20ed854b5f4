"""The broker's change file: the persistence log's records (core/changelog.py), one frame per commit, appended
next to the SQLite database (`<database>-changes`) by net/store.py.

Appending a frame is one `write` (plus an `fdatasync` with `synchronous = full`); the same records as a row of
an SQLite table cost a transaction, their pages written to the WAL and again at the checkpoint, and deleted again
at the fold. A write that completed is in the kernel's page cache, so it survives the broker being killed, as
SQLite's WAL with `synchronous = normal` does.

The header names the database it belongs to and the fold it follows (`Tag`): the database keeps the same pair,
and a fold writes the tables and the next generation in one transaction before the file is started again. A
file whose tag is not the database's is stale (a fold ended, the file was not started again yet) or another
database's, and holds nothing to replay.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.framing import FrameDamaged, frame, frames

__all__ = ["CHANGES_SUFFIX", "ChangeFile", "Tag", "Written", "changes_path", "read"]

CHANGES_SUFFIX = "-changes"  # after the database's name, as SQLite's "-wal"
_MAGIC = b"MQTTCL1\n"
_TAG = struct.Struct(">QQ")
_HEADER_SIZE = len(_MAGIC) + _TAG.size


@dataclass(frozen=True, slots=True)
class Tag:
    """Which database a change file belongs to (`file_id`, drawn when the database is made) and after which of
    its folds (`generation`)."""

    file_id: int
    generation: int


@dataclass(frozen=True, slots=True)
class Written:
    """What a change file holds for a database: the bodies of its whole frames, and what made reading stop early
    (None: nothing, or a last frame cut short by a kill, which was never acknowledged)."""

    bodies: list[bytes]
    damage: str | None


def changes_path(database: Path) -> Path:
    return database.with_name(database.name + CHANGES_SUFFIX)


def read(path: Path, tag: Tag) -> Written:
    """The frames `path` holds for `tag` (none if it is missing, stale or another database's). A frame that does
    not match its checksum ends the reading: what comes before it is returned, `damage` says where."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Written([], None)
    if len(data) < _HEADER_SIZE:
        return Written([], None)  # started again and killed before its header was whole: nothing after it
    if not data.startswith(_MAGIC):
        return Written([], "not a change file (bad header)")
    if Tag(*_TAG.unpack_from(data, len(_MAGIC))) != tag:
        return Written([], None)
    bodies: list[bytes] = []
    try:
        for _, body in frames(data, _HEADER_SIZE):
            bodies.append(body)
    except FrameDamaged as exc:
        return Written(bodies, str(exc))
    return Written(bodies, None)


class ChangeFile:
    """The open change file, written by one thread at a time. `start` empties it for a tag, `append` adds a frame;
    both raise OSError when the file cannot be written, leaving what was there before (a frame half written is
    cut off again, or, if even that fails, before the next frame)."""

    def __init__(self, path: Path, synchronous: SyncMode) -> None:
        self.path = path
        self._sync = synchronous is SyncMode.full
        self._fd: int | None = None
        self._good = 0  # bytes known whole: where the next frame goes
        self._dirty = False  # a failed write may have left bytes after `_good`

    def start(self, tag: Tag) -> None:
        """The file made empty but for its header (created if missing)."""
        created = False
        if self._fd is None:
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._good = 0
        self._dirty = True
        self._write(_MAGIC + _TAG.pack(tag.file_id, tag.generation))
        if created and self._sync:
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)  # the file's name too, for a power loss
            finally:
                os.close(fd)

    def append(self, body: bytes) -> None:
        """One frame holding `body`, on file (and on disk with `synchronous = full`) when this returns."""
        assert self._fd is not None, "append before start"
        self._write(frame(body))

    def _write(self, data: bytes) -> None:
        fd = self._fd
        assert fd is not None
        if self._dirty:
            os.ftruncate(fd, self._good)
            self._dirty = False
        view = memoryview(data)
        pos = self._good
        try:
            while view:
                n = os.pwrite(fd, view, pos)
                if n == 0:
                    raise OSError(0, "no byte written")
                pos += n
                view = view[n:]
            if self._sync:
                os.fdatasync(fd)
        except OSError:
            self._dirty = True
            try:
                os.ftruncate(fd, self._good)
                self._dirty = False
            except OSError:
                pass  # tried again before the next write
            raise
        self._good = pos

    def remove(self) -> None:
        """Closes and deletes the file (everything in it is in the database's tables)."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
