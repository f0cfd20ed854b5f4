"""The admin HTTP API and the dashboard, on the metrics endpoint (net/metrics.py serves the HTTP).

JSON under /api/v1/ (docs/broker.md "Admin API"): clients, sessions, subscriptions, retained messages,
listeners, bridges, totals; `DELETE /api/v1/clients/ID` disconnects a client, `DELETE /api/v1/retained/TOPIC`
clears a retained message. The dashboard (GET /) is one page with its script and style inline, served from the
package (nothing fetched from elsewhere), which polls the API. Everything here needs HTTP basic credentials of a
broker user allowed by core/admin.py (401 otherwise; 403 for a read-only user's DELETE).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import unquote

from mqtt_cli.core.admin import AdminAccess, AdminUsers, admin_access, basic_credentials
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.broker import BrokerCore

__all__ = ["AdminSource", "Answer", "answer", "is_admin_path"]

JSON_TYPE = "application/json"
_PREFIX = "/api/v1/"


@dataclass(frozen=True, slots=True)
class AdminSource:
    """What the API reads and acts on: the core, the users who may ask, the listeners (the network layer's), and
    `flush` to send what an action made the core write (a DISCONNECT)."""

    core: Callable[[], BrokerCore]
    policy: Callable[[], AuthPolicy]
    users: Callable[[], AdminUsers]
    listeners: Callable[[], list[dict[str, Any]]]
    flush: Callable[[], None]
    now: Callable[[], float]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: list[tuple[str, str]] = field(default_factory=list)


def is_admin_path(path: str) -> bool:
    return path == "/" or path == "/api/v1" or path.startswith(_PREFIX)


def _json(status: int, value: Any) -> Answer:
    return Answer(status, (json.dumps(value, ensure_ascii=False) + "\n").encode())


def _error(status: int, message: str) -> Answer:
    return _json(status, {"error": message})


def _records(items: list[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(item) for item in items]


def answer(source: AdminSource, method: str, path: str, authorization: str) -> Answer:
    credentials = basic_credentials(authorization) if authorization else None
    access = AdminAccess.NONE
    user = ""
    if credentials is not None:
        user, password = credentials
        access = admin_access(source.users(), source.policy(), user, password)
    if access is AdminAccess.NONE:
        return Answer(
            401,
            b'{"error": "credentials of an admin user needed (HTTP basic)"}\n',
            headers=[("WWW-Authenticate", 'Basic realm="mqtt serve", charset="UTF-8"')],
        )
    if method not in ("GET", "HEAD", "DELETE"):
        return Answer(405, b'{"error": "GET, HEAD or DELETE"}\n', headers=[("Allow", "GET, HEAD, DELETE")])
    if method == "DELETE" and access is not AdminAccess.FULL:
        return _error(403, f"user {user!r} may only read")
    if path == "/":
        if method == "DELETE":
            return _error(405, "the dashboard is read only")
        return Answer(200, _dashboard(), "text/html; charset=utf-8")
    rest = path[len(_PREFIX) :] if path.startswith(_PREFIX) else ""
    kind, _, name = rest.partition("/")
    name = unquote(name)
    core = source.core()
    if method == "DELETE":
        return _delete(source, core, kind, name, user)
    if kind == "clients":
        clients = core.queries.client_infos()
        if not name:
            return _json(200, {"clients": _records(clients)})
        found = [c for c in clients if c.client_id == name]
        return _json(200, dataclasses.asdict(found[0])) if found else _error(404, f"no client {name!r} connected")
    if name:
        if kind == "retained":
            found_r = [r for r in core.queries.retained_infos() if r.topic == name]
            return _json(200, dataclasses.asdict(found_r[0])) if found_r else _error(404, f"no retained {name!r}")
        return _error(404, f"not found: {path}")
    if kind == "sessions":
        return _json(200, {"sessions": _records(core.queries.session_infos())})
    if kind == "subscriptions":
        return _json(200, {"subscriptions": _records(core.queries.subscription_infos())})
    if kind == "retained":
        return _json(200, {"retained": _records(core.queries.retained_infos())})
    if kind == "listeners":
        return _json(200, {"listeners": source.listeners()})
    if kind == "bridges":
        return _json(200, {"bridges": _records(core.queries.bridge_infos())})
    if kind == "stats":
        return _json(200, dataclasses.asdict(core.queries.totals(source.now())))
    return _error(404, "not found: try /api/v1/clients, sessions, subscriptions, retained, listeners, bridges, stats")


def _delete(source: AdminSource, core: BrokerCore, kind: str, name: str, user: str) -> Answer:
    if kind == "clients" and name:
        detail = f"disconnected through the admin API by user {user!r}"
        if not core.queries.disconnect_client(name, source.now(), detail):
            return _error(404, f"no client {name!r} connected")
        source.flush()
        return _json(200, {"disconnected": name})
    if kind == "retained" and name:
        if not core.queries.delete_retained(name, f"through the admin API by user {user!r}"):
            return _error(404, f"no retained message on {name!r}")
        source.flush()
        return _json(200, {"deleted": name})
    return _error(405, "DELETE takes /api/v1/clients/ID or /api/v1/retained/TOPIC")


def _dashboard() -> bytes:
    return resources.files("mqtt_cli.net").joinpath("dashboard.html").read_bytes()
