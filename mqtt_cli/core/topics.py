"""MQTT topic names, topic filters and the subscription index.

Covers MQTT 3.1.1 section 4.7 and MQTT 5.0 sections 4.7 (topic names and
filters) and 4.8.2 (shared subscriptions, ``$share/{ShareName}/{filter}``).

Conventions used throughout:

* Levels are separated by ``'/'``; empty levels are real levels, so ``"a//b"``,
  ``"/a"`` and ``"a/"`` are valid and all distinct from ``"a/b"`` and ``"a"``.
* ``'+'`` matches exactly one level (possibly empty); ``'#'`` matches the
  parent level and any number of levels below it (``"a/#"`` matches ``"a"``).
* Topic names starting with ``'$'`` are not matched by filters whose first
  level is a wildcard (``"#"``, ``"+/..."``); ``"$SYS/#"`` does match them.
* ``$share/...`` is always interpreted as shared-subscription syntax, whatever
  the protocol version, as mainstream brokers do for 3.1.1 clients too.

This module is sans-IO and pure: it only imports from the standard library's
typing helpers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, NamedTuple, TypeVar

__all__ = [
    "MAX_TOPIC_BYTES",
    "SHARE_PREFIX",
    "TopicTrie",
    "TrieEntry",
    "is_shared",
    "is_wildcard",
    "matches",
    "parse_shared",
    "topic_filter_error",
    "topic_name_error",
]

K = TypeVar("K", bound=Hashable)  # the subscriber (the broker: its client id)
T = TypeVar("T")

#: Topic names and filters are UTF-8 strings with a 2-byte length prefix.
MAX_TOPIC_BYTES = 65535
#: Prefix of a shared subscription filter (MQTT 5.0 section 4.8.2).
SHARE_PREFIX = "$share/"
_SHARE_PREFIX_LEN = len(SHARE_PREFIX)
# A str of this many code points or fewer cannot exceed 65535 UTF-8 bytes
# (at most 4 bytes per code point), so encoding can be skipped.
_SAFE_CODEPOINTS = MAX_TOPIC_BYTES // 4


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _encoding_error(s: str, what: str) -> str | None:
    """Check that ``s`` is well-formed UTF-8 of at most 65535 bytes.

    Callers skip this for short ASCII strings (see ``_SAFE_CODEPOINTS``).
    """
    if len(s) > MAX_TOPIC_BYTES:
        return f"{what} is longer than {MAX_TOPIC_BYTES} bytes"
    if s.isascii():
        return None
    # Lone surrogates are not well-formed UTF-8 (MQTT 1.5.4) and only
    # encoding finds them; it also gives the exact byte length.
    try:
        size = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} is not valid UTF-8 (lone surrogate)"
    if size > MAX_TOPIC_BYTES:
        return f"{what} is longer than {MAX_TOPIC_BYTES} bytes in UTF-8"
    return None


def topic_name_error(name: str, allow_empty: bool = False) -> str | None:
    """Return why ``name`` is not a valid topic name, or None if it is valid.

    A topic name (the topic of a PUBLISH) must be at least one character,
    contain no wildcard (``'+'``, ``'#'``) and no U+0000, and be well-formed
    UTF-8 of at most 65535 bytes. ``allow_empty`` accepts ``""``, which
    MQTT 5 permits in a PUBLISH that carries a Topic Alias; the caller
    resolves the alias.

    Control characters and non-characters are only "SHOULD NOT" in the spec,
    so they are accepted.
    """
    if not name:
        return None if allow_empty else "topic name is empty"
    # Each `in` is a memchr-speed scan; the common valid case does 3 of them
    # plus isascii(), which is O(1) on CPython's compact strings.
    if "+" in name:
        return "topic name contains wildcard '+'"
    if "#" in name:
        return "topic name contains wildcard '#'"
    if "\0" in name:
        return "topic name contains U+0000"
    if len(name) > _SAFE_CODEPOINTS or not name.isascii():
        return _encoding_error(name, "topic name")
    return None


def _wildcard_error(flt: str) -> str | None:
    """Check the placement of ``'+'`` and ``'#'`` in a (non-shared) filter."""
    # '#' must be the whole last level: "#" or ".../#".
    if "#" in flt and (flt[-1] != "#" or flt.count("#") != 1 or (len(flt) > 1 and flt[-2] != "/")):
        return "'#' must be the last level and alone in its level"
    if "+" in flt:
        # With the filter padded by '/', a whole-level '+' is "/+/". One
        # replace pass misses a '+' whose leading '/' the previous match
        # consumed ("/+/+/"); the second pass catches those. Any '+' left is
        # part of a longer level. Faster than splitting into levels.
        padded = f"/{flt}/".replace("/+/", "//").replace("/+/", "//")
        if "+" in padded:
            return "'+' must be alone in its level"
    return None


def topic_filter_error(flt: str) -> str | None:
    """Return why ``flt`` is not a valid topic filter, or None if it is valid.

    Rules: at least one character, no U+0000, ``'#'`` only as the whole last
    level, ``'+'`` only as a whole level, well-formed UTF-8 of at most 65535
    bytes.

    ``$share/{ShareName}/{filter}`` is a shared subscription: ShareName must
    be at least one character and contain no ``'/'``, ``'+'`` or ``'#'``,
    and it must be followed by ``'/'`` and a non-empty valid filter. So
    ``"$share/grp"``, ``"$share/grp/"`` and ``"$share//x"`` are invalid.
    ``"$share"`` alone (no ``'/'``) is an ordinary filter.
    """
    if not flt:
        return "topic filter is empty"
    if "\0" in flt:
        return "topic filter contains U+0000"
    # flt[0] is a cached 1-char str: cheaper than startswith() on every call.
    if flt[0] == "$" and flt.startswith(SHARE_PREFIX):
        group, _, real = flt[_SHARE_PREFIX_LEN:].partition("/")
        if not group:
            return "shared subscription has an empty share name"
        if "+" in group or "#" in group:
            return "share name contains a wildcard"
        if not real:  # also covers a missing '/' after the share name
            return "shared subscription has no topic filter"
        if ("+" in real or "#" in real) and (error := _wildcard_error(real)) is not None:
            return error
    elif ("+" in flt or "#" in flt) and (error := _wildcard_error(flt)) is not None:
        return error
    if len(flt) > _SAFE_CODEPOINTS or not flt.isascii():
        return _encoding_error(flt, "topic filter")
    return None


def is_shared(flt: str) -> bool:
    """True if ``flt`` uses the ``$share/`` shared-subscription syntax."""
    return flt.startswith(SHARE_PREFIX)


def parse_shared(flt: str) -> tuple[str | None, str]:
    """Split a filter into ``(share group or None, filter to match with)``.

    ``"$share/g/a/+"`` gives ``("g", "a/+")``; ``"a/+"`` gives
    ``(None, "a/+")``. Raises ValueError when ``$share/`` is not followed by
    a non-empty group, ``'/'`` and a non-empty filter (validation of the
    inner filter itself is :func:`topic_filter_error`'s job).
    """
    if not flt.startswith(SHARE_PREFIX):
        return None, flt
    group, sep, real = flt[_SHARE_PREFIX_LEN:].partition("/")
    if not group or not sep or not real:
        raise ValueError(f"malformed shared subscription filter: {flt!r}")
    return group, real


def is_wildcard(flt: str) -> bool:
    """True if the filter contains ``'+'`` or ``'#'`` (share names cannot)."""
    return "+" in flt or "#" in flt


def matches(flt: str, topic: str) -> bool:
    """Reference matcher: does filter ``flt`` match topic name ``topic``?

    Straightforward level-by-level comparison, used as the oracle for
    :class:`TopicTrie` and for one-off checks. Shared filters are matched by
    their inner filter. Both arguments are assumed valid (see
    :func:`topic_filter_error` and :func:`topic_name_error`).
    """
    _, real = parse_shared(flt)
    f_levels = real.split("/")
    t_levels = topic.split("/")
    # The '$' rule (MQTT 4.7.2): wildcards at the first level skip $-topics.
    if topic.startswith("$") and f_levels[0] in ("+", "#"):
        return False
    for i, f_level in enumerate(f_levels):
        if f_level == "#":
            # Also matches the parent: "sport/#" matches "sport".
            return True
        if i >= len(t_levels):
            return False
        if f_level != "+" and f_level != t_levels[i]:
            return False
    return len(f_levels) == len(t_levels)


# ---------------------------------------------------------------------------
# Subscription index
# ---------------------------------------------------------------------------


class TrieEntry(NamedTuple, Generic[K, T]):
    """One entry of a :class:`TopicTrie`: a plain 3-tuple ``(filter, key, value)``.

    ``filter`` is the filter exactly as added (``$share/...`` included), so a
    shared subscription is recognisable and its group readable via
    :attr:`share`. Instances are created once on add and returned by
    reference from :meth:`TopicTrie.match`; treat them as immutable.
    """

    filter: str
    key: K
    value: T

    @property
    def share(self) -> str | None:
        """The share group of a ``$share/`` subscription, else None."""
        flt = self.filter
        if not flt.startswith(SHARE_PREFIX):
            return None
        return flt[_SHARE_PREFIX_LEN : flt.index("/", _SHARE_PREFIX_LEN)]

    @property
    def topic_filter(self) -> str:
        """The filter used for matching (the part after the share group)."""
        return parse_shared(self.filter)[1]


# An entry dict maps (filter as added, key) -> TrieEntry. Several filters
# can land on one node ("a/b", "$share/g1/a/b", "$share/g2/a/b"), so the
# filter is part of the dict key.
_Entries = dict[tuple[str, K], TrieEntry[K, T]]


class _Node(Generic[K, T]):
    """A trie node: one level of a filter.

    ``'+'`` and ``'#'`` are not stored in ``children``: ``plus`` is the
    ``'+'`` child and ``hash`` holds the entries of filters ending in
    ``'#'`` at this point (``'#'`` is always last, so it needs no node).
    Keeping them apart means a topic level can never be confused with a
    wildcard and the match loop reads attributes instead of dict lookups.
    """

    __slots__ = ("children", "entries", "hash", "plus")

    def __init__(self) -> None:
        self.children: dict[str, _Node[K, T]] = {}
        self.plus: _Node[K, T] | None = None
        # None rather than {} when empty: cheaper emptiness tests and memory.
        self.entries: _Entries[K, T] | None = None
        self.hash: _Entries[K, T] | None = None

    def is_empty(self) -> bool:
        return not self.children and self.plus is None and self.entries is None and self.hash is None


class TopicTrie(Generic[K, T]):
    """TrieEntry index: (filter, key) -> value, matched by topic name.

    ``key`` identifies the subscriber (typically the client id); ``value`` is
    whatever the caller needs at delivery time (e.g. subscription options).
    A given (filter, key) pair holds one value; a client subscribing to
    overlapping filters has one entry per filter.

    Shared filters (``$share/g/a/+``) are indexed by their inner filter
    (``a/+``) but reported with the filter as added.

    :meth:`match` walks the topic's levels through exact, ``'+'`` and
    ``'#'`` children, so its cost depends on the topic depth and on the
    number of matching entries, not on the number of subscriptions.

    ``cache_size`` > 0 enables a per-topic cache of match results, emptied
    on every add/remove and whenever it reaches ``cache_size`` topics. A hit
    costs ~0.2 µs against ~3 µs for a walk at 100k subscriptions, but a miss
    costs extra (a tuple copy, and memory for every cached result) and any
    subscription change empties it; so it only pays off when the same topics
    are published repeatedly while subscriptions rarely change. Off by
    default (see benchmarks/topics.py).
    """

    __slots__ = ("_cache", "_cache_size", "_len", "_root")

    def __init__(self, cache_size: int = 0) -> None:
        self._root: _Node[K, T] = _Node()
        self._len = 0
        self._cache: dict[str, tuple[TrieEntry[K, T], ...]] = {}
        self._cache_size = cache_size

    # -- mutation ----------------------------------------------------------

    def add(self, flt: str, key: K, value: T) -> bool:
        """Subscribe ``key`` to ``flt`` with ``value``.

        Returns True if (flt, key) is new, False if it existed (its value is
        replaced, as a re-SUBSCRIBE replaces the options). Raises ValueError
        on an invalid filter.
        """
        error = topic_filter_error(flt)
        if error is not None:
            raise ValueError(f"invalid topic filter {flt!r}: {error}")
        _, real = parse_shared(flt)
        node = self._root
        levels = real.split("/")
        last = len(levels) - 1
        for level in levels[:last]:
            node = self._child_or_create(node, level)
        if levels[last] == "#":
            if node.hash is None:
                node.hash = {}
            entries = node.hash
        else:
            node = self._child_or_create(node, levels[last])
            if node.entries is None:
                node.entries = {}
            entries = node.entries
        ek = (flt, key)
        is_new = ek not in entries
        entries[ek] = TrieEntry(flt, key, value)
        if is_new:
            self._len += 1
        if self._cache:
            self._cache.clear()
        return is_new

    @staticmethod
    def _child_or_create(node: _Node[K, T], level: str) -> _Node[K, T]:
        if level == "+":
            child = node.plus
            if child is None:
                child = node.plus = _Node()
            return child
        child = node.children.get(level)
        if child is None:
            child = node.children[level] = _Node()
        return child

    def remove(self, flt: str, key: K) -> bool:
        """Unsubscribe ``key`` from ``flt``; True if it was subscribed.

        Nodes left empty are pruned, so memory does not grow with churn.
        """
        try:
            _, real = parse_shared(flt)
        except ValueError:
            return False
        levels = real.split("/")
        last = len(levels) - 1
        is_hash = levels[last] == "#"
        if is_hash:
            levels.pop()
        # Walk down, remembering the path for pruning (iterative: filters
        # may have thousands of levels).
        path: list[tuple[_Node[K, T], str]] = []
        node = self._root
        for level in levels:
            child = node.plus if level == "+" else node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        entries = node.hash if is_hash else node.entries
        if entries is None:
            return False
        try:
            del entries[(flt, key)]
        except KeyError:
            return False
        if not entries:
            if is_hash:
                node.hash = None
            else:
                node.entries = None
        self._len -= 1
        if self._cache:
            self._cache.clear()
        # Prune empty nodes bottom-up; stop at the first non-empty one.
        while path and node.is_empty():
            parent, level = path.pop()
            if level == "+":
                parent.plus = None
            else:
                del parent.children[level]
            node = parent
        return True

    def clear(self) -> None:
        """Remove every subscription."""
        self._root = _Node()
        self._len = 0
        self._cache.clear()

    # -- lookup ------------------------------------------------------------

    def match(self, topic: str) -> list[TrieEntry[K, T]]:
        """Every subscription whose filter matches topic name ``topic``.

        Returns a new list of :class:`TrieEntry` ``(filter, key, value)``
        tuples, one per matching (filter, key), in no particular order. The
        same key appears once per matching filter: the broker dedupes by key
        (deliver once, at the highest granted QoS) for non-shared entries,
        and groups entries whose ``share`` is not None by
        ``(share, topic_filter)`` to pick one member per group.

        ``topic`` must be a valid topic name (no wildcards).
        """
        cache = self._cache
        if self._cache_size:
            hit = cache.get(topic)
            if hit is not None:
                return list(hit)
        out: list[TrieEntry[K, T]] = []
        levels = topic.split("/")
        root = self._root
        # First level handled apart for the '$' rule: a $-topic only follows
        # the exact child of the root, never root '+' or root '#'.
        first = root.children.get(levels[0])
        if topic[:1] == "$":
            nodes = [first] if first is not None else []
        else:
            if root.hash is not None:
                out.extend(root.hash.values())
            nodes = []
            if first is not None:
                nodes.append(first)
            if root.plus is not None:
                nodes.append(root.plus)
        for i in range(1, len(levels)):
            if not nodes:
                break
            level = levels[i]
            nxt: list[_Node[K, T]] = []
            for node in nodes:
                # '#' below this node matches the remaining levels.
                if node.hash is not None:
                    out.extend(node.hash.values())
                child = node.children.get(level)
                if child is not None:
                    nxt.append(child)
                if node.plus is not None:
                    nxt.append(node.plus)
            nodes = nxt
        else:
            for node in nodes:
                if node.entries is not None:
                    out.extend(node.entries.values())
                # "a/#" also matches "a" itself.
                if node.hash is not None:
                    out.extend(node.hash.values())
        if self._cache_size:
            if len(cache) >= self._cache_size:
                # Emptying when full is O(1) amortised and avoids LRU
                # bookkeeping on every hit.
                cache.clear()
            cache[topic] = tuple(out)
        return out

    def get(self, flt: str, key: K) -> T | None:
        """The value stored for (flt, key), or None."""
        entries = self._entries_for(flt)
        if entries is None:
            return None
        sub = entries.get((flt, key))
        return None if sub is None else sub.value

    def _entries_for(self, flt: str) -> _Entries[K, T] | None:
        try:
            _, real = parse_shared(flt)
        except ValueError:
            return None
        levels = real.split("/")
        is_hash = levels[-1] == "#"
        if is_hash:
            levels.pop()
        node = self._root
        for level in levels:
            child = node.plus if level == "+" else node.children.get(level)
            if child is None:
                return None
            node = child
        return node.hash if is_hash else node.entries

    def __contains__(self, item: object) -> bool:
        """``(flt, key) in trie``."""
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        flt, key = item
        if not isinstance(flt, str):
            return False
        entries = self._entries_for(flt)
        return entries is not None and (flt, key) in entries

    def __len__(self) -> int:
        """Number of (filter, key) entries."""
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[TrieEntry[K, T]]:
        """Every entry as a :class:`TrieEntry`, in no particular order.

        Do not add or remove while iterating.
        """
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.entries is not None:
                yield from node.entries.values()
            if node.hash is not None:
                yield from node.hash.values()
            stack.extend(node.children.values())
            if node.plus is not None:
                stack.append(node.plus)

    def _node_count(self) -> int:
        """Number of trie nodes including the root (for tests/diagnostics)."""
        count = 0
        stack = [self._root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
            if node.plus is not None:
                stack.append(node.plus)
        return count

    def __repr__(self) -> str:
        return f"<TopicTrie {self._len} subscriptions>"
