"""mosquitto's ACL file, sans-IO: the text parsed into rules, and the rules checked fast.

The format (mosquitto.conf(5), acl_file):

    # a comment
    topic read public/#            <- before any `user` line: for clients without a user name
    user alice
    topic readwrite alice/#        <- `topic [read|write|readwrite|deny] FILTER` (no keyword: readwrite)
    pattern write devices/%c/out   <- for every client: %c is its client id, %u its user name

The semantics are mosquitto 2.0's (src/security_default.c, mosquitto_acl_check_default):

* a client's own rules (its user's section, or the anonymous one) are checked first, then the patterns;
* within each, a `deny` rule that matches wins over everything after it (mosquitto keeps them at the front);
  otherwise the first matching rule with the access asked for grants it; nothing matching: denied;
* a topic starting with ``$`` is matched only by a rule starting with ``$`` (``#`` does not grant ``$SYS``);
* when patterns exist, a client whose user name or client id holds ``+`` or ``#`` is denied everything that its
  own rules did not grant; patterns with ``%u`` do not apply to clients without a user name;
* ``%c`` and ``%u`` stand for a whole topic level, as in mosquitto's `mosquitto_topic_matches_sub_with_pattern`
  (later 2.0 releases; 2.0.11 substituted text anywhere in the filter, so a client id holding ``/`` could reach
  other levels).

Speed: the rules are held in tries (one per user section, one for all patterns, with ``%c``/``%u`` levels as
nodes of their own that compare with the client's values), so a check walks the topic's levels, never the list
of rules: 1,000 patterns cost what 10 do. Each client's `AclView` also caches its recent answers by topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntFlag
from typing import Final

from .topics import parse_shared, topic_filter_error

__all__ = ["Access", "Acl", "AclFileError", "AclRule", "AclView", "parse_acl_file"]

_CACHE_SIZE: Final = 512  # topics remembered per client and access (emptied when full: bounded memory per client)


class Access(IntFlag):
    DENY = 0  # `topic deny FILTER`: matches and refuses
    READ = 1
    WRITE = 2
    READWRITE = 3


_KEYWORDS: Final = {"read": Access.READ, "write": Access.WRITE, "readwrite": Access.READWRITE, "deny": Access.DENY}


class AclFileError(ValueError):
    """A line of an ACL file that mosquitto would refuse too; `line` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class AclRule:
    filter: str
    access: Access
    line: int  # where it was read, for messages
    pattern: bool = False  # a `pattern` line (%c, %u), not a `topic` line
    levels: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the filter split, once
    binds: bool = field(default=False, compare=False, repr=False)  # a pattern with a %c or %u level

    def __post_init__(self) -> None:
        levels = tuple(self.filter.split("/"))
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "binds", self.pattern and ("%c" in levels or "%u" in levels))

    @property
    def needs_username(self) -> bool:
        # mosquitto skips a pattern holding %u anywhere for a client without a user name.
        return self.pattern and "%u" in self.filter


class _Node:
    __slots__ = ("children", "client", "hash", "plus", "rules", "user")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.plus: _Node | None = None
        self.client: _Node | None = None  # a `%c` level (patterns only)
        self.user: _Node | None = None  # a `%u` level (patterns only)
        self.rules: list[AclRule] = []  # filters ending here
        self.hash: list[AclRule] = []  # filters ending in `#` below here


class _RuleTrie:
    """Rules by filter; `match` returns those whose filter matches a topic (with %c/%u levels bound)."""

    __slots__ = ("root",)

    def __init__(self, rules: list[AclRule]) -> None:
        self.root = _Node()
        for rule in rules:
            self._add(rule)

    def _add(self, rule: AclRule) -> None:
        node = self.root
        levels = rule.filter.split("/")
        for level in levels:
            if level == "#":
                node.hash.append(rule)
                return
            if level == "+":
                node.plus = node.plus or _Node()
                node = node.plus
            elif rule.pattern and level == "%c":
                node.client = node.client or _Node()
                node = node.client
            elif rule.pattern and level == "%u":
                node.user = node.user or _Node()
                node = node.user
            else:
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = _Node()
                node = child
        node.rules.append(rule)

    def match(self, topic: str, client_id: str, username: str | None) -> list[AclRule]:
        out: list[AclRule] = []
        levels = topic.split("/")
        root = self.root
        first = levels[0]
        nodes: list[_Node] = []
        child = root.children.get(first)
        if child is not None:
            nodes.append(child)
        if topic[:1] != "$":  # a $-topic is matched only by a rule whose first level is that literal
            out.extend(root.hash)
            if root.plus is not None:
                nodes.append(root.plus)
            if root.client is not None and first == client_id:
                nodes.append(root.client)
            if root.user is not None and first == username:
                nodes.append(root.user)
        for level in levels[1:]:
            if not nodes:
                return out
            nxt: list[_Node] = []
            for node in nodes:
                if node.hash:
                    out.extend(node.hash)
                child = node.children.get(level)
                if child is not None:
                    nxt.append(child)
                if node.plus is not None:
                    nxt.append(node.plus)
                if node.client is not None and level == client_id:
                    nxt.append(node.client)
                if node.user is not None and level == username:
                    nxt.append(node.user)
            nodes = nxt
        for node in nodes:
            out.extend(node.rules)
            out.extend(node.hash)  # "a/#" matches "a" too
        return out


