"""What a reload changed, in words for its one log line: records in, phrases out (sans-IO).

`configuration reloaded: password file /etc/mqtt/passwd: bob removed; ACL file /etc/mqtt/acl: 1 line added,
1 removed; 1 client disconnected, 1 subscription removed` rather than "no change".
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Any

from .acl import Acl, AclRule
from .auth import AuthPolicy
from .broker import PolicyEffect

__all__ = ["effect_changes", "field_changes", "policy_changes"]


def _shown(value: Any) -> str:
    if isinstance(value, frozenset):
        return ",".join(str(v) for v in sorted(value)) or "none"
    return "unset" if value is None else str(getattr(value, "value", value))


def field_changes(old: Any, new: Any, skip: Iterable[str] = ()) -> list[str]:
    """`name OLD -> NEW` for each field of two dataclass records that differs (the fields in `skip` left out); a
    field holding a record of its own (BrokerConfig's `limits`) gives a line per field of it that differs."""
    left = set(skip)
    out: list[str] = []
    for f in dataclasses.fields(old):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if f.name in left or before == after:
            continue
        if dataclasses.is_dataclass(before) and type(before) is type(after):
            out += field_changes(before, after)
        else:
            out.append(f"{f.name} {_shown(before)} -> {_shown(after)}")
    return out


def _lines(acl: Acl | None) -> Counter[tuple[str | None, str, int, bool]]:
    """The ACL's rules, as lines (their section, filter, access, pattern or topic) where they are read from."""
    rules: list[tuple[str | None, AclRule]] = []
    if acl is not None:
        rules += [(None, rule) for rule in acl.anonymous + acl.patterns]
        rules += [(user, rule) for user, own in acl.users.items() for rule in own]
    return Counter((user, rule.filter, int(rule.access), rule.pattern) for user, rule in rules)


def _file(what: str, name: str | None) -> str:
    return f"{what} {name}" if name else what


def _counted(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def effect_changes(effect: PolicyEffect) -> list[str]:
    """`1 client disconnected, 2 subscriptions removed` (the parts that are not 0): what the new policy did to the
    connections; nothing when it touched none."""
    parts = [f"{_counted(effect.disconnected, 'client')} disconnected" if effect.disconnected else "",
             f"{_counted(effect.unsubscribed, 'subscription')} removed" if effect.unsubscribed else ""]  # fmt: skip
    return [", ".join(p for p in parts if p)] if any(parts) else []


def policy_changes(old: AuthPolicy, new: AuthPolicy) -> list[str]:
    """What changed between two authentication policies: the files named, the users of the password file (added,
    removed, with a new password), the lines of the ACL file (added, removed), anonymous access, identities."""
    out: list[str] = []
    if old.password_file != new.password_file:
        out.append(f"password file {new.password_file or 'none'} (was {old.password_file or 'none'})")
    if old.passwords != new.passwords:
        before, after = old.passwords or {}, new.passwords or {}
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        changed = sorted(u for u in set(before) & set(after) if before[u] != after[u])
        words = [f"{', '.join(added)} added" if added else "", f"{', '.join(removed)} removed" if removed else "",
                 f"new password for {', '.join(changed)}" if changed else ""]  # fmt: skip
        what = _file("password file", new.password_file or old.password_file)
        out.append(f"{what}: {', '.join(w for w in words if w)}")
    if old.acl_file != new.acl_file:
        out.append(f"ACL file {new.acl_file or 'none'} (was {old.acl_file or 'none'})")
    before_lines, after_lines = _lines(old.acl), _lines(new.acl)
    if before_lines != after_lines:
        added_n, removed_n = sum((after_lines - before_lines).values()), sum((before_lines - after_lines).values())
        words = [_counted(added_n, "line") + " added" if added_n else "", f"{removed_n} removed" if removed_n else ""]
        if not added_n:
            words[1] = _counted(removed_n, "line") + " removed"
        out.append(f"{_file('ACL file', new.acl_file or old.acl_file)}: {', '.join(w for w in words if w)}")
    out += field_changes(old, new, skip=("passwords", "acl", "password_file", "acl_file"))
    return out
