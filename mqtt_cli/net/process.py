"""`mqtt serve` as a system service: its pid file, and running as another user once the listeners are bound.

As mosquitto: started as root with `user NAME`, the broker binds its listeners (ports below 1024 included), then
changes to that user and its groups for good. Files it opened or created before (the persistence database and its
companions, the log file, the pid file) are given to that user first, so that what it opens again later (the log
on SIGUSR2, the database's change file) stays writable. Not started as root, `user` changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PidFile", "ProcessError", "RunAs", "run_as"]


class ProcessError(Exception):
    """A pid file or a user the broker cannot use (one line)."""


class PidFile:
    """The broker's process id in a file, written at start (with its directory if missing) and removed at exit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{os.getpid()}\n", encoding="ascii")
        except OSError as exc:
            raise ProcessError(f"cannot write the pid file {path}: {exc.strerror or exc}") from None

    def remove(self) -> None:
        """Removed only while it still holds this process's id (another broker may have started since)."""
        with contextlib.suppress(OSError, ValueError):
            if int(self.path.read_text(encoding="ascii").strip()) == os.getpid():
                self.path.unlink()


@dataclass(frozen=True, slots=True)
class RunAs:
    """The user to change to once bound: its name, ids and groups."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    def give(self, paths: list[Path]) -> None:
        """Those of `paths` that exist become the user's (what the broker made as root and opens again later)."""
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.chown(path, self.uid, self.gid)

    def switch(self) -> None:
        """Groups, then group, then user: for good (the saved ids too), or ProcessError."""
        try:
            os.setgroups(list(self.groups))
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)
        except OSError as exc:
            raise ProcessError(f"cannot run as user {self.name!r}: {exc.strerror or exc}") from None
        os.environ["HOME"] = pwd.getpwuid(self.uid).pw_dir


def run_as(name: str | None) -> RunAs | None:
    """The user to change to, or None: no `user`, or not running as root (then there is nothing to change, as
    mosquitto). ProcessError for a user that does not exist."""
    if name is None or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ProcessError(f"user {name!r} does not exist: create it, or change [process] user") from None
    return RunAs(name, entry.pw_uid, entry.pw_gid, tuple(os.getgrouplist(name, entry.pw_gid)))
