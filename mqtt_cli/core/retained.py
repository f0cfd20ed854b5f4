"""Retained messages, indexed by topic level so that a new subscription finds its matches without a full scan."""

from __future__ import annotations

from collections.abc import Iterator
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
        self.value: T | None = None


class RetainedStore(Generic[T]):
    """topic -> retained message. `match(filter)` walks only the branches the filter can reach."""

    __slots__ = ("_by_topic", "_root")

    def __init__(self) -> None:
        self._root: _Level[T] = _Level()
        self._by_topic: dict[str, T] = {}

    def __len__(self) -> int:
        return len(self._by_topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self._by_topic

    def get(self, topic: str) -> T | None:
        return self._by_topic.get(topic)

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(list(self._by_topic.items()))

    def set(self, topic: str, value: T) -> None:
        node = self._root
        for level in topic.split("/"):
            child = node.children.get(level)
            if child is None:
                if node.children is _LEAF:
                    node.children = {}
                # Interned: level names repeat across topics (device/1/temperature, device/2/temperature...).
                child = node.children[intern(level)] = _Level()
            node = child
        node.value = value
        self._by_topic[topic] = value

    def discard(self, topic: str) -> bool:
        if topic not in self._by_topic:
            return False
        del self._by_topic[topic]
        path: list[tuple[_Level[T], str]] = []
        node = self._root
        for level in topic.split("/"):
            path.append((node, level))
            node = node.children[level]
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
                    out.append(node.value)  # "a/#" matches "a"
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
                        out.append(child.value)
                    # "a/+/#"-like tails are handled by the '#' level; nothing more here.
                elif i + 1 == last and levels[last] == "#":
                    if child.value is not None:
                        out.append(child.value)
                    self._collect(child, out, skip_dollar=False)
                else:
                    stack.append((child, i + 1))
        return out

    @staticmethod
    def _collect(node: _Level[T], out: list[T], skip_dollar: bool) -> None:
        stack = [child for name, child in node.children.items() if not (skip_dollar and name.startswith("$"))]
        while stack:
            n = stack.pop()
            if n.value is not None:
                out.append(n.value)
            stack.extend(n.children.values())
