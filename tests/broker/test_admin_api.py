"""The admin HTTP API and the dashboard on `mqtt serve`'s metrics endpoint, as a process: credentials checked
against the password file (admin_users, readonly_users), a paho client listed, disconnected with 0x98 by DELETE,
retained messages listed and cleared, HTTPS with the certificate keys, and the dashboard rendered by headless
Chromium showing the connected client."""

from __future__ import annotations

import base64
import json
import queue
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from mqtt_cli.core.passwords import format_password_file, hash_password
from tests.broker.conftest import start_ours
from tests.broker.test_auth import Client
from tests.brokers import Broker, _make_certs

USERS = {"root": "rootpw", "viewer": "viewpw", "plain": "plainpw"}


def _config(workdir: Path, tls: bool = False) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    table = {u: hash_password(u, p, bytes(12)) for u, p in USERS.items()}
    (workdir / "passwords").write_text(format_password_file(table))
    metrics = ['listen = "127.0.0.1:0"', 'admin_users = ["root"]', 'readonly_users = ["viewer"]']
    if tls:
        _make_certs(workdir)
        metrics += [f'certfile = "{workdir / "server.pem"}"', f'keyfile = "{workdir / "server.key"}"']
    conf = workdir / "broker.toml"
    conf.write_text(f'[auth]\npassword_file = "{workdir / "passwords"}"\n\n[metrics]\n' + "\n".join(metrics) + "\n")
    return conf


def _base(broker: Broker, scheme: str = "http") -> str:
    ready = json.loads((broker.workdir / "ready.json").read_text())["metrics"]
    assert ready["url"] == f"{scheme}://{ready['host']}:{ready['port']}"
    return str(ready["url"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("admin-api")
    broker = start_ours(workdir, "--config", str(_config(workdir)))
    yield broker
    broker.stop()


def call(url: str, user: str | None = None, password: str = "", method: str = "GET", **kw: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url, method=method)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, **kw) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_clients_need_credentials_and_delete_disconnects(served: Broker) -> None:
    base = _base(served)
    client = Client(served, "plain", "plainpw", client_id="listed-1", protocol=paho.MQTTv5)
    gone: queue.Queue[int] = queue.Queue()
    client.client.on_disconnect = lambda _c, _u, _f, rc, _p: gone.put(rc.value)
    try:
        assert call(f"{base}/api/v1/clients")[0] == 401
        assert call(f"{base}/api/v1/clients", "root", "wrong")[0] == 401
        assert call(f"{base}/api/v1/clients", "plain", "plainpw")[0] == 401  # a user, not an admin
        status, body = call(f"{base}/api/v1/clients", "root", "rootpw")
        assert status == 200
        (listed,) = [c for c in body["clients"] if c["client_id"] == "listed-1"]
        assert listed["username"] == "plain" and listed["protocol"] == "5.0" and listed["keepalive"] == 60
        assert listed["address"].startswith("127.0.0.1:") and listed["inflight"] == 0 and listed["queued"] == 0
        assert call(f"{base}/api/v1/clients/listed-1", "viewer", "viewpw")[0] == 200  # read-only: GET
        assert call(f"{base}/api/v1/clients/listed-1", "viewer", "viewpw", "DELETE")[0] == 403
        answer = call(f"{base}/api/v1/clients/listed-1", "root", "rootpw", "DELETE")
        assert answer == (200, {"disconnected": "listed-1"})
        assert gone.get(timeout=10) == 0x98  # administrative action
        assert call(f"{base}/api/v1/clients/listed-1", "root", "rootpw")[0] == 404
    finally:
        client.close()


def test_retained_sessions_subscriptions_listeners(served: Broker) -> None:
    base = _base(served)
    client = Client(served, "plain", "plainpw", client_id="keeper")
    try:
        client.subscribe("watch/#")
        client.publish("kept/a", b"21.5", retain=True)
        _, body = call(f"{base}/api/v1/retained", "root", "rootpw")
        kept = {"topic": "kept/a", "qos": 1, "size": 4, "payload": "21.5", "encoding": "utf-8", "truncated": False}
        assert kept in body["retained"]
        _, subs = call(f"{base}/api/v1/subscriptions", "viewer", "viewpw")
        assert any(s["client_id"] == "keeper" and s["topic_filter"] == "watch/#" for s in subs["subscriptions"])
        _, sessions = call(f"{base}/api/v1/sessions", "viewer", "viewpw")
        assert any(s["client_id"] == "keeper" and s["connected"] for s in sessions["sessions"])
        _, listeners = call(f"{base}/api/v1/listeners", "viewer", "viewpw")
        assert listeners["listeners"][0]["url"] == served.url and listeners["listeners"][0]["connected"] >= 1
        assert call(f"{base}/api/v1/bridges", "viewer", "viewpw") == (200, {"bridges": []})
        assert call(f"{base}/api/v1/retained/kept%2Fa", "root", "rootpw", "DELETE") == (200, {"deleted": "kept/a"})
        assert call(f"{base}/api/v1/retained/kept%2Fa", "root", "rootpw")[0] == 404
    finally:
        client.close()


def test_https_with_the_listener_certificate_keys(tmp_path: Path) -> None:
    broker = start_ours(tmp_path, "--config", str(_config(tmp_path, tls=True)))
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        status, _ = call(f"{_base(broker, 'https')}/api/v1/stats", "root", "rootpw", context=context)
        assert status == 200
    finally:
        broker.stop()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (make install)")
def test_dashboard_shows_the_connected_client(served: Broker, tmp_path: Path) -> None:
    """Headless Chromium loads GET / with the admin's credentials; after its script ran (polling the API), the
    clients table holds our client."""
    client = Client(served, "plain", "plainpw", client_id="on-the-dashboard")
    try:
        host_port = _base(served).removeprefix("http://")
        assert CHROMIUM is not None
        run = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
             f"http://root:rootpw@{host_port}/"],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert "<td>on-the-dashboard</td>" in run.stdout, run.stdout[-2000:]
        assert 'id="error"></span>' in run.stdout  # the API answered every poll
    finally:
        client.close()
