"""core/acl.py: the ACL file format and mosquitto 2.0's semantics (differential tests against mosquitto itself are
in tests/broker/test_auth.py)."""

from __future__ import annotations

import random

import pytest

from mqtt_cli.core.acl import Access, Acl, AclFileError, AclRule, parse_acl_file
from mqtt_cli.core.topics import matches

ACL = """\
# anonymous clients
topic read public/#
topic deny public/hidden

user alice
topic readwrite alice/#
topic read shared/#
topic deny shared/secret/#
topic write drop/box

user bob smith
topic shared/#

pattern readwrite devices/%c/#
pattern read users/%u/inbox
pattern deny devices/%c/locked
pattern read $SYS/broker/clients/%c
"""


@pytest.fixture(scope="module")
def acl() -> Acl:
    return parse_acl_file(ACL)


def test_parsed_sections(acl: Acl) -> None:
    assert [r.filter for r in acl.anonymous] == ["public/hidden", "public/#"]  # deny rules first, as mosquitto
    assert set(acl.users) == {"alice", "bob smith"}  # the user name is the rest of the line
    assert acl.users["bob smith"] == [AclRule("shared/#", Access.READWRITE, 12)]  # no keyword: readwrite
    assert len(acl.patterns) == 4


@pytest.mark.parametrize(
    ("user", "cid", "topic", "access", "allowed"),
    [
        (None, "c1", "public/news", Access.READ, True),
        (None, "c1", "public/news", Access.WRITE, False),
        (None, "c1", "public/hidden", Access.READ, False),  # deny wins
        (None, "c1", "public", Access.READ, True),  # "a/#" matches "a"
        ("alice", "c1", "public/news", Access.READ, False),  # a user's section replaces the anonymous one
        ("alice", "c1", "alice/x/y", Access.WRITE, True),
        ("alice", "c1", "shared/a", Access.READ, True),
        ("alice", "c1", "shared/a", Access.WRITE, False),
        ("alice", "c1", "shared/secret/x", Access.READ, False),
        ("alice", "c1", "drop/box", Access.WRITE, True),
        ("alice", "c1", "drop/box", Access.READ, False),
        ("bob smith", "c1", "shared/secret/x", Access.WRITE, True),
        ("carol", "c1", "alice/x", Access.READ, False),  # a user without a section: patterns only
        ("carol", "c1", "devices/c1/temp", Access.WRITE, True),
        ("carol", "c1", "devices/c1", Access.READ, True),
        ("carol", "c1", "devices/c2/temp", Access.READ, False),
        ("carol", "c1", "devices/c1/locked", Access.READ, False),  # pattern deny
        ("alice", "c1", "devices/c1/locked", Access.WRITE, False),
        ("carol", "c1", "users/carol/inbox", Access.READ, True),
        ("carol", "c1", "users/alice/inbox", Access.READ, False),
        (None, "c1", "users/%u/inbox", Access.READ, False),  # %u patterns skip clients without a user name
        (None, "c1", "devices/c1/x", Access.READ, True),
        ("carol", "c+", "devices/c+/x", Access.READ, False),  # dangerous client id: no patterns
        ("ca#", "c1", "devices/c1/x", Access.READ, False),  # dangerous user name
        ("carol", "a/b", "devices/a/b/x", Access.READ, False),  # %c is one whole level
        ("carol", "c1", "$SYS/broker/clients/c1", Access.READ, True),
        ("bob smith", "c1", "$SYS/x", Access.READ, False),
    ],
)
def test_semantics(acl: Acl, user: str | None, cid: str, topic: str, access: Access, allowed: bool) -> None:
    assert acl.allows(user, cid, topic, access) is allowed
    view = acl.view(user, cid)
    check = view.can_read if access is Access.READ else view.can_write
    assert check(topic) is allowed
    assert check(topic) is allowed  # from the cache


def test_hash_does_not_grant_dollar_topics() -> None:
    acl = parse_acl_file("topic readwrite #\ntopic read +/x\n")
    assert acl.allows(None, "c", "a/b", Access.WRITE)
    assert not acl.allows(None, "c", "$SYS/broker/uptime", Access.READ)
    assert not acl.allows(None, "c", "$x/x", Access.READ)
    assert parse_acl_file("topic read $SYS/#\n").allows(None, "c", "$SYS/broker/uptime", Access.READ)


def test_no_section_and_no_patterns_denies() -> None:
    acl = parse_acl_file("user alice\ntopic #\n")
    assert not acl.allows(None, "c", "a", Access.READ)
    assert not acl.allows("bob", "c", "a", Access.READ)


