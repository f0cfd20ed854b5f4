"""Dynamic security against mosquitto's own plugin: the same mosquitto_ctrl script, the same outcomes.

Both brokers start from the file `mosquitto_ctrl dynsec init` writes and the same mosquitto.conf lines (`plugin
.../mosquitto_dynamic_security.so`, `plugin_opt_config_file`: ours reads them with --mosquitto-conf). The script
creates clients and roles with ACLs, a watcher subscribed to everything sees what a client may and may not
publish, the client is disabled (disconnected, then refused) and enabled again, and everything is listed; every
mosquitto_ctrl answer and every client outcome must be the same. Then each broker's file is given to the other.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from tests.broker.conftest import start_ours
from tests.broker.test_auth import Client
from tests.brokers import Broker, start_mosquitto

PLUGIN = Path("/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so")
CTRL = shutil.which("mosquitto_ctrl")
V5 = paho.MQTTv5

pytestmark = [
    pytest.mark.skipif(CTRL is None or not PLUGIN.exists(), reason="needs mosquitto_ctrl and mosquitto's plugin"),
    pytest.mark.xdist_group("mosquitto"),
]


def _init(workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "dynamic-security.json"
    assert CTRL is not None
    subprocess.run([CTRL, "dynsec", "init", str(path), "admin", "adminpw"], check=True, capture_output=True)
    return path


def _start(kind: str, workdir: Path, dynsec: Path) -> Broker:
    lines = f"plugin {PLUGIN}\nplugin_opt_config_file {dynsec}\n"
    if kind == "mosquitto":
        return start_mosquitto(workdir, extra_conf=lines.rstrip())
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "dynsec.conf"
    conf.write_text("allow_anonymous true\n" + lines)
    return start_ours(workdir, "--mosquitto-conf", str(conf))


def ctrl(broker: Broker, *args: str, user: str = "admin", password: str = "adminpw") -> str:
    """mosquitto_ctrl's answer (its warning about unencrypted connections left out)."""
    assert CTRL is not None
    run = subprocess.run(
        [CTRL, "-h", broker.host, "-p", str(broker.port), "-u", user, "-P", password, "dynsec", *args],
        capture_output=True,
        text=True,
        timeout=20,
    )
    lines = (run.stdout + run.stderr).splitlines()
    kept = [line for line in lines if line.strip() and "without encryption" not in line and "This means" not in line]
    return f"rc={run.returncode} " + "\n".join(kept)


def _disconnects(client: Client) -> queue.Queue[int]:
    got: queue.Queue[int] = queue.Queue()
    client.client.on_disconnect = lambda _c, _u, _f, rc, _p: got.put(rc.value)
    return got


def _publish_once(broker: Broker, topic: str) -> int:
    """alice's PUBACK reason code for one QoS 1 PUBLISH on a connection of its own."""
    client = Client(broker, "alice", "alicepw", protocol=V5)
    try:
        return client.publish(topic)
    finally:
        client.close()


def script(broker: Broker) -> list[Any]:
    """The scenario; every outcome in order."""
    out: list[Any] = []
    for args in (
        ("createClient", "alice", "-p", "alicepw"),
        ("createRole", "writer"),
        ("addRoleACL", "writer", "publishClientSend", "allowed/#", "allow", "5"),
        ("addRoleACL", "writer", "publishClientSend", "allowed/secret", "deny", "9"),
        ("addRoleACL", "writer", "subscribePattern", "allowed/#", "allow"),
        ("addClientRole", "alice", "writer"),
        ("createClient", "watcher", "-p", "watchpw"),
        ("createRole", "watch"),
        ("addRoleACL", "watch", "subscribePattern", "#", "allow"),
        ("addClientRole", "watcher", "watch", "3"),
        ("createGroup", "readers"),
        ("addGroupClient", "readers", "watcher"),
        ("addGroupRole", "readers", "watch"),
        ("createClient", "alice", "-p", "again"),
        ("addClientRole", "nobody", "writer"),
        ("removeRoleACL", "writer", "publishClientSend", "not/there"),
    ):
        out.append((args[0], ctrl(broker, *args)))
    watcher = Client(broker, "watcher", "watchpw", protocol=V5)
    alice = Client(broker, "alice", "alicepw", protocol=V5)
    wrong = Client(broker, "alice", "wrong", protocol=V5)
    out.append(("logins", watcher.rc, alice.rc, wrong.rc))
    try:
        out.append(("subscribe", watcher.subscribe("#"), alice.subscribe("allowed/#", "other/#")))
        # A connection per PUBLISH: mosquitto 2.0.11 drops a client after a denied one.
        out.append(("publish", [_publish_once(broker, t) for t in ("allowed/a", "allowed/secret", "denied/b")]))
        out.append(("watcher sees", sorted(m.topic for m in watcher.drain(1.0))))
        gone = _disconnects(alice)
        out.append(("disableClient", ctrl(broker, "disableClient", "alice")))
        out.append(("kicked", gone.get(timeout=10)))
        out.append(("login while disabled", Client(broker, "alice", "alicepw", protocol=V5).rc))
        out.append(("enableClient", ctrl(broker, "enableClient", "alice")))
        again = Client(broker, "alice", "alicepw", protocol=V5)
        out.append(("login enabled", again.rc))
        again.close()
        out.append(("setClientId", ctrl(broker, "setClientId", "alice", "only-this-id")))
        out.append(("other id", Client(broker, "alice", "alicepw", protocol=V5, client_id="another").rc))
        fixed = Client(broker, "alice", "alicepw", protocol=V5, client_id="only-this-id")
        out.append(("that id", fixed.rc))
        fixed.close()
    finally:
        watcher.close()
        alice.close()
    for args in (
        ("listClients",),
        ("listClients", "1", "1"),
        ("getClient", "alice"),
        ("getClient", "watcher"),
        ("listRoles",),
        ("getRole", "writer"),
        ("listGroups",),
        ("getGroup", "readers"),
        ("getDefaultACLAccess",),
        ("setDefaultACLAccess", "publishClientSend", "allow"),
        ("getDefaultACLAccess",),
        ("getAnonymousGroup",),
        ("deleteRole", "nothing"),
        ("deleteClient", "watcher"),
        ("listClients",),
    ):
        out.append((args[0], ctrl(broker, *args)))
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[list[Any], Path]]]:
    results = {}
    for kind in ("mosquitto", "ours"):
        workdir = tmp_path_factory.mktemp(f"dynsec-{kind}")
        path = _init(workdir)
        broker = _start(kind, workdir, path)
        try:
            results[kind] = (script(broker), path)
        finally:
            broker.stop()
    yield results


