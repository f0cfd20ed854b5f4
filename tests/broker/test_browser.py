"""MQTT.js in a real browser against `mqtt serve`'s ws:// listener: headless Chromium (Debian's) loads
tests/web/page.html and MQTT.js's browser bundle (npm package `mqtt`, tests/web/node_modules) from a loopback HTTP
server this test runs; the page connects (MQTT 5.0 and 3.1.1), subscribes and publishes, and POSTs every event
back to the test. Our own command-line clients publish to the page and receive what it published.

`make install` (as root) provides chromium and the npm package: in CI, or as root, their absence is a failure;
a developer without them (not root) gets a skip saying what to run.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.broker.conftest import Served

pytestmark = [pytest.mark.interop, pytest.mark.slow]

WEB = Path(__file__).resolve().parent.parent / "web"
BUNDLE = WEB / "node_modules" / "mqtt" / "dist" / "mqtt.min.js"
DEADLINE = 60.0
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces it may not have
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
]


def chromium() -> str:
    """The browser's path; fails (CI, root: `make install` provides it) or skips (a developer's machine)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    missing = []
    if browser is None:
        missing.append("chromium (Debian package chromium)")
    if not BUNDLE.is_file():
        missing.append(f"{BUNDLE.relative_to(WEB.parent.parent)} (npm ci in tests/web)")
    if missing:
        reason = f"missing {', '.join(missing)}: run `make install` (as root for chromium)"
        if os.environ.get("CI") or os.geteuid() == 0:
            pytest.fail(reason)
        pytest.skip(reason)
    assert browser is not None
    return browser


@contextmanager
def page_server(reports: queue.Queue[dict[str, Any]]) -> Iterator[int]:
    """A loopback HTTP server for the page and the bundle, taking the page's reports; yields its port."""
    files = {"/page.html": (WEB / "page.html", "text/html"), "/mqtt.min.js": (BUNDLE, "text/javascript")}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in files:
                self.send_error(404)
                return
            file, kind = files[path]
            body = file.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            reports.put(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def browser(executable: str, url: str) -> Iterator[subprocess.Popen[bytes]]:
    with tempfile.TemporaryDirectory(prefix="mqtt-cli-chromium-") as profile:
        proc = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its helper processes share this group: ended with it below
        )
        try:
            yield proc
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(5)
                    break
                except subprocess.TimeoutExpired:
                    continue


def mqtt_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mqtt_cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_mqtt_js_in_chromium(serve_with: Callable[..., Served], tmp_path: Path) -> None:
    executable = chromium()
    started = time.monotonic()
    served = serve_with(tmp_path, "--listen", "ws://127.0.0.1:0/mqtt", "--listen", "mqtt://127.0.0.1:0")
    tcp = served.url("mqtt")
    # Ours, over TCP, takes the two messages the page publishes (one per protocol version).
    listener = mqtt_cli("sub", "-L", tcp, "-t", "web/+/from-browser", "-C", "2", "-W", str(DEADLINE), "-v")
    reports: queue.Queue[dict[str, Any]] = queue.Queue()
    seen: list[dict[str, Any]] = []
    try:
        with page_server(reports) as http_port:
            url = f"http://127.0.0.1:{http_port}/page.html?broker={served.url('ws')}"
            with browser(executable, url) as proc:
                deadline = time.monotonic() + DEADLINE
                wanted = {(v, f"web/v{v}/{w}") for v in (5, 4) for w in ("from-browser", "to-browser")}
                published: set[int] = set()
                while wanted - {(r["version"], r["topic"]) for r in seen if r["kind"] == "message"}:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or proc.poll() is not None:
                        pytest.fail(f"the page did not get every message (browser exit {proc.poll()}); saw {seen}")
                    try:
                        report = reports.get(timeout=min(remaining, 1))
                    except queue.Empty:
                        continue
                    seen.append(report)
                    assert report["kind"] != "error", report
                    if report["kind"] == "subscribed" and report["version"] not in published:
                        version = report["version"]
                        assert report["granted"] == [1]
                        published.add(version)
                        pub = mqtt_cli("pub", "-L", tcp, "-t", f"web/v{version}/to-browser", "-m", "from mqtt pub")
                        assert pub.wait(DEADLINE) == 0, pub.communicate()
        out, err = listener.communicate(timeout=DEADLINE)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert listener.returncode == 0, err
    assert sorted(out.splitlines()) == [
        "web/v4/from-browser hello from MQTT.js 4",
        "web/v5/from-browser hello from MQTT.js 5",
    ]
    messages = {(r["version"], r["topic"]): (r["payload"], r["qos"]) for r in seen if r["kind"] == "message"}
    assert messages[(5, "web/v5/to-browser")] == ("from mqtt pub", 0)
    assert messages[(4, "web/v4/from-browser")] == ("hello from MQTT.js 4", 1)
    connected = {r["version"]: r["reasonCode"] for r in seen if r["kind"] == "connected"}
    assert connected == {5: 0, 4: 0}
    # Seen by the broker too: two WebSocket clients by their MQTT.js client ids.
    log = served.log.read_text()
    assert "browser-v5" in log and "browser-v4" in log
    print(f"MQTT.js in Chromium: {time.monotonic() - started:.1f} s")
