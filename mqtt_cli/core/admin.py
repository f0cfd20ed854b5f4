"""Who may use the admin HTTP API (net/admin_api.py), sans-IO: HTTP basic credentials checked against the
broker's own users.

* a dynamic-security client (enabled, right password) holding the admin role, directly or through a group, or
  named in `admin_users`: everything (GET, DELETE);
* one holding the read-only role, or named in `readonly_users`: GET only;
* a user of the password file named in `admin_users` / `readonly_users`: the same;
* anyone else: nothing (401).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from enum import IntEnum

from .auth import AuthPolicy
from .passwords import verify_password

__all__ = ["AdminAccess", "AdminUsers", "admin_access", "basic_credentials"]


class AdminAccess(IntEnum):
    NONE = 0
    READ = 1  # GET
    FULL = 2  # GET and DELETE


@dataclass(frozen=True, slots=True)
class AdminUsers:
    admin_users: frozenset[str] = frozenset()
    readonly_users: frozenset[str] = frozenset()
    admin_role: str | None = "admin"  # dynamic security's role that grants everything (mosquitto's name)
    readonly_role: str | None = None


def basic_credentials(header: str) -> tuple[str, bytes] | None:
    """The user name and password of an `Authorization: Basic ...` header; None when it is not one."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


def admin_access(users: AdminUsers, policy: AuthPolicy, username: str, password: bytes) -> AdminAccess:
    dynsec = policy.dynsec
    if dynsec is not None and username in dynsec.clients:
        client = dynsec.clients[username]
        if client.disabled or client.password is None or not verify_password(client.password, password):
            return AdminAccess.NONE
        roles = dynsec.roles_of(username)
        if username in users.admin_users or (users.admin_role is not None and users.admin_role in roles):
            return AdminAccess.FULL
        if username in users.readonly_users or (users.readonly_role is not None and users.readonly_role in roles):
            return AdminAccess.READ
        return AdminAccess.NONE
    table = policy.passwords
    entry = table.get(username) if table is not None else None
    if entry is None or not verify_password(entry, password):
        return AdminAccess.NONE
    if username in users.admin_users:
        return AdminAccess.FULL
    if username in users.readonly_users:
        return AdminAccess.READ
    return AdminAccess.NONE
