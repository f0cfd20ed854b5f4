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


def _thaw(frozen: bytes) -> str:
    return frozen.decode()


@given(st.lists(st.tuples(st.sampled_from(["set", "frozen", "discard"]), TOPICS), max_size=30), FILTERS)
def test_frozen_values_thaw_and_count_as_values(ops: list[tuple[str, str]], flt: str) -> None:
    # Frozen values (a restore's) mixed with live ones, replaced and discarded: every read gives the thawed value.
    store: RetainedStore[str] = RetainedStore()
    model: dict[str, str] = {}
    for op, t in ops:
        if op == "set":
            store.set(t, "live " + t)
            model[t] = "live " + t
        elif op == "frozen":
            store.set_frozen(t, ("frozen " + t).encode(), _thaw)
            model[t] = "frozen " + t
        else:
            assert store.discard(t) == (t in model)
            model.pop(t, None)
    assert sorted(store.match(flt)) == sorted(v for t, v in model.items() if matches(flt, t))
    assert len(store) == len(model)
    assert sorted(store.items()) == sorted(model.items())
    for _, t in ops:
        assert store.get(t) == model.get(t)
        assert (t in store) == (t in model)
    assert store._frozen == sum(v.startswith("frozen") for v in model.values())


def test_frozen_value_replaced_then_nothing_left_to_thaw() -> None:
    thawed: list[bytes] = []

    def thaw(frozen: bytes) -> str:
        thawed.append(frozen)
        return frozen.decode()

    store: RetainedStore[str] = RetainedStore()
    store.set_frozen("a/b", b"old", thaw)
    store.set("a/c", "live")
    assert sorted(store.match("a/+")) == ["live", "old"] and thawed == [b"old"]
    store.set("a/b", "new")  # a message retained since replaces the frozen one
    assert sorted(store.match("a/#")) == ["live", "new"] and thawed == [b"old"]
    assert store._frozen == 0 and len(store) == 2
