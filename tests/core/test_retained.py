"""The retained-message index against the reference matcher."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqtt_cli.core.retained import RetainedStore
from mqtt_cli.core.topics import matches, topic_filter_error

LEVELS = st.sampled_from(["", "a", "b", "$SYS", "c"])
TOPICS = st.lists(LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)
FILTER_LEVELS = st.sampled_from(["", "a", "b", "$SYS", "+", "#"])
FILTERS = st.lists(FILTER_LEVELS, min_size=1, max_size=4).map("/".join).filter(lambda f: topic_filter_error(f) is None)


@given(st.lists(TOPICS, max_size=20), st.lists(TOPICS, max_size=10), FILTERS)
def test_match_equals_reference(added: list[str], removed: list[str], flt: str) -> None:
    store: RetainedStore[str] = RetainedStore()
    model: set[str] = set()
    for t in added:
        store.set(t, t)
        model.add(t)
    for t in removed:
        assert store.discard(t) == (t in model)
        model.discard(t)
    assert sorted(store.match(flt)) == sorted(t for t in model if matches(flt, t))
    assert len(store) == len(model)


def test_examples() -> None:
    store: RetainedStore[str] = RetainedStore()
    for t in ["a", "a/b", "a/b/c", "$SYS/x", "/x", "b"]:
        store.set(t, t)
    assert sorted(store.match("#")) == ["/x", "a", "a/b", "a/b/c", "b"]
    assert sorted(store.match("a/#")) == ["a", "a/b", "a/b/c"]
    assert sorted(store.match("+/+")) == ["/x", "a/b"]
    assert store.match("$SYS/#") == ["$SYS/x"]
    assert store.match("+/x") == ["/x"]


def test_discard_prunes() -> None:
    store: RetainedStore[int] = RetainedStore()
    store.set("a/b/c", 1)
    assert store.discard("a/b/c")
    assert not store._root.children
    assert not store.discard("a/b/c")