def test_same_script_same_outcomes(outcomes: dict[str, tuple[list[Any], Path]]) -> None:
    theirs, _ = outcomes["mosquitto"]
    ours, _ = outcomes["ours"]
    for mine, other in zip(ours, theirs, strict=True):
        assert mine == other
    # What the scenario is about, said plainly (both brokers agree on it, above).
    found = dict((row[0], row[1:]) for row in ours)
    assert found["logins"] == (0, 0, 135)
    assert found["publish"] == ([0, 135, 135],)
    assert found["watcher sees"] == (["allowed/a"],)
    assert found["kicked"] == (152,)
    assert found["login while disabled"] == (135,)


@pytest.mark.parametrize(("writer", "reader"), [("mosquitto", "ours"), ("ours", "mosquitto")])
def test_file_read_by_the_other(
    outcomes: dict[str, tuple[list[Any], Path]], tmp_path: Path, writer: str, reader: str
) -> None:
    """The file one broker wrote (passwords hashed with its salts) works in the other: alice logs in with her
    password and her client id, and may publish where her role allows."""
    path = tmp_path / "dynamic-security.json"
    shutil.copy(outcomes[writer][1], path)
    broker = _start(reader, tmp_path / "broker", path)
    try:
        alice = Client(broker, "alice", "alicepw", protocol=V5, client_id="only-this-id")
        assert alice.rc == 0
        assert alice.publish("allowed/a") == 0x10  # taken (no subscribers)
        alice.close()
        alice = Client(broker, "alice", "alicepw", protocol=V5, client_id="only-this-id")
        assert alice.publish("denied/b") == 0x87
        alice.close()
        assert Client(broker, "alice", "wrong", protocol=V5, client_id="only-this-id").rc == 135
        assert "alice" in ctrl(broker, "listClients")
    finally:
        broker.stop()


def test_sighup_reads_the_file_again_and_keeps_who_it_still_admits(tmp_path: Path) -> None:
    """Ours only (mosquitto does not read the file again): a client removed from the file behind the broker's
    back is disconnected at the reload, one still in it stays connected."""
    path = _init(tmp_path)
    broker = _start("ours", tmp_path, path)
    try:
        assert ctrl(broker, "createClient", "alice", "-p", "alicepw") == "rc=0 "
        assert ctrl(broker, "createClient", "bob", "-p", "bobpw") == "rc=0 "
        alice, bob = Client(broker, "alice", "alicepw", protocol=V5), Client(broker, "bob", "bobpw", protocol=V5)
        alice_gone, bob_gone = _disconnects(alice), _disconnects(bob)
        tree = json.loads(path.read_text())
        tree["clients"] = [c for c in tree["clients"] if c["username"] != "bob"]
        path.write_text(json.dumps(tree))
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        assert bob_gone.get(timeout=10) == 0x98
        assert Client(broker, "bob", "bobpw", protocol=V5).rc == 0x87
        assert alice_gone.empty() and alice.publish("x/y") == 0x87  # still connected (and still without rights)
        alice.close()
    finally:
        broker.stop()
