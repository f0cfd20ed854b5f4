"""A near miss for a mistyped name: the one "did you mean" of every option, command, key and value.

Imported where an error is being written (the clients' start-up does not pay for difflib).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CUTOFF", "close_to", "did_you_mean"]

#: How close (difflib's ratio) a name must be to the mistyped one to be suggested: `hots` finds `host`.
CUTOFF = 0.6


def close_to(word: str, names: Iterable[str], *, n: int = 1, cutoff: float = CUTOFF) -> list[str]:
    """The names closest to `word`, best first (none when nothing is close)."""
    return difflib.get_close_matches(word, list(names), n=n, cutoff=cutoff)


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`did you mean 'host'?` for the name closest to `word`, or "" when none is close."""
    near = close_to(word, names)
    return f"did you mean {near[0]!r}?" if near else ""