def _decide(rules: list[AclRule], access: Access) -> bool | None:
    """mosquitto's order within one list: a matching deny refuses; else a rule with the access grants."""
    granted = False
    for rule in rules:
        if rule.access is Access.DENY:
            return False
        if rule.access & access:
            granted = True
    return True if granted else None


@dataclass(slots=True)
class Acl:
    """A parsed ACL file: the anonymous section, each user's section, the patterns."""

    anonymous: list[AclRule] = field(default_factory=list)
    users: dict[str, list[AclRule]] = field(default_factory=dict)
    patterns: list[AclRule] = field(default_factory=list)
    _tries: dict[str | None, _RuleTrie] = field(default_factory=dict, repr=False)
    _patterns: _RuleTrie | None = field(default=None, repr=False)
    # For SUBSCRIBE: patterns by their literal first level; those starting with a wildcard, %c or %u apart.
    _by_first: dict[str, list[AclRule]] = field(default_factory=dict, repr=False)
    _any_first: list[AclRule] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._tries = {name: _RuleTrie(rules) for name, rules in self.users.items()}
        if self.anonymous:
            self._tries[None] = _RuleTrie(self.anonymous)
        self._patterns = _RuleTrie(self.patterns) if self.patterns else None
        for rule in self.patterns:
            first = rule.levels[0]
            if first in ("+", "#", "%c", "%u"):
                self._any_first.append(rule)
            else:
                self._by_first.setdefault(first, []).append(rule)

    def view(self, username: str | None, client_id: str) -> AclView:
        """What one client may do, with its own cache."""
        return AclView(self, username, client_id)

    def rules_for(self, username: str | None) -> list[AclRule]:
        return self.anonymous if username is None else self.users.get(username, [])

    def allows(self, username: str | None, client_id: str, topic: str, access: Access) -> bool:
        """mosquitto_acl_check_default for one topic name (no wildcards)."""
        own = self._tries.get(username)
        if own is not None:
            decided = _decide(own.match(topic, client_id, username), access)
            if decided is not None:
                return decided
        patterns = self._patterns
        if patterns is None or _dangerous(username, client_id):
            return False
        matched = patterns.match(topic, client_id, username)
        if username is None:
            matched = [r for r in matched if not r.needs_username]
        return bool(_decide(matched, access))

    def may_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        """Whether the client may read some topic `topic_filter` can match (our SUBSCRIBE check; mosquitto 2.0
        grants every SUBSCRIBE). An approximation on the safe side of nothing: it can grant a filter whose every
        topic is denied by several deny rules together, never refuse one with a readable topic; every delivery is
        checked anyway."""
        flt = parse_shared(topic_filter)[1].split("/")
        own = self.rules_for(username)
        own_denies = [_levels(r, client_id, username) for r in own if r.access is Access.DENY]
        for rule in own:
            if rule.access & Access.READ and _readable(_levels(rule, client_id, username), flt, own_denies):
                return True
        if not self.patterns or _dangerous(username, client_id):
            return False
        first = flt[0]
        # Only patterns that can share a topic with the filter: 1,000 patterns need not be met one by one.
        candidates = self.patterns if first in ("+", "#") else self._by_first.get(first, []) + self._any_first
        usable = [r for r in candidates if username is not None or not r.needs_username]
        denies = own_denies + [_levels(r, client_id, username) for r in usable if r.access is Access.DENY]
        return any(
            rule.access & Access.READ and _readable(_levels(rule, client_id, username), flt, denies) for rule in usable
        )


def _dangerous(username: str | None, client_id: str) -> bool:
    return (username is not None and ("+" in username or "#" in username)) or "+" in client_id or "#" in client_id


def _levels(rule: AclRule, client_id: str, username: str | None) -> tuple[str, ...] | None:
    """The rule's filter as levels, %c and %u bound; None when a binding cannot be one level (never matches)."""
    if not rule.binds:
        return rule.levels
    out = []
    for level in rule.levels:
        if level == "%c":
            level = client_id
        elif level == "%u":
            if username is None:
                return None
            level = username
        else:
            out.append(level)
            continue
        if "/" in level or level in ("+", "#"):
            return None
        out.append(level)
    return tuple(out)


