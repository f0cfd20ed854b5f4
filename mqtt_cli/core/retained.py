"""Retained messages, indexed by topic level so that a new subscription finds its matches without a full scan.

A level holds at most one value: a `T`, or (restored from the persistence store) a frozen one, a bytes object
that `thaw` turns into a `T` when it is asked for (match, get, items). Frozen values keep a broker restarted with
many retained messages small (core/packed.py: PackedRetained); a value set since replaces one as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from sys import intern
from typing import Any, Generic, TypeVar

__all__ = ["RetainedStore"]

T = TypeVar("T")


# The children of a leaf level (most levels: one per retained topic): shared, never written to; `set` gives a
# level its own dict when it gets a child.
_LEAF: dict[str, Any] = {}  # (Any: it stands in for the children of a level of any value type)


class _Level(Generic[T]):
    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[str, _Level[T]] = _LEAF
        self.value: T | bytes | None = None


class RetainedStore(Generic[T]):
    """topic -> retained message. `match(filter)` walks only the branches the filter can reach.

    The tree is the only index (no topic -> value dict beside it): a topic costs its levels, which are shared
    between topics, and not a string of its own."""

    __slots__ = ("_count", "_frozen", "_root", "_thaw")

    def __init__(self) -> None:
        self._root: _Level[T] = _Level()
        self._count = 0
        self._frozen = 0  # frozen values held (while 0, nothing is thawed: the live path pays one check)
        self._thaw: Callable[[bytes], T] | None = None

    def __len__(self) -> int:
        return self._count

    def __contains__(self, topic: str) -> bool:
        node = self._find(topic)
        return node is not None and node.value is not None

    def get(self, topic: str) -> T | None:
        node = self._find(topic)
        if node is None or node.value is None:
            return None
        return self._value(node.value)

    def items(self) -> Iterator[tuple[str, T]]:
        out: list[tuple[str, T]] = []
        stack: list[tuple[str | None, _Level[T]]] = [(None, self._root)]
        while stack:
            topic, node = stack.pop()
            if topic is not None and node.value is not None:
                out.append((topic, self._value(node.value)))
            for name, child in node.children.items():
                stack.append((name if topic is None else f"{topic}/{name}", child))
        return iter(out)

    def set(self, topic: str, value: T) -> None:
        self._put(topic, value)

    def set_frozen(self, topic: str, frozen: bytes, thaw: Callable[[bytes], T]) -> None:
        """Holds `frozen` for `topic`; `thaw(frozen)` is the value whenever it is asked for. One `thaw` per
        store (the restore gives them all the same)."""
        self._thaw = thaw
        self._put(topic, frozen)
        self._frozen += 1

    def _put(self, topic: str, value: T | bytes) -> None:
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                if node.children is _LEAF:
                    node.children = {}
                # Interned: level names repeat across topics (device/1/temperature, device/2/temperature...).
                child = node.children[intern(level)] = _Level()
            node = child
        old = node.value
        if old is None:
            self._count += 1
        elif self._frozen and type(old) is bytes:
            self._frozen -= 1
        node.value = value

    def discard(self, topic: str) -> bool:
        path: list[tuple[_Level[T], str]] = []
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        old = node.value
        if old is None:
            return False
        if self._frozen and type(old) is bytes:
            self._frozen -= 1
        self._count -= 1
        node.value = None
        # Prune levels left with neither a value nor children.
        while path and node.value is None and not node.children:
            parent, level = path.pop()
            del parent.children[level]
            node = parent
        return True

    def match(self, topic_filter: str) -> list[T]:
        """Retained messages whose topic matches `topic_filter` ('$' topics only for a literal first level)."""
        levels = topic_filter.split("/")
        out: list[T] = []
        last = len(levels) - 1
        # (node, index of the filter level to match at that node)
        stack: list[tuple[_Level[T], int]] = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            level = levels[i]
            at_root = i == 0
            if level == "#":
                if node is not self._root and node.value is not None:
                    out.append(node.value)  # type: ignore[arg-type]  # "a/#" matches "a"
                self._collect(node, out, skip_dollar=at_root)
                continue
            if level == "+":
                children = [child for name, child in node.children.items() if not (at_root and name.startswith("$"))]
            else:
                child = node.children.get(level)
                children = [child] if child is not None else []
            for child in children:
                if i == last:
                    if child.value is not None:
                        out.append(child.value)  # type: ignore[arg-type]
                    # "a/+/#"-like tails are handled by the '#' level; nothing more here.
                elif i + 1 == last and levels[last] == "#":
                    if child.value is not None:
                        out.append(child.value)  # type: ignore[arg-type]
                    self._collect(child, out, skip_dollar=False)
                else:
                    stack.append((child, i + 1))
        if self._frozen:
            thaw = self._thaw
            assert thaw is not None
            return [thaw(v) if type(v) is bytes else v for v in out]  # type: ignore[arg-type]  # frozen: bytes
        return out

    def _find(self, topic: str) -> _Level[T] | None:
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                return None
            node = child
        return node

    def _value(self, value: T | bytes) -> T:
        if self._frozen and type(value) is bytes:
            assert self._thaw is not None
            return self._thaw(value)
        return value  # type: ignore[return-value]

    @staticmethod
    def _collect(node: _Level[T], out: list[T], skip_dollar: bool) -> None:
        stack = [child for name, child in node.children.items() if not (skip_dollar and name.startswith("$"))]
        while stack:
            n = stack.pop()
            if n.value is not None:
                out.append(n.value)  # type: ignore[arg-type]
            stack.extend(n.children.values())
