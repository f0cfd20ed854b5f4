"""Tests for mqtt_cli.core.topics: validation, reference matcher and TopicTrie."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt_cli.core.topics import (
    MAX_TOPIC_BYTES,
    TopicTrie,
    TrieEntry,
    is_shared,
    is_wildcard,
    matches,
    parse_shared,
    topic_filter_error,
    topic_name_error,
)

# ---------------------------------------------------------------------------
# Fixture tables
# ---------------------------------------------------------------------------

VALID_NAMES = [
    "a",
    "/",
    "//",
    "a/b",
    "/finance",
    "a//b",
    "a/",
    "$SYS/broker/clients",
    "$SYS",
    " ",
    "sport/tennis/player1",
    "Accounts payable",
    "ümlaut/ß/日本",
    "emoji/\U0001f600",
    "a" * MAX_TOPIC_BYTES,
    "é" * (MAX_TOPIC_BYTES // 2),  # 65534 bytes
]

INVALID_NAMES = [
    ("", "empty"),
    ("+", "'+'"),
    ("#", "'#'"),
    ("a/+", "'+'"),
    ("a/#", "'#'"),
    ("sport+", "'+'"),
    ("sport/tennis#", "'#'"),
    ("a\0b", "U+0000"),
    ("a" * (MAX_TOPIC_BYTES + 1), "longer"),
    ("é" * (MAX_TOPIC_BYTES // 2 + 1), "longer"),  # 65536 bytes, 32768 chars
    ("\U0001f600" * 16384, "longer"),  # 65536 bytes, 16384 code points
    ("a/\ud800", "UTF-8"),
]

VALID_FILTERS = [
    "#",
    "+",
    "+/+",
    "/+",
    "+/",
    "/",
    "//",
    "/#",
    "a//b",
    "sport/#",
    "sport/tennis/player1/#",
    "sport/tennis/+",
    "sport/+/player1",
    "+/tennis/#",
    "+/+/+/#",
    "$SYS/#",
    "$SYS/monitor/+",
    "$share",  # no '/': an ordinary filter
    "$sharex/y",
    "$SHARE//x",  # case-sensitive: not a shared subscription
    "$share/g/a",
    "$share/g/#",
    "$share/g/+/x",
    "$share/group-1/sport/tennis/+",
    "$share/g//",
    "$share/g/$share/h/x",
    "a" * MAX_TOPIC_BYTES,
]

INVALID_FILTERS = [
    ("", "empty"),
    ("sport/tennis#", "'#'"),
    ("sport/tennis/#/ranking", "'#'"),
    ("#/a", "'#'"),
    ("##", "'#'"),
    ("a/#/#", "'#'"),
    ("a/##", "'#'"),
    ("sport+", "'+'"),
    ("+a", "'+'"),
    ("a/b+", "'+'"),
    ("a/++/b", "'+'"),
    ("a\0", "U+0000"),
    ("a/+\0", "U+0000"),
    ("$share/g", "no topic filter"),
    ("$share/g/", "no topic filter"),
    ("$share//x", "empty share name"),
    ("$share/", "empty share name"),
    ("$share/g+/x", "wildcard"),
    ("$share/+/x", "wildcard"),
    ("$share/#/x", "wildcard"),
    ("$share/g/a#", "'#'"),
    ("$share/g/#/a", "'#'"),
    ("$share/g\0/a", "U+0000"),
    ("a" * (MAX_TOPIC_BYTES + 1), "longer"),
    ("$share/g/" + "a" * (MAX_TOPIC_BYTES - 8), "longer"),
    ("a/\udfff", "UTF-8"),
]

MATCH_TABLE = [
    # MQTT 3.1.1 / 5.0 section 4.7.1.2 examples.
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("sport/#", "sport/", True),
    ("#", "sport/tennis", True),
    ("#", "/", True),
    # 4.7.1.3 examples.
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+", "finance", True),
    # 4.7.2: '$' topics and first-level wildcards.
    ("#", "$SYS/x", False),
    ("#", "$SYS", False),
    ("+", "$SYS", False),
    ("+/#", "$SYS", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$SYS", "$SYS", True),
    ("+/+", "$a/b", False),
    ("/#", "$x", False),
    ("a/#", "a/$x", True),  # the rule only concerns the first level
    ("a/+", "a/$x", True),
    # Case sensitivity and empty levels.
    ("ACCOUNTS", "Accounts", False),
    ("Accounts payable", "Accounts payable", True),
    ("a//b", "a//b", True),
    ("a/+/b", "a//b", True),
    ("a/b", "a//b", False),
    ("a/", "a", False),
    ("a", "a/", False),
    ("a/#", "a/", True),
    ("a/+", "a/", True),
    ("/", "/", True),
    ("+/+", "/", True),
    ("+", "/", False),
    ("a/b/c", "a/b", False),
    ("a/b", "a/b/c", False),
    # Shared subscriptions match with their inner filter.
    ("$share/g/sport/#", "sport", True),
    ("$share/g/+", "x", True),
    ("$share/g/#", "$SYS/x", False),
    ("$share/g/a", "$share/g/a", False),
    ("$share/g/$share/h/x", "$share/h/x", True),
]


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALID_NAMES, ids=lambda s: repr(s[:30]))
def test_valid_topic_names(name: str) -> None:
    assert topic_name_error(name) is None


@pytest.mark.parametrize(("name", "reason"), INVALID_NAMES, ids=lambda s: repr(s[:30]))
def test_invalid_topic_names(name: str, reason: str) -> None:
    error = topic_name_error(name)
    assert error is not None
    assert reason in error


def test_empty_topic_name_allowed_with_alias() -> None:
    assert topic_name_error("", allow_empty=True) is None
    assert topic_name_error("a/+", allow_empty=True) is not None


@pytest.mark.parametrize("flt", VALID_FILTERS, ids=lambda s: repr(s[:30]))
def test_valid_topic_filters(flt: str) -> None:
    assert topic_filter_error(flt) is None


@pytest.mark.parametrize(("flt", "reason"), INVALID_FILTERS, ids=lambda s: repr(s[:30]))
def test_invalid_topic_filters(flt: str, reason: str) -> None:
    error = topic_filter_error(flt)
    assert error is not None
    assert reason in error


def test_parse_shared() -> None:
    assert parse_shared("a/b") == (None, "a/b")
    assert parse_shared("$share") == (None, "$share")
    assert parse_shared("$share/g/a/+") == ("g", "a/+")
    assert parse_shared("$share/g/#") == ("g", "#")
    assert parse_shared("$share/g/$share/h/x") == ("g", "$share/h/x")
    for bad in ("$share/", "$share/g", "$share/g/", "$share//x"):
        with pytest.raises(ValueError, match="malformed"):
            parse_shared(bad)
    assert is_shared("$share/g/a")
    assert not is_shared("$share")


def test_is_wildcard() -> None:
    assert is_wildcard("#")
    assert is_wildcard("a/+/b")
    assert is_wildcard("$share/g/a/#")
    assert not is_wildcard("a/b")
    assert not is_wildcard("$share/g/a")


def _naive_filter_error(flt: str) -> bool:
    """Independent, level-by-level statement of the filter rules."""
    if "\0" in flt:  # never allowed in an MQTT string, share name included
        return True
    if flt.startswith("$share/"):
        parts = flt.split("/")
        group = parts[1]
        if len(parts) < 3 or not group or "+" in group or "#" in group:
            return True
        flt = "/".join(parts[2:])
    if not flt or "\0" in flt:
        return True
    levels = flt.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return True
        if "+" in level and level != "+":
            return True
    return False


FILTER_PIECES = ["a", "b", "/", "+", "#", "$share/", "$share", "g", "\0", "", "$SYS"]


@given(st.lists(st.sampled_from(FILTER_PIECES), max_size=8).map("".join))
def test_filter_validation_matches_naive_rules(flt: str) -> None:
    assert (topic_filter_error(flt) is not None) == _naive_filter_error(flt)


@given(st.lists(st.sampled_from(FILTER_PIECES), max_size=8).map("".join))
def test_name_validation_matches_naive_rules(name: str) -> None:
    expected_bad = not name or any(c in name for c in "+#\0")
    assert (topic_name_error(name) is not None) == expected_bad


# ---------------------------------------------------------------------------
# Matching: reference matcher and trie on the fixture table
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("flt", "topic", "expected"), MATCH_TABLE)
def test_matches_table(flt: str, topic: str, expected: bool) -> None:
    assert topic_filter_error(flt) is None
    assert topic_name_error(topic) is None
    assert matches(flt, topic) is expected


def test_trie_on_match_table() -> None:
    trie: TopicTrie[Any, int] = TopicTrie()
    for i, (flt, _, _) in enumerate(MATCH_TABLE):
        trie.add(flt, i, i)
    for i, (_, topic, expected) in enumerate(MATCH_TABLE):
        got = {sub.key for sub in trie.match(topic)}
        assert (i in got) is expected, (MATCH_TABLE[i], got)


# ---------------------------------------------------------------------------
# TopicTrie behaviour
# ---------------------------------------------------------------------------


def test_trie_add_replace_remove() -> None:
    trie: TopicTrie[Any, int] = TopicTrie()
    assert trie.add("a/+", "c1", 1) is True
    assert trie.add("a/+", "c1", 2) is False  # replaces the value
    assert trie.add("a/+", "c2", 1) is True
    assert trie.add("$share/g/a/+", "c1", 0) is True  # distinct filter
    assert len(trie) == 3
    assert trie.get("a/+", "c1") == 2
    assert trie.get("a/+", "nobody") is None
    assert ("a/+", "c1") in trie
    assert ("a/#", "c1") not in trie
    assert "a/+" not in trie
    assert ("$share/g", "c1") not in trie
    assert sorted(trie.match("a/x")) == sorted(
        [
            TrieEntry("a/+", "c1", 2),
            TrieEntry("a/+", "c2", 1),
            TrieEntry("$share/g/a/+", "c1", 0),
        ]
    )
    assert trie.remove("a/+", "c1") is True
    assert trie.remove("a/+", "c1") is False
    assert trie.remove("a/b", "c1") is False
    assert trie.remove("$share/g", "c1") is False
    assert len(trie) == 2
    trie.clear()
    assert len(trie) == 0
    assert not trie
    assert trie.match("a/x") == []
    assert trie._node_count() == 1


def test_trie_rejects_invalid_filters() -> None:
    trie: TopicTrie[Any, int] = TopicTrie()
    for flt, _ in INVALID_FILTERS:
        with pytest.raises(ValueError, match="invalid topic filter"):
            trie.add(flt, "c", 0)
    assert len(trie) == 0
    assert trie._node_count() == 1


def test_subscription_shape() -> None:
    trie: TopicTrie[Any, str] = TopicTrie()
    trie.add("$share/workers/jobs/#", "c1", "opts")
    trie.add("jobs/+", "c1", "opts2")
    by_filter = {sub.filter: sub for sub in trie.match("jobs/1")}
    shared = by_filter["$share/workers/jobs/#"]
    flt, key, value = shared  # a plain 3-tuple
    assert (flt, key, value) == ("$share/workers/jobs/#", "c1", "opts")
    assert shared.share == "workers"
    assert shared.topic_filter == "jobs/#"
    assert by_filter["jobs/+"].share is None
    assert by_filter["jobs/+"].topic_filter == "jobs/+"


def test_deep_filters_do_not_recurse() -> None:
    trie: TopicTrie[Any, int] = TopicTrie()
    deep = "/".join(["a"] * 20000)
    trie.add(deep, 1, 1)
    trie.add(deep + "/#", 2, 2)
    assert {s.key for s in trie.match(deep)} == {1, 2}
    assert len(list(trie)) == 2
    assert trie.remove(deep, 1)
    assert trie.remove(deep + "/#", 2)
    assert trie._node_count() == 1


def test_match_cache_invalidation_and_bound() -> None:
    trie: TopicTrie[Any, int] = TopicTrie(cache_size=4)
    trie.add("a/+", 1, 1)
    first = trie.match("a/b")
    assert [s.key for s in first] == [1]
    first.append(TrieEntry("x", 9, 9))  # caller's list: must not leak in
    assert [s.key for s in trie.match("a/b")] == [1]
    trie.add("a/#", 2, 2)
    assert {s.key for s in trie.match("a/b")} == {1, 2}
    trie.add("a/#", 2, 3)  # value replacement invalidates too
    assert {s.value for s in trie.match("a/b")} == {1, 3}
    trie.remove("a/+", 1)
    assert [s.key for s in trie.match("a/b")] == [2]
    for i in range(20):
        trie.match(f"a/{i}")
        assert len(trie._cache) <= 4
    trie.clear()
    assert trie.match("a/b") == []


# ---------------------------------------------------------------------------
# Property tests: trie == naive matcher, trie == dict model
# ---------------------------------------------------------------------------

FILTER_LEVELS = ["", "+", "#", "$SYS", "a", "b"]
TOPIC_LEVELS = ["", "$SYS", "a", "b"]


def _build_filter(levels: list[str], group: str | None) -> str:
    if "#" in levels:
        levels = levels[: levels.index("#") + 1]  # '#' must be last
    flt = "/".join(levels)
    return flt if group is None else f"$share/{group}/{flt}"


filters = st.builds(
    _build_filter,
    # [""] would be the empty filter, which is invalid.
    st.lists(st.sampled_from(FILTER_LEVELS), min_size=1, max_size=4).filter(lambda levels: levels != [""]),
    st.one_of(st.none(), st.sampled_from(["g", "h"])),
)
topics = st.lists(st.sampled_from(TOPIC_LEVELS), min_size=1, max_size=4).map("/".join).filter(bool)
keys = st.sampled_from(["c1", "c2", "c3"])


@settings(max_examples=150, deadline=None)
@given(
    subs=st.lists(st.tuples(filters, keys, st.integers(0, 2)), max_size=30),
    probe=st.lists(topics, min_size=1, max_size=10),
)
def test_trie_match_equals_naive(subs: list[tuple[str, str, int]], probe: list[str]) -> None:
    model: dict[tuple[str, Hashable], int] = {}
    trie: TopicTrie[Any, int] = TopicTrie()
    cached: TopicTrie[Any, int] = TopicTrie(cache_size=8)
    for flt, key, value in subs:
        assert topic_filter_error(flt) is None
        model[(flt, key)] = value
        trie.add(flt, key, value)
        cached.add(flt, key, value)
    for topic in probe:
        expected = sorted((flt, key, value) for (flt, key), value in model.items() if matches(flt, topic))
        got = trie.match(topic)
        assert sorted(got) == expected
        assert len(got) == len(expected)  # no duplicates
        assert sorted(cached.match(topic)) == expected
        assert sorted(cached.match(topic)) == expected  # from the cache


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), filters, keys, st.integers(0, 2)),
        st.tuples(st.just("remove"), filters, keys, st.just(0)),
        st.tuples(st.just("match"), topics, keys, st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_trie_add_remove_equals_dict_model(
    operations: list[tuple[str, str, str, int]],
) -> None:
    model: dict[tuple[str, Hashable], int] = {}
    trie: TopicTrie[Any, int] = TopicTrie(cache_size=4)
    for op, arg, key, value in operations:
        if op == "add":
            assert trie.add(arg, key, value) is ((arg, key) not in model)
            model[(arg, key)] = value
        elif op == "remove":
            assert trie.remove(arg, key) is ((arg, key) in model)
            model.pop((arg, key), None)
        else:
            expected = sorted((f, k, v) for (f, k), v in model.items() if matches(f, arg))
            assert sorted(trie.match(arg)) == expected
        assert len(trie) == len(model)
    assert sorted(trie) == sorted((f, k, v) for (f, k), v in model.items())
    for (flt, key), value in model.items():
        assert (flt, key) in trie
        assert trie.get(flt, key) == value
    # Removing everything must prune back to the bare root.
    for flt, key in list(model):
        assert trie.remove(flt, key)
    assert len(trie) == 0
    assert list(trie) == []
    assert trie._node_count() == 1
    assert trie._root.is_empty()