def _readable(rule: Sequence[str] | None, flt: Sequence[str], denies: Sequence[Sequence[str] | None]) -> bool:
    if rule is None:
        return False
    meet = _meet(rule, flt)
    return meet is not None and not any(d is not None and _covers(d, meet) for d in denies)


def _dollar_clash(a: Sequence[str], b: Sequence[str]) -> bool:
    """A wildcard first level never matches a $-topic: a filter of those and a $-literal filter share nothing."""
    a0, b0 = a[0], b[0]
    return (a0 in ("+", "#") and b0[:1] == "$") or (b0 in ("+", "#") and a0[:1] == "$")


def _meet(a: Sequence[str], b: Sequence[str]) -> list[str] | None:
    """A filter matching exactly the topics both `a` and `b` match, or None when they share none."""
    if _dollar_clash(a, b):
        return None
    out: list[str] = []
    i = 0
    while True:
        if i < len(a) and a[i] == "#":
            return out + list(b[i:])
        if i < len(b) and b[i] == "#":
            return out + list(a[i:])
        if i == len(a) or i == len(b):
            return out if len(a) == len(b) else None
        x, y = a[i], b[i]
        if x == "+":
            out.append(y)
        elif y == "+" or x == y:
            out.append(x)
        else:
            return None
        i += 1


def _covers(d: Sequence[str], m: Sequence[str]) -> bool:
    """Whether every topic filter `m` matches is matched by filter `d`."""
    if _dollar_clash(d, m) and d[0] in ("+", "#"):
        return False
    for i, level in enumerate(d):
        if level == "#":
            return True
        if i == len(m) or m[i] == "#":
            return False
        if level != "+" and level != m[i]:
            return False
    return len(d) == len(m)


class AclView:
    """One client's access: its user name and client id bound, answers for topics cached (the read check runs
    for every delivery to the client)."""

    __slots__ = ("_read", "_write", "acl", "client_id", "username")

    def __init__(self, acl: Acl, username: str | None, client_id: str) -> None:
        self.acl = acl
        self.username = username
        self.client_id = client_id
        self._read: dict[str, bool] = {}
        self._write: dict[str, bool] = {}

    def can_read(self, topic: str) -> bool:
        cache = self._read
        hit = cache.get(topic)
        if hit is None:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            hit = cache[topic] = self.acl.allows(self.username, self.client_id, topic, Access.READ)
        return hit

    def can_write(self, topic: str) -> bool:
        cache = self._write
        hit = cache.get(topic)
        if hit is None:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            hit = cache[topic] = self.acl.allows(self.username, self.client_id, topic, Access.WRITE)
        return hit

    def may_subscribe(self, topic_filter: str) -> bool:
        return self.acl.may_subscribe(self.username, self.client_id, topic_filter)

    def may_unsubscribe(self, topic_filter: str) -> bool:
        return True  # an ACL file has no rules for UNSUBSCRIBE (dynamic security's views have)


def parse_acl_file(text: str) -> Acl:
    """Reads an ACL file as mosquitto does (aclfile__parse); AclFileError names the first line it refuses."""
    anonymous: list[AclRule] = []
    users: dict[str, list[AclRule]] = {}
    patterns: list[AclRule] = []
    current: list[AclRule] = anonymous
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if line.startswith("#"):
            continue
        words = line.split(" ")
        while words and not words[0]:
            words.pop(0)  # strtok skips leading separators
        if not words:
            continue
        keyword = words[0]
        rest = words[1:]
        if keyword in ("topic", "pattern"):
            while rest and not rest[0]:
                rest.pop(0)
            if not rest:
                raise AclFileError(number, f"`{keyword}` without a topic filter")
            first, tail = rest[0], " ".join(rest[1:]).strip()
            if tail:
                if first not in _KEYWORDS:
                    raise AclFileError(
                        number, f"unknown access {first!r}: `{keyword} [read|write|readwrite|deny] FILTER`"
                    )
                access, flt = _KEYWORDS[first], tail
            else:
                access, flt = Access.READWRITE, first
            error = topic_filter_error(flt)
            if error is not None:
                raise AclFileError(number, f"invalid topic filter {flt!r}: {error}")
            rule = AclRule(flt, access, number, keyword == "pattern")
            target = patterns if keyword == "pattern" else current
            if access is Access.DENY:
                # mosquitto puts deny rules at the front of their list; _decide gives them precedence anyway,
                # and the order of the others only matters for messages.
                target.insert(sum(1 for r in target if r.access is Access.DENY), rule)
            else:
                target.append(rule)
        elif keyword == "user":
            name = " ".join(words[1:]).strip()
            if not name:
                raise AclFileError(number, "`user` without a user name")
            current = users.setdefault(name, [])
        else:
            raise AclFileError(number, f"unknown line {keyword!r}: expected `user`, `topic`, `pattern` or a # comment")
    return Acl(anonymous, users, patterns)
