"""mosquitto's dynamic security, sans-IO: clients, groups, roles and their ACLs, changed at run time.

What mosquitto 2.0's plugin (plugins/dynamic-security) keeps and how it decides, with its JSON:

* the state is its `dynamic-security.json` (`from_json` / `to_json`): the default ACL access, clients (user name,
  optional client id, PBKDF2-SHA512 password with salt and iterations, base64), groups, roles with ACLs, the
  anonymous group; a file written by mosquitto is read here and the other way round;
* a CONNECT with a user name is admitted when that client exists, is enabled, its client id (if set) is the one
  the client connects with, and the password matches (`authenticate`);
* an ACL check walks the client's roles (highest priority first), then its groups' roles (groups by priority),
  each role's ACLs of the type asked for (by priority); the first ACL whose topic matches decides (`allow`).
  Nothing matching: the default access, which never opens a ``$CONTROL`` topic. A client without a user name
  is checked against the anonymous group's roles; a user name that is not a client gets nothing;
* requests on ``$CONTROL/dynamic-security/v1`` are `{"commands": [...]}`; `handle` answers with mosquitto's
  `{"responses": [...]}` (its command names, error strings, list counts and offsets) and names the clients to
  disconnect so that a change applies at once (mosquitto kicks the same ones).

Randomness (password salts) comes from the caller: `DynamicSecurity(salt=...)`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from .acl import Acl, AclView
from .passwords import DEFAULT_ITERATIONS, SALT_LENGTH, HashKind, PasswordEntry, hash_password, verify_password
from .topics import topic_filter_error

__all__ = [
    "CONTROL_TOPIC",
    "RESPONSE_TOPIC",
    "AclType",
    "Check",
    "ControlResult",
    "DynamicSecurity",
    "DynsecError",
    "DynsecView",
    "matches_levels",
]

CONTROL_TOPIC: Final = "$CONTROL/dynamic-security/v1"
RESPONSE_TOPIC: Final = "$CONTROL/dynamic-security/v1/response"
_NO_PRIORITY: Final = -1  # a role or group membership without a priority (mosquitto's default)


class DynsecError(ValueError):
    """A dynamic-security.json that cannot be used (the message says where)."""


class AclType(Enum):
    """The ACL kinds a role holds (their JSON names)."""

    PUBLISH_SEND = "publishClientSend"
    PUBLISH_RECEIVE = "publishClientReceive"
    SUBSCRIBE_LITERAL = "subscribeLiteral"
    SUBSCRIBE_PATTERN = "subscribePattern"
    UNSUBSCRIBE_LITERAL = "unsubscribeLiteral"
    UNSUBSCRIBE_PATTERN = "unsubscribePattern"


class Check(Enum):
    """What a client asks to do (the default access's JSON names)."""

    PUBLISH_SEND = "publishClientSend"
    PUBLISH_RECEIVE = "publishClientReceive"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"


_ACL_TYPES: Final = {t.value.lower(): t for t in AclType}
_CHECKS: Final = {c.value.lower(): c for c in Check}


@dataclass(slots=True)
class RoleAcl:
    topic: str
    priority: int = 0
    allow: bool = False
    levels: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the topic split, once

    def __post_init__(self) -> None:
        self.levels = tuple(self.topic.split("/"))


@dataclass(slots=True)
class Member:
    """A role of a client or group, a group of a client, or a client of a group: a name and a priority."""

    name: str
    priority: int = _NO_PRIORITY


@dataclass(slots=True)
class Role:
    name: str
    textname: str | None = None
    textdescription: str | None = None
    acls: dict[AclType, list[RoleAcl]] = field(default_factory=lambda: {t: [] for t in AclType})


@dataclass(slots=True)
class Client:
    username: str
    clientid: str | None = None
    textname: str | None = None
    textdescription: str | None = None
    disabled: bool = False
    password: PasswordEntry | None = None
    roles: list[Member] = field(default_factory=list)
    groups: list[Member] = field(default_factory=list)


@dataclass(slots=True)
class Group:
    name: str
    textname: str | None = None
    textdescription: str | None = None
    roles: list[Member] = field(default_factory=list)
    clients: list[Member] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ControlResult:
    """What one request did: the response's payload, who must be disconnected (their rights changed), whether
    the state changed (to be saved), and a log line per change ("who | what")."""

    response: bytes
    kick: frozenset[str] = frozenset()
    kick_anonymous: bool = False
    changed: bool = False
    log: tuple[str, ...] = ()


def _by_priority(items: list[Member]) -> None:
    items.sort(key=lambda m: (-m.priority, m.name))  # mosquitto's rolelist/grouplist order


def _add_member(items: list[Member], name: str, priority: int) -> bool:
    if any(m.name == name for m in items):
        return False
    items.append(Member(name, priority))
    _by_priority(items)
    return True


def _add_acl(acls: list[RoleAcl], acl: RoleAcl) -> None:
    """After those of a higher or equal priority (mosquitto's insertion order)."""
    at = len(acls)
    for i, other in enumerate(acls):
        if other.priority < acl.priority:
            at = i
            break
    acls.insert(at, acl)


def _sub_acl_check(acl: str, sub: str) -> bool:
    """mosquitto's sub_acl_check: whether a subscribe/unsubscribe pattern ACL covers the filter `sub`."""
    if acl == "#":
        return True
    acl_hash = acl == "#" or acl.endswith("/#")
    sub_hash = sub == "#" or sub.endswith("/#")
    if acl_hash:
        acl = acl[:-2] if len(acl) > 1 else ""
    if sub_hash:
        sub = sub[:-2] if len(sub) > 1 else ""
    if sub_hash and not acl_hash:
        return False
    a, s = acl.split("/"), sub.split("/")
    if len(a) > len(s) or (len(s) > len(a) and not acl_hash):
        return False
    return all(i >= len(a) or a[i] == "+" or a[i] == s[i] for i in range(len(s)))


class _Invalid(Exception):
    """A request field of the wrong type or missing: the command's error string."""


def _string(obj: dict[str, Any], key: str, optional: bool, error: str) -> str | None:
    value = obj.get(key)
    if value is None and key not in obj:
        if optional:
            return None
        raise _Invalid(error)
    if not isinstance(value, str):
        raise _Invalid(error)
    return value


def _int(obj: dict[str, Any], key: str, default: int) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return int(value)


def _bool(obj: dict[str, Any], key: str, default: bool) -> bool:
    value = obj.get(key, default)
    return value if isinstance(value, bool) else default


def _acl_json(acl_type: AclType, acl: RoleAcl) -> dict[str, Any]:
    return {"acltype": acl_type.value, "topic": acl.topic, "priority": acl.priority, "allow": acl.allow}


def _members_json(items: list[Member], key: str) -> list[dict[str, Any]]:
    out = []
    for m in items:
        entry: dict[str, Any] = {key: m.name}
        if m.priority != _NO_PRIORITY:
            entry["priority"] = m.priority
        out.append(entry)
    return out


def _texts(obj: dict[str, Any], textname: str | None, textdescription: str | None) -> None:
    if textname is not None:
        obj["textname"] = textname
    if textdescription is not None:
        obj["textdescription"] = textdescription


def _b64(text: Any, what: str, size: int) -> bytes:
    try:
        data = base64.b64decode(str(text).encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise DynsecError(f"{what} is not base64") from None
    if len(data) != size:
        raise DynsecError(f"{what} is {len(data)} bytes, not {size}")
    return data


class DynamicSecurity:
    """The whole state, its checks and its commands. `generation` grows with every change (views cache by it)."""

    def __init__(self, salt: Callable[[int], bytes]) -> None:
        self.salt = salt
        self.default_access: dict[Check, bool] = dict.fromkeys(Check, False)
        self.clients: dict[str, Client] = {}
        self.groups: dict[str, Group] = {}
        self.roles: dict[str, Role] = {}
        self.anonymous_group: str | None = None
        self.generation = 0

    # --- the file ---------------------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, text: str, salt: Callable[[int], bytes]) -> DynamicSecurity:
        """Reads a dynamic-security.json (empty text: nothing configured, as mosquitto); DynsecError says what is
        wrong. Entries mosquitto would skip silently (a bad salt, a client without a user name) are refused."""
        ds = cls(salt)
        if not text.strip():
            return ds
        try:
            tree = json.loads(text, object_pairs_hook=_keys)
        except json.JSONDecodeError as exc:
            raise DynsecError(f"line {exc.lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(tree, dict):
            raise DynsecError("not a JSON object")
        access = tree.get("defaultaclaccess")
        if isinstance(access, dict):
            for check in Check:
                ds.default_access[check] = _bool(access, check.value.lower(), False)
        for key in ("roles", "clients", "groups"):
            if key in tree and not isinstance(tree[key], list):
                raise DynsecError(f"{key!r} is not a list")
        for j_role in tree.get("roles", []):
            if not isinstance(j_role, dict) or not isinstance(j_role.get("rolename"), str):
                raise DynsecError(f"a role without a 'rolename': {j_role!r}")
            name = j_role["rolename"]
            if name in ds.roles:
                continue
            role = ds.roles[name] = Role(name, _opt_str(j_role, "textname"), _opt_str(j_role, "textdescription"))
            ds._load_acls(role, j_role.get("acls"))
        for j_client in tree.get("clients", []):
            if not isinstance(j_client, dict) or not isinstance(j_client.get("username"), str):
                raise DynsecError(f"a client without a 'username': {j_client!r}")
            ds._load_client(j_client)
        for j_group in tree.get("groups", []):
            if not isinstance(j_group, dict) or not isinstance(j_group.get("groupname"), str):
                raise DynsecError(f"a group without a 'groupname': {j_group!r}")
            name = j_group["groupname"]
            if name in ds.groups:
                continue
            group = ds.groups[name] = Group(name, _opt_str(j_group, "textname"), _opt_str(j_group, "textdescription"))
            for ref in _refs(j_group.get("roles"), "rolename"):
                if ref.name in ds.roles:
                    _add_member(group.roles, ref.name, ref.priority)
            for ref in _refs(j_group.get("clients"), "username"):
                ds._join(ref.name, name, ref.priority)
        anonymous = tree.get("anonymousgroup")
        if isinstance(anonymous, str) and anonymous in ds.groups:
            ds.anonymous_group = anonymous
        return ds

    def _load_acls(self, role: Role, j_acls: Any) -> None:
        if not isinstance(j_acls, list):
            return
        for j_acl in j_acls:
            if not isinstance(j_acl, dict):
                continue
            acl_type = _ACL_TYPES.get(str(j_acl.get("acltype", "")).lower())
            topic = j_acl.get("topic")
            if acl_type is None or not isinstance(topic, str):
                continue
            acls = role.acls[acl_type]
            if any(a.topic == topic for a in acls):
                continue
            _add_acl(acls, RoleAcl(topic, _int(j_acl, "priority", 0), _bool(j_acl, "allow", False)))

    def _load_client(self, j: dict[str, Any]) -> None:
        username = j["username"]
        if username in self.clients:
            return
        client = Client(username, _opt_str(j, "clientid"), _opt_str(j, "textname"), _opt_str(j, "textdescription"))
        client.disabled = _bool(j, "disabled", False)
        salt, password, iterations = j.get("salt"), j.get("password"), _int(j, "iterations", -1)
        if isinstance(salt, str) and isinstance(password, str) and iterations > 0:
            what = f"client {username!r}:"
            client.password = PasswordEntry(
                username,
                HashKind.PBKDF2_SHA512,
                _b64(salt, f"{what} the salt", SALT_LENGTH),
                _b64(password, f"{what} the password hash", 64),
                iterations,
            )
        for ref in _refs(j.get("roles"), "rolename"):
            if ref.name in self.roles:
                _add_member(client.roles, ref.name, ref.priority)
        self.clients[username] = client

    def to_json(self) -> dict[str, Any]:
        """The state as mosquitto writes dynamic-security.json (its key order)."""
        clients = []
        for c in self._sorted(self.clients):
            j: dict[str, Any] = {"username": c.username}
            if c.clientid is not None:
                j["clientid"] = c.clientid
            _texts(j, c.textname, c.textdescription)
            if c.disabled:
                j["disabled"] = True
            j["roles"] = _members_json(c.roles, "rolename")
            if c.password is not None:
                j["password"] = base64.b64encode(c.password.digest).decode()
                j["salt"] = base64.b64encode(c.password.salt).decode()
                j["iterations"] = c.password.iterations
            clients.append(j)
        groups = []
        for g in self._sorted(self.groups):
            jg: dict[str, Any] = {"groupname": g.name}
            _texts(jg, g.textname, g.textdescription)
            jg["roles"] = _members_json(g.roles, "rolename")
            jg["clients"] = _members_json(g.clients, "username")
            groups.append(jg)
        tree: dict[str, Any] = {
            "defaultACLAccess": {c.value: self.default_access[c] for c in Check},
            "clients": clients,
            "groups": groups,
        }
        if self.anonymous_group is not None:
            tree["anonymousGroup"] = self.anonymous_group
        tree["roles"] = [self._role_json(r) for r in self._sorted(self.roles)]
        return tree

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent="\t", ensure_ascii=False) + "\n"

    @staticmethod
    def _sorted(table: dict[str, Any]) -> list[Any]:
        return [table[k] for k in sorted(table)]

    # --- checks -----------------------------------------------------------------------------------------------

    def authenticate(self, username: str, password: bytes | None, client_id: str) -> bool:
        """mosquitto's basic auth callback, with its "defer" being a refusal (no other plugin to ask)."""
        client = self.clients.get(username)
        if client is None or password is None or client.disabled or client.password is None:
            return False
        if client.clientid is not None and client.clientid != client_id:
            return False
        return verify_password(client.password, password)

    def still_admitted(self, username: str | None, client_id: str) -> bool:
        """Whether a client connected with this user name may stay (it exists, is enabled, its client id fits)."""
        if username is None:
            return True
        client = self.clients.get(username)
        return client is not None and not client.disabled and client.clientid in (None, client_id)

    def password_of(self, username: str) -> PasswordEntry | None:
        client = self.clients.get(username)
        return client.password if client is not None else None

    def roles_of(self, username: str) -> set[str]:
        """The names of the roles a client holds, directly or through its groups."""
        lists = self._role_lists(username) or []
        return {member.name for roles in lists for member in roles}

    def _role_lists(self, username: str | None) -> list[list[Member]] | None:
        if username is None:
            group = self.groups.get(self.anonymous_group) if self.anonymous_group is not None else None
            return [group.roles] if group is not None else []
        client = self.clients.get(username)
        if client is None:
            return None
        lists = [client.roles]
        lists += [self.groups[m.name].roles for m in client.groups if m.name in self.groups]
        return lists

    def allows(self, username: str | None, check: Check, topic: str) -> bool:
        lists = self._role_lists(username)
        if lists is None:
            return False  # a user name that is not a client: mosquitto's plugin defers, which denies
        split = topic.split("/")
        for roles in lists:
            for member in roles:
                role = self.roles.get(member.name)
                if role is None:
                    continue
                decided = _decide(role, check, topic, split)
                if decided is not None:
                    return decided
        if not self.default_access[check]:
            return False
        return not topic.startswith("$CONTROL")  # never opened by default: only explicit ACLs grant it

    def view(self, username: str | None, client_id: str) -> DynsecView:
        return DynsecView(self, username, client_id)

    # --- commands ---------------------------------------------------------------------------------------------

    def handle(self, payload: bytes, admin_client_id: str, admin_username: str | None) -> ControlResult:
        """One request on $CONTROL/dynamic-security/v1, as mosquitto's plugin answers it."""
        run = _Run(self, f"user {admin_username!r}" if admin_username is not None else "anonymous")
        try:
            tree = json.loads(payload, object_pairs_hook=_keys)
        except (ValueError, UnicodeDecodeError):
            tree = None
        if tree is None:
            run.reply("Unknown command", "Payload not valid JSON")
        elif not isinstance(tree, dict) or not isinstance(tree.get("commands"), list):
            run.reply("Unknown command", "Invalid/missing commands")
        else:
            for command in tree["commands"]:
                if not run.command(command):
                    break
        response = json.dumps({"responses": run.responses}, separators=(",", ":"), ensure_ascii=False)
        if run.changed:
            self.generation += 1
        return ControlResult(response.encode(), frozenset(run.kick), run.kick_anonymous, run.changed, tuple(run.log))

    def _role_json(self, role: Role) -> dict[str, Any]:
        j: dict[str, Any] = {"rolename": role.name}
        _texts(j, role.textname, role.textdescription)
        j["acls"] = [_acl_json(t, a) for t in AclType for a in role.acls[t]]
        return j

    def _join(self, username: str, groupname: str, priority: int) -> str | None:
        """Puts a client into a group; the error string when it cannot."""
        client = self.clients.get(username)
        if client is None:
            return "Client not found"
        group = self.groups.get(groupname)
        if group is None:
            return "Group not found"
        if any(m.name == username for m in group.clients):
            return "Client is already in this group"
        group.clients.append(Member(username, priority))
        group.clients.sort(key=lambda m: m.name)
        _add_member(client.groups, groupname, priority)
        return None

    def _leave(self, username: str, groupname: str) -> None:
        group = self.groups.get(groupname)
        client = self.clients.get(username)
        if group is not None:
            group.clients = [m for m in group.clients if m.name != username]
        if client is not None:
            client.groups = [m for m in client.groups if m.name != groupname]

    def role_users(self, rolename: str) -> tuple[set[str], bool]:
        """The user names holding a role, directly or through a group, and whether the anonymous group does."""
        users = {c.username for c in self.clients.values() if any(m.name == rolename for m in c.roles)}
        anonymous = False
        for group in self.groups.values():
            if any(m.name == rolename for m in group.roles):
                users.update(m.name for m in group.clients)
                anonymous = anonymous or group.name == self.anonymous_group
        return users, anonymous

    def group_users(self, groupname: str) -> set[str]:
        group = self.groups.get(groupname)
        return {m.name for m in group.clients} if group is not None else set()


def _keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object with its keys in lower case, the first of equal ones kept: mosquitto reads keys with cJSON's
    case-insensitive lookup (its own `mosquitto_ctrl dynsec init` writes "textName")."""
    return {key.lower(): value for key, value in reversed(pairs)}


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def _check_names(items: list[Any], field: str, key: str, known: Mapping[str, Any]) -> None:
    """Every object of a modify command's list names an existing entry (mosquitto's checks and messages)."""
    for item in items:
        name = item.get(key) if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise _Invalid(f"'{field}' contains an object with an invalid '{key}'")
        if name not in known:
            raise _Invalid(f"'{field}' contains an object with a '{key}' that does not exist")


def _refs(items: Any, key: str) -> list[Member]:
    """Role or client references of a JSON list ({key: NAME, "priority": N}); others skipped, as mosquitto."""
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get(key), str):
            out.append(Member(item[key], _int(item, "priority", _NO_PRIORITY)))
    return out


def matches_levels(flt: tuple[str, ...], topic: list[str]) -> bool:
    """mosquitto_topic_matches_sub on split levels (a wildcard first level does not match a $-topic)."""
    if topic[0][:1] == "$" and flt[0] in ("+", "#"):
        return False
    n = len(topic)
    for i, level in enumerate(flt):
        if level == "#":
            return True
        if i >= n or (level != "+" and level != topic[i]):
            return False
    return len(flt) == n


def _decide(role: Role, check: Check, topic: str, split: list[str]) -> bool | None:
    acls = role.acls
    if check is Check.PUBLISH_SEND or check is Check.PUBLISH_RECEIVE:
        kind = AclType.PUBLISH_SEND if check is Check.PUBLISH_SEND else AclType.PUBLISH_RECEIVE
        for acl in acls[kind]:
            if matches_levels(acl.levels, split):
                return acl.allow
        return None
    literal, pattern = (
        (AclType.SUBSCRIBE_LITERAL, AclType.SUBSCRIBE_PATTERN)
        if check is Check.SUBSCRIBE
        else (AclType.UNSUBSCRIBE_LITERAL, AclType.UNSUBSCRIBE_PATTERN)
    )
    for acl in acls[literal]:
        if acl.topic == topic:
            return acl.allow
    for acl in acls[pattern]:
        if _sub_acl_check(acl.topic, topic):
            return acl.allow
    return None


_EMPTY_ACL: Final = Acl()


class DynsecView(AclView):
    """One client's rights under dynamic security, answers cached until the state changes."""

    __slots__ = ("_generation", "ds")

    def __init__(self, ds: DynamicSecurity, username: str | None, client_id: str) -> None:
        super().__init__(_EMPTY_ACL, username, client_id)
        self.ds = ds
        self._generation = ds.generation

    def _fresh(self) -> None:
        if self._generation != self.ds.generation:
            self._generation = self.ds.generation
            self._read.clear()
            self._write.clear()

    def can_read(self, topic: str) -> bool:
        self._fresh()
        hit = self._read.get(topic)
        if hit is None:
            hit = self._read[topic] = self.ds.allows(self.username, Check.PUBLISH_RECEIVE, topic)
        return hit

    def can_write(self, topic: str) -> bool:
        self._fresh()
        hit = self._write.get(topic)
        if hit is None:
            hit = self._write[topic] = self.ds.allows(self.username, Check.PUBLISH_SEND, topic)
        return hit

    # The whole filter, $share/GROUP/ included, as mosquitto checks it: a role grants a shared subscription with
    # an ACL on "$share/..." (or "#").
    def may_subscribe(self, topic_filter: str) -> bool:
        return self.ds.allows(self.username, Check.SUBSCRIBE, topic_filter)

    def may_unsubscribe(self, topic_filter: str) -> bool:
        return self.ds.allows(self.username, Check.UNSUBSCRIBE, topic_filter)


class _Run:
    """One request's commands, run in order, with what they answer and change."""

    def __init__(self, ds: DynamicSecurity, admin: str) -> None:
        self.ds = ds
        self.admin = admin
        self.responses: list[dict[str, Any]] = []
        self.kick: set[str] = set()
        self.kick_anonymous = False
        self.changed = False
        self.log: list[str] = []

    def reply(self, command: str, error: str | None = None, correlation: str | None = None) -> None:
        out: dict[str, Any] = {"command": command}
        if error is not None:
            out["error"] = error
        if correlation is not None:
            out["correlationData"] = correlation
        self.responses.append(out)

    def data(self, command: str, data: dict[str, Any], correlation: str | None) -> None:
        out: dict[str, Any] = {"command": command, "data": data}
        if correlation is not None:
            out["correlationData"] = correlation
        self.responses.append(out)

    def done(self, command: str, correlation: str | None, what: str) -> None:
        """A change made: answered, saved, logged."""
        self.changed = True
        self.reply(command, None, correlation)
        self.log.append(f"{self.admin} | {command}{' | ' + what if what else ''}")

    def command(self, obj: Any) -> bool:
        """Runs one command; False stops the request (mosquitto's answer to a bad correlationData)."""
        if not isinstance(obj, dict):
            self.reply("Unknown command", "Command not an object")
            return True
        name = obj.get("command")
        if not isinstance(name, str):
            self.reply("Unknown command", "Missing command")
            return True
        correlation = obj.get("correlationdata")
        if correlation is not None and not isinstance(correlation, str):
            self.reply(name, "Invalid correlationData data type.")
            return False
        handler = _HANDLERS.get(name.lower())
        if handler is None:
            self.reply(name, "Unknown command", correlation)
            return True
        canonical, method = handler
        try:
            method(self, obj, correlation)
        except _Invalid as exc:
            self.reply(canonical, str(exc), correlation)
        return True

    # --- the default access ----------------------------------------------------------------------------------

    def set_default_acl_access(self, obj: dict[str, Any], corr: str | None) -> None:
        acls = obj.get("acls")
        if not isinstance(acls, list):
            raise _Invalid("Missing/invalid actions array")
        said = []
        for item in acls:
            if isinstance(item, dict) and isinstance(item.get("acltype"), str) and isinstance(item.get("allow"), bool):
                check = _CHECKS.get(item["acltype"].lower())
                if check is not None:
                    self.ds.default_access[check] = item["allow"]
                said.append(f"acltype={item['acltype']} | allow={'true' if item['allow'] else 'false'}")
        self.done("setDefaultACLAccess", corr, " | ".join(said))

    def get_default_acl_access(self, obj: dict[str, Any], corr: str | None) -> None:
        acls = [{"acltype": c.value, "allow": self.ds.default_access[c]} for c in Check]
        self.data("getDefaultACLAccess", {"acls": acls}, corr)

    # --- clients ----------------------------------------------------------------------------------------------

    def _client(self, obj: dict[str, Any]) -> Client:
        username = _string(obj, "username", False, "Invalid/missing username")
        assert username is not None
        client = self.ds.clients.get(username)
        if client is None:
            raise _Invalid("Client not found")
        return client

    def _new_password(self, username: str, password: str) -> PasswordEntry:
        return hash_password(username, password, self.ds.salt(SALT_LENGTH), HashKind.PBKDF2_SHA512, DEFAULT_ITERATIONS)

    def _role_refs(self, obj: dict[str, Any]) -> list[Member] | None:
        """A command's "roles" (None: not given); _Invalid as mosquitto's rolelist loading says."""
        if "roles" not in obj:
            return None
        items = obj["roles"]
        if not isinstance(items, list):
            raise _Invalid("'roles' not an array or missing/invalid rolename")
        out: list[Member] = []
        for item in items:
            name = item.get("rolename") if isinstance(item, dict) else None
            if not isinstance(name, str):
                raise _Invalid("'roles' not an array or missing/invalid rolename")
            if name not in self.ds.roles:
                raise _Invalid("Role not found")
            _add_member(out, name, _int(item, "priority", _NO_PRIORITY))
        return out

    def create_client(self, obj: dict[str, Any], corr: str | None) -> None:
        username = _string(obj, "username", False, "Invalid/missing username")
        assert username is not None
        password = _string(obj, "password", True, "Invalid/missing password")
        clientid = _string(obj, "clientid", True, "Invalid/missing client id")
        textname = _string(obj, "textname", True, "Invalid/missing textname")
        textdescription = _string(obj, "textdescription", True, "Invalid/missing textdescription")
        if username in self.ds.clients:
            raise _Invalid("Client already exists")
        roles = self._role_refs(obj) or []
        groups = _refs(obj.get("groups"), "groupname")
        if any(g.name not in self.ds.groups for g in groups):
            raise _Invalid("Group not found")
        client = Client(username, clientid or None, textname, textdescription, roles=roles)
        if password is not None:
            client.password = self._new_password(username, password)
        self.ds.clients[username] = client
        for g in groups:
            self.ds._join(username, g.name, g.priority)
        self.done("createClient", corr, f"username={username} | password={'*****' if password else 'no password'}")

    def delete_client(self, obj: dict[str, Any], corr: str | None) -> None:
        client = self._client(obj)
        for g in list(client.groups):
            self.ds._leave(client.username, g.name)
        del self.ds.clients[client.username]
        self.kick.add(client.username)
        self.done("deleteClient", corr, f"username={client.username}")

    def enable_client(self, obj: dict[str, Any], corr: str | None) -> None:
        client = self._client(obj)
        client.disabled = False
        self.done("enableClient", corr, f"username={client.username}")

    def disable_client(self, obj: dict[str, Any], corr: str | None) -> None:
        client = self._client(obj)
        client.disabled = True
        self.kick.add(client.username)
        self.done("disableClient", corr, f"username={client.username}")

    def set_client_id(self, obj: dict[str, Any], corr: str | None) -> None:
        _string(obj, "username", False, "Invalid/missing username")
        clientid = _string(obj, "clientid", True, "Invalid/missing client ID")
        client = self._client(obj)
        client.clientid = clientid or None
        self.kick.add(client.username)
        self.done("setClientId", corr, f"username={client.username} | clientid={client.clientid}")

    def set_client_password(self, obj: dict[str, Any], corr: str | None) -> None:
        _string(obj, "username", False, "Invalid/missing username")
        password = _string(obj, "password", False, "Invalid/missing password")
        assert password is not None
        if not password:
            raise _Invalid("Empty password is not allowed")
        client = self._client(obj)
        client.password = self._new_password(client.username, password)
        self.kick.add(client.username)
        self.done("setClientPassword", corr, f"username={client.username} | password=******")

    def modify_client(self, obj: dict[str, Any], corr: str | None) -> None:
        client = self._client(obj)
        clientid = obj.get("clientid")
        password = obj.get("password")
        textname, textdescription = obj.get("textname"), obj.get("textdescription")
        roles = self._role_refs(obj)
        groups = obj.get("groups")
        if isinstance(groups, list):
            _check_names(groups, "groups", "groupname", self.ds.groups)
            for g in list(client.groups):
                self.ds._leave(client.username, g.name)
            for ref in _refs(groups, "groupname"):
                self.ds._join(client.username, ref.name, ref.priority)
        if isinstance(password, str) and password:
            client.password = self._new_password(client.username, password)
        if isinstance(clientid, str):
            client.clientid = clientid or None
        if isinstance(textname, str):
            client.textname = textname
        if isinstance(textdescription, str):
            client.textdescription = textdescription
        if roles is not None:
            client.roles = roles
        self.kick.add(client.username)
        self.done("modifyClient", corr, f"username={client.username}")

    def _client_json(self, client: Client, verbose: bool) -> Any:
        if not verbose:
            return client.username
        j: dict[str, Any] = {"username": client.username}
        if client.clientid is not None:
            j["clientid"] = client.clientid
        _texts(j, client.textname, client.textdescription)
        if client.disabled:
            j["disabled"] = True
        j["roles"] = _members_json(client.roles, "rolename")
        j["groups"] = _members_json(client.groups, "groupname")
        return j

    def get_client(self, obj: dict[str, Any], corr: str | None) -> None:
        client = self._client(obj)
        self.data("getClient", {"client": self._client_json(client, True)}, corr)

    def _page(self, obj: dict[str, Any], items: list[Any]) -> list[Any]:
        """mosquitto's count and offset: from `offset`, `count` items (-1: all; 0 gives one, as mosquitto)."""
        count, offset = _int(obj, "count", -1), _int(obj, "offset", 0)
        out = []
        for i, item in enumerate(items):
            if i >= offset:
                out.append(item)
                if count >= 0:
                    count -= 1
                    if count <= 0:
                        break
        return out

    def list_clients(self, obj: dict[str, Any], corr: str | None) -> None:
        verbose = _bool(obj, "verbose", False)
        clients = self.ds._sorted(self.ds.clients)
        page = [self._client_json(c, verbose) for c in self._page(obj, clients)]
        self.data("listClients", {"totalCount": len(clients), "clients": page}, corr)

    def add_client_role(self, obj: dict[str, Any], corr: str | None) -> None:
        _string(obj, "username", False, "Invalid/missing username")
        rolename = _string(obj, "rolename", False, "Invalid/missing rolename")
        assert rolename is not None
        priority = _int(obj, "priority", _NO_PRIORITY)
        client = self._client(obj)
        if rolename not in self.ds.roles:
            raise _Invalid("Role not found")
        _add_member(client.roles, rolename, priority)
        self.kick.add(client.username)
        self.done("addClientRole", corr, f"username={client.username} | rolename={rolename} | priority={priority}")

    def remove_client_role(self, obj: dict[str, Any], corr: str | None) -> None:
        _string(obj, "username", False, "Invalid/missing username")
        rolename = _string(obj, "rolename", False, "Invalid/missing rolename")
        client = self._client(obj)
        if rolename not in self.ds.roles:
            raise _Invalid("Role not found")
        client.roles = [m for m in client.roles if m.name != rolename]
        self.kick.add(client.username)
        self.done("removeClientRole", corr, f"username={client.username} | rolename={rolename}")

    # --- groups -----------------------------------------------------------------------------------------------

    def _group(self, obj: dict[str, Any], missing: str = "Group not found") -> Group:
        name = _string(obj, "groupname", False, "Invalid/missing groupname")
        assert name is not None
        group = self.ds.groups.get(name)
        if group is None:
            raise _Invalid(missing)
        return group

    def _kick_group(self, group: Group) -> None:
        self.kick.update(m.name for m in group.clients)
        if group.name == self.ds.anonymous_group:
            self.kick_anonymous = True

    def create_group(self, obj: dict[str, Any], corr: str | None) -> None:
        name = _string(obj, "groupname", False, "Invalid/missing groupname")
        assert name is not None
        textname = _string(obj, "textname", True, "Invalid/missing textname")
        textdescription = _string(obj, "textdescription", True, "Invalid/missing textdescription")
        if name in self.ds.groups:
            raise _Invalid("Group already exists")
        roles = self._role_refs(obj) or []
        self.ds.groups[name] = Group(name, textname, textdescription, roles)
        self.done("createGroup", corr, f"groupname={name}")

    def delete_group(self, obj: dict[str, Any], corr: str | None) -> None:
        group = self._group(obj)
        if group.name == self.ds.anonymous_group:
            raise _Invalid("Deleting the anonymous group is forbidden")
        self._kick_group(group)
        for m in list(group.clients):
            self.ds._leave(m.name, group.name)
        del self.ds.groups[group.name]
        self.done("deleteGroup", corr, f"groupname={group.name}")

    def add_group_client(self, obj: dict[str, Any], corr: str | None) -> None:
        username = _string(obj, "username", False, "Invalid/missing username")
        groupname = _string(obj, "groupname", False, "Invalid/missing groupname")
        assert username is not None and groupname is not None
        priority = _int(obj, "priority", _NO_PRIORITY)
        error = self.ds._join(username, groupname, priority)
        if error is not None:
            raise _Invalid(error)
        self.kick.add(username)
        self.done("addGroupClient", corr, f"groupname={groupname} | username={username} | priority={priority}")

    def remove_group_client(self, obj: dict[str, Any], corr: str | None) -> None:
        username = _string(obj, "username", False, "Invalid/missing username")
        groupname = _string(obj, "groupname", False, "Invalid/missing groupname")
        assert username is not None and groupname is not None
        if username not in self.ds.clients:
            raise _Invalid("Client not found")
        if groupname not in self.ds.groups:
            raise _Invalid("Group not found")
        self.ds._leave(username, groupname)
        self.kick.add(username)
        self.done("removeGroupClient", corr, f"groupname={groupname} | username={username}")

    def add_group_role(self, obj: dict[str, Any], corr: str | None) -> None:
        _string(obj, "groupname", False, "Invalid/missing groupname")
        rolename = _string(obj, "rolename", False, "Invalid/missing rolename")
        assert rolename is not None
        priority = _int(obj, "priority", _NO_PRIORITY)
        group = self._group(obj)
        if rolename not in self.ds.roles:
            raise _Invalid("Role not found")
        if not _add_member(group.roles, rolename, priority):
            raise _Invalid("Group is already in this role")
        self._kick_group(group)
        self.done("addGroupRole", corr, f"groupname={group.name} | rolename={rolename} | priority={priority}")

    def remove_group_role(self, obj: dict[str, Any], corr: str | None) -> None:
        _string(obj, "groupname", False, "Invalid/missing groupname")
        rolename = _string(obj, "rolename", False, "Invalid/missing rolename")
        group = self._group(obj)
        if rolename not in self.ds.roles:
            raise _Invalid("Role not found")
        group.roles = [m for m in group.roles if m.name != rolename]
        self._kick_group(group)
        self.done("removeGroupRole", corr, f"groupname={group.name} | rolename={rolename}")

    def modify_group(self, obj: dict[str, Any], corr: str | None) -> None:
        group = self._group(obj)
        roles = self._role_refs(obj)
        clients = obj.get("clients")
        if isinstance(clients, list):
            _check_names(clients, "clients", "username", self.ds.clients)
            self._kick_group(group)
            for m in list(group.clients):
                self.ds._leave(m.name, group.name)
            for ref in _refs(clients, "username"):
                self.ds._join(ref.name, group.name, ref.priority)
        if isinstance(obj.get("textname"), str):
            group.textname = obj["textname"]
        if isinstance(obj.get("textdescription"), str):
            group.textdescription = obj["textdescription"]
        if roles is not None:
            group.roles = roles
        self._kick_group(group)
        self.done("modifyGroup", corr, f"groupname={group.name}")

    def _group_json(self, group: Group) -> dict[str, Any]:
        j: dict[str, Any] = {"groupname": group.name}
        _texts(j, group.textname, group.textdescription)
        j["clients"] = [{"username": m.name} for m in group.clients]
        j["roles"] = _members_json(group.roles, "rolename")
        return j

    def get_group(self, obj: dict[str, Any], corr: str | None) -> None:
        group = self._group(obj)
        self.data("getGroup", {"group": self._group_json(group)}, corr)

    def list_groups(self, obj: dict[str, Any], corr: str | None) -> None:
        verbose = _bool(obj, "verbose", False)
        groups = self.ds._sorted(self.ds.groups)
        page = [self._group_json(g) if verbose else g.name for g in self._page(obj, groups)]
        self.data("listGroups", {"totalCount": len(groups), "groups": page}, corr)

    def set_anonymous_group(self, obj: dict[str, Any], corr: str | None) -> None:
        group = self._group(obj)
        self.ds.anonymous_group = group.name
        self.kick_anonymous = True
        self.done("setAnonymousGroup", corr, f"groupname={group.name}")

    def get_anonymous_group(self, obj: dict[str, Any], corr: str | None) -> None:
        self.data("getAnonymousGroup", {"group": {"groupname": self.ds.anonymous_group or ""}}, corr)

    # --- roles ------------------------------------------------------------------------------------------------

    def _role(self, obj: dict[str, Any], missing: str = "Role not found") -> Role:
        name = _string(obj, "rolename", False, "Invalid/missing rolename")
        assert name is not None
        role = self.ds.roles.get(name)
        if role is None:
            raise _Invalid(missing)
        return role

    def _kick_role(self, name: str) -> None:
        users, anonymous = self.ds.role_users(name)
        self.kick.update(users)
        self.kick_anonymous = self.kick_anonymous or anonymous

    def create_role(self, obj: dict[str, Any], corr: str | None) -> None:
        name = _string(obj, "rolename", False, "Invalid/missing rolename")
        assert name is not None
        textname = _string(obj, "textname", True, "Invalid/missing textname")
        textdescription = _string(obj, "textdescription", True, "Invalid/missing textdescription")
        if name in self.ds.roles:
            raise _Invalid("Role already exists")
        role = Role(name, textname, textdescription)
        self.ds._load_acls(role, obj.get("acls"))
        self.ds.roles[name] = role
        self.done("createRole", corr, f"rolename={name}")

    def delete_role(self, obj: dict[str, Any], corr: str | None) -> None:
        role = self._role(obj)
        self._kick_role(role.name)
        for client in self.ds.clients.values():
            client.roles = [m for m in client.roles if m.name != role.name]
        for group in self.ds.groups.values():
            group.roles = [m for m in group.roles if m.name != role.name]
        del self.ds.roles[role.name]
        self.done("deleteRole", corr, f"rolename={role.name}")

    def _acl_list(self, obj: dict[str, Any], role: Role) -> tuple[AclType, str]:
        acltype = _string(obj, "acltype", False, "Invalid/missing acltype")
        assert acltype is not None
        kind = _ACL_TYPES.get(acltype.lower())
        if kind is None:
            raise _Invalid("Unknown acltype")
        topic = _string(obj, "topic", False, "Invalid/missing topic")
        assert topic is not None
        if topic_filter_error(topic) is not None:
            raise _Invalid("Invalid ACL topic")
        return kind, topic

    def add_role_acl(self, obj: dict[str, Any], corr: str | None) -> None:
        role = self._role(obj)
        kind, topic = self._acl_list(obj, role)
        acls = role.acls[kind]
        if any(a.topic == topic for a in acls):
            raise _Invalid("ACL with this topic already exists")
        priority, allow = _int(obj, "priority", 0), _bool(obj, "allow", False)
        _add_acl(acls, RoleAcl(topic, priority, allow))
        self._kick_role(role.name)
        self.done(
            "addRoleACL",
            corr,
            f"rolename={role.name} | acltype={kind.value} | topic={topic} | priority={priority} | "
            f"allow={'true' if allow else 'false'}",
        )

    def remove_role_acl(self, obj: dict[str, Any], corr: str | None) -> None:
        role = self._role(obj)
        kind, topic = self._acl_list(obj, role)
        acls = role.acls[kind]
        if not any(a.topic == topic for a in acls):
            raise _Invalid("ACL not found")
        role.acls[kind] = [a for a in acls if a.topic != topic]
        self._kick_role(role.name)
        self.done("removeRoleACL", corr, f"rolename={role.name} | acltype={kind.value} | topic={topic}")

    def modify_role(self, obj: dict[str, Any], corr: str | None) -> None:
        role = self._role(obj, "Role does not exist")
        if isinstance(obj.get("textname"), str):
            role.textname = obj["textname"]
        if isinstance(obj.get("textdescription"), str):
            role.textdescription = obj["textdescription"]
        if isinstance(obj.get("acls"), list):
            fresh = Role(role.name)
            self.ds._load_acls(fresh, obj["acls"])
            role.acls = fresh.acls
        self._kick_role(role.name)
        self.done("modifyRole", corr, f"rolename={role.name}")

    def get_role(self, obj: dict[str, Any], corr: str | None) -> None:
        role = self._role(obj)
        self.data("getRole", {"role": self.ds._role_json(role)}, corr)

    def list_roles(self, obj: dict[str, Any], corr: str | None) -> None:
        verbose = _bool(obj, "verbose", False)
        roles = self.ds._sorted(self.ds.roles)
        page = [self.ds._role_json(r) if verbose else r.name for r in self._page(obj, roles)]
        self.data("listRoles", {"totalCount": len(roles), "roles": page}, corr)


_HANDLERS: Final[dict[str, tuple[str, Callable[[_Run, dict[str, Any], str | None], None]]]] = {
    name.lower(): (name, method)
    for name, method in (
        ("setDefaultACLAccess", _Run.set_default_acl_access),
        ("getDefaultACLAccess", _Run.get_default_acl_access),
        ("createClient", _Run.create_client),
        ("deleteClient", _Run.delete_client),
        ("getClient", _Run.get_client),
        ("listClients", _Run.list_clients),
        ("modifyClient", _Run.modify_client),
        ("setClientPassword", _Run.set_client_password),
        ("setClientId", _Run.set_client_id),
        ("addClientRole", _Run.add_client_role),
        ("removeClientRole", _Run.remove_client_role),
        ("enableClient", _Run.enable_client),
        ("disableClient", _Run.disable_client),
        ("addGroupClient", _Run.add_group_client),
        ("createGroup", _Run.create_group),
        ("deleteGroup", _Run.delete_group),
        ("getGroup", _Run.get_group),
        ("listGroups", _Run.list_groups),
        ("modifyGroup", _Run.modify_group),
        ("removeGroupClient", _Run.remove_group_client),
        ("addGroupRole", _Run.add_group_role),
        ("removeGroupRole", _Run.remove_group_role),
        ("setAnonymousGroup", _Run.set_anonymous_group),
        ("getAnonymousGroup", _Run.get_anonymous_group),
        ("createRole", _Run.create_role),
        ("getRole", _Run.get_role),
        ("listRoles", _Run.list_roles),
        ("modifyRole", _Run.modify_role),
        ("deleteRole", _Run.delete_role),
        ("addRoleACL", _Run.add_role_acl),
        ("removeRoleACL", _Run.remove_role_acl),
    )
}