@pytest.mark.parametrize(
    ("user", "cid", "flt", "granted"),
    [
        (None, "c1", "public/#", True),
        (None, "c1", "#", True),  # some topics under # are readable
        (None, "c1", "public/hidden", False),  # all of it denied
        (None, "c1", "+/hidden", False),  # meets public/# only in public/hidden, which is denied
        (None, "c1", "secret/#", False),
        (None, "c1", "$SYS/#", True),  # $SYS/broker/clients/c1, by the last pattern
        (None, "c1", "$SYS/broker/uptime", False),
        ("bob smith", "c+", "$SYS/#", False),
        ("alice", "c1", "shared/secret/#", False),
        ("alice", "c1", "shared/+/x", True),
        ("alice", "c1", "drop/box", False),  # write only
        ("alice", "c1", "$share/g/alice/#", True),  # shared: the filter after the group
        ("alice", "c1", "$share/g/public/#", False),
        ("carol", "c1", "devices/+/temp", True),  # devices/c1/temp
        ("carol", "c1", "devices/c2/#", False),
        ("carol", "c1", "devices/c1/locked", False),
        ("carol", "c1", "devices/c1/locked/#", True),  # the deny is for devices/c1/locked only
        ("carol", "c1", "$SYS/broker/clients/+", True),
        ("carol", "c+", "devices/#", False),
    ],
)
def test_may_subscribe(acl: Acl, user: str | None, cid: str, flt: str, granted: bool) -> None:
    assert acl.may_subscribe(user, cid, flt) is granted


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("topic\n", 1, "without a topic filter"),
        ("user\n", 1, "without a user name"),
        ("\n# c\ntopic readonly a/b\n", 3, "unknown access 'readonly'"),
        ("topic read a/#/b\n", 1, "invalid topic filter"),
        ("pattern read a+\n", 1, "invalid topic filter"),
        ("users alice\n", 1, "unknown line 'users'"),
    ],
)
def test_bad_lines(text: str, line: int, words: str) -> None:
    with pytest.raises(AclFileError) as err:
        parse_acl_file(text)
    assert err.value.line == line and words in str(err.value)


def _mosquitto(acl: Acl, user: str | None, cid: str, topic: str, access: Access) -> bool:
    """mosquitto_acl_check_default transcribed as the linear loop it is (deny rules first in each list)."""

    def bind(rule: AclRule) -> str | None:
        levels = []
        for level in rule.filter.split("/"):
            if rule.pattern and level == "%c":
                level = cid
            elif rule.pattern and level == "%u":
                level = user  # type: ignore[assignment]
            levels.append(level)
        return "/".join(levels)

    def loop(rules: list[AclRule]) -> bool | None:
        for rule in rules:
            flt = bind(rule)
            if flt is None:
                continue
            if topic[0] == "$" and flt[0] != "$":
                continue
            if matches(flt, topic):
                if rule.access is Access.DENY:
                    return False
                if rule.access & access:
                    return True
        return None

    own = acl.users.get(user) if user is not None else acl.anonymous
    if not own and not acl.patterns:
        return False
    decided = loop(own or [])
    if decided is not None:
        return decided
    if "+" in cid or "#" in cid or (user is not None and ("+" in user or "#" in user)):
        return False
    return bool(loop([r for r in acl.patterns if user is not None or "%u" not in r.filter]))


def random_acl(rng: random.Random) -> Acl:
    words = ["a", "b", "c", "$SYS", "%c", "%u", "+"]
    lines = []
    for _ in range(300):
        depth = rng.randint(1, 4)
        levels = [rng.choice(words) for _ in range(depth)]
        levels = [lv for i, lv in enumerate(levels) if i == 0 or lv != "$SYS"] or ["a"]
        if rng.random() < 0.3:
            levels.append("#")
        kind = rng.choice(["topic", "pattern", "pattern"])
        access = rng.choice(["read", "write", "readwrite", "deny", "read", "readwrite"])
        if rng.random() < 0.1:
            lines.append(f"user {rng.choice(['u1', 'u2'])}")
        lines.append(f"{kind} {access} {'/'.join(levels)}")
    return parse_acl_file("\n".join(lines) + "\n")


TOPICS = ["a", "a/b", "b/c/a", "$SYS/a", "$SYS/c1", "c1/a", "u1/c1", "a/u1/b", "c/c/c/c", "a/b/c1/u2", "$SYS/u1/b"]


def test_tries_agree_with_the_linear_loop() -> None:
    acl = random_acl(random.Random(17))
    topics = ["a", "a/b", "b/c/a", "$SYS/a", "$SYS/c1", "c1/a", "u1/c1", "a/u1/b", "c/c/c/c", "a/b/c1/u2", "$SYS/u1/b"]
    for user in (None, "u1", "u2", "u3"):
        for cid in ("c1", "u1"):
            for topic in topics:
                for access in (Access.READ, Access.WRITE):
                    assert acl.allows(user, cid, topic, access) == _mosquitto(acl, user, cid, topic, access), (
                        user,
                        cid,
                        topic,
                        access,
                    )


def test_subscribe_refusals_are_sound() -> None:
    """A refused filter has no readable topic: checked on every sample topic it matches, over random ACLs."""
    rng = random.Random(23)
    levels = ["a", "b", "c", "c1", "u1", "$SYS", "+"]
    for _ in range(20):
        acl = random_acl(rng)
        for _ in range(40):
            flt_levels = [rng.choice(levels) for _ in range(rng.randint(1, 4))]
            flt_levels = [lv for i, lv in enumerate(flt_levels) if i == 0 or lv != "$SYS"]
            if rng.random() < 0.4:
                flt_levels.append("#")
            flt = "/".join(flt_levels)
            for user in (None, "u1"):
                if acl.may_subscribe(user, "c1", flt):
                    continue
                for topic in TOPICS:
                    if matches(flt, topic):
                        assert not acl.allows(user, "c1", topic, Access.READ), (flt, topic, user)
