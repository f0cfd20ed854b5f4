"""`mqtt bridge` as a real process between real brokers (ours and Debian's mosquitto): loss across restarts and a
killed bridge, no loops, notifications, journal damage, and one-line errors with their exit codes."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.broker.conftest import start_ours
from tests.brokers import AUTH_USERS, Broker, start_mosquitto

from .helpers import RUNNING, BridgeProcess, Watcher, publish

pytestmark = pytest.mark.interop


def mqtt(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqtt_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def ours(workdir: Path, *args: str) -> Broker:
    broker = start_ours(workdir, *args)
    RUNNING.append(broker)
    return broker


def mosq(workdir: Path, **kw: bool) -> Broker:
    broker = start_mosquitto(workdir, **kw)
    RUNNING.append(broker)
    return broker


def start(kind: str, workdir: Path, **kw: bool) -> Broker:
    return ours(workdir, "--max-queued-messages", "0") if kind == "ours" else mosq(workdir, **kw)


# --- loss ------------------------------------------------------------------------------------------------------

N = 10_000


@pytest.mark.slow
@pytest.mark.parametrize("local_kind", ["ours", "mosquitto"])
def test_nothing_lost_across_remote_restarts_and_a_killed_bridge(tmp_path: Path, local_kind: str) -> None:
    """10,000 QoS 1 and 10,000 QoS 2 messages published on the local side while the remote broker (mosquitto,
    persistence on) is restarted twice and the bridge process is killed with SIGKILL once: a persistent
    subscriber on the remote side gets every message, the QoS 2 ones exactly once."""
    local = start(local_kind, tmp_path / "local")
    remote = mosq(tmp_path / "remote", persistence=True)
    sink = Watcher(remote, "r/#", qos=2, client_id="sink", clean=False)
    sink.close()  # offline from now on: the remote broker keeps its messages in the session
    bridge = BridgeProcess(tmp_path / "bridge", local, remote, "-t", 'q1/# out 1 "" r/', "-t", 'q2/# out 2 "" r/')
    bridge.wait_connected()

    def produce() -> None:
        c = paho.Client(CallbackAPIVersion.VERSION2, client_id="producer", clean_session=False)
        c.max_inflight_messages_set(20)  # mosquitto drops a client exceeding its max_inflight_messages
        c.connect(local.host, local.port)
        c.loop_start()
        infos = []
        for i in range(N):
            infos.append(c.publish("q1/x", b"1:%d" % i, 1))
            infos.append(c.publish("q2/x", b"2:%d" % i, 2))
            if i % 100 == 99:
                time.sleep(0.025)  # about 5 s of traffic, across the disruptions below
        for info in infos:
            info.wait_for_publish(timeout=60)
        c.loop_stop()
        c.disconnect()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(0.8)
    remote.restart()  # SIGTERM (mosquitto saves its sessions), then start again on the same port
    time.sleep(0.8)
    bridge.kill()  # SIGKILL mid-flow: the QoS 2 journal and both persistent sessions must cover it
    time.sleep(0.3)
    bridge.start()
    bridge.wait_connected()
    time.sleep(0.5)
    remote.restart()
    producer.join(timeout=90)
    assert not producer.is_alive(), "the producer did not finish"

    # Everything the bridge forwarded is in the sink's session on the remote broker.
    sink = Watcher(remote, "r/#", qos=2, client_id="sink", clean=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = sink.payloads()
        if all(b"1:%d" % i in got and b"2:%d" % i in got for i in (N - 1, 0)) and len(got) >= 2 * N:
            break
        time.sleep(0.1)
    time.sleep(0.5)  # anything late (a duplicate) shows up too
    sink.close()
    got = sink.payloads()
    q1 = {p: n for p, n in got.items() if p.startswith(b"1:")}
    q2 = {p: n for p, n in got.items() if p.startswith(b"2:")}
    missing1 = [i for i in range(N) if b"1:%d" % i not in q1]
    missing2 = [i for i in range(N) if b"2:%d" % i not in q2]
    dup1 = sum(n - 1 for n in q1.values())
    dup2 = {p: n for p, n in q2.items() if n > 1}
    print(f"QoS 1: {len(q1)} distinct, {dup1} duplicates; QoS 2: {len(q2)} distinct, {len(dup2)} duplicated")
    assert missing1 == [] and missing2 == [], (missing1[:10], missing2[:10], bridge.text()[-2000:])
    assert dup2 == {}, list(dup2.items())[:10]
    assert bridge.text().count("connected to") >= 6  # two starts, two remote restarts
    assert bridge.stop() == 0


# --- loops -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("local_kind", "remote_kind", "version"),
    [("ours", "mosquitto", "5"), ("mosquitto", "ours", "5"), ("mosquitto", "mosquitto", "311"),
     ("ours", "ours", "311")],
)  # fmt: skip
def test_both_directions_on_hash_do_not_loop(
    tmp_path: Path, local_kind: str, remote_kind: str, version: str
) -> None:
    local = start(local_kind, tmp_path / "local")
    remote = start(remote_kind, tmp_path / "remote")
    bridge = BridgeProcess(
        tmp_path / "bridge", local, remote, "-t", "# both 2",
        "--local-protocol-version", version, "--remote-protocol-version", version,
    )  # fmt: skip
    bridge.wait_connected()
    time.sleep(0.3)  # the subscriptions are made after CONNACK
    watch_local, watch_remote = Watcher(local, "#"), Watcher(remote, "#")
    n = 25
    publish(local, [(f"from-local/{i}", b"L%d" % i, i % 3, False) for i in range(n)])
    publish(remote, [(f"from-remote/{i}", b"R%d" % i, i % 3, False) for i in range(n)])
    for w in (watch_local, watch_remote):
        w.wait_count(2 * n)
    time.sleep(0.7)  # an echo would come back by now
    for w in (watch_local, watch_remote):
        w.close()
        counts = w.payloads()
        assert sorted(counts) == sorted([b"L%d" % i for i in range(n)] + [b"R%d" % i for i in range(n)])
        assert set(counts.values()) == {1}, counts
    assert bridge.stop() == 0


# --- notifications, retained flags, refusals --------------------------------------------------------------------


def test_notification_topic_and_retained_flags(tmp_path: Path) -> None:
    local = ours(tmp_path / "local")
    remote = ours(tmp_path / "remote")
    bridge = BridgeProcess(
        tmp_path / "bridge", local, remote, "-t", "r/# out 1", "--notification-topic", "bridge/t/state"
    )
    bridge.wait_connected()
    time.sleep(0.3)
    state = Watcher(local, "bridge/t/state", qos=1)
    remote_state = Watcher(remote, "bridge/t/state", qos=1)
    assert state.wait_last(b"1")[1:] == (b"1", 1, True)  # retained
    assert remote_state.wait_last(b"1")[1:] == (b"1", 1, True)

    # Retained flags are carried (5.0: subscribed with retain-as-published): the remote broker keeps the
    # retained one for a later subscriber.
    live = Watcher(remote, "r/#", qos=1)
    publish(local, [("r/kept", b"k", 1, True), ("r/live", b"l", 1, False)])
    live.wait_count(2)
    live.close()
    later = Watcher(remote, "r/#", qos=1)
    later.wait_count(1)
    later.close()
    assert later.messages == [("r/kept", b"k", 1, True)]

    remote.stop()
    bridge.wait_for("remote connection lost")
    state.wait_last(b"0")
    remote.restart()
    bridge.wait_for("connected to", 3)
    state.wait_last(b"1")
    bridge.kill()  # no goodbye: the wills say 0
    state.wait_last(b"0")
    state.close()
    remote_state.close()


def test_refused_credentials_exit_5(tmp_path: Path, mosquitto_auth: Broker) -> None:
    local = ours(tmp_path / "local")
    r = mqtt(
        "bridge", "--local", local.url, "--remote", mosquitto_auth.url, "-t", "a out", "--remote-username", "admin",
        "--remote-password", "wrong", "--state-dir", str(tmp_path / "s"),
    )  # fmt: skip
    assert r.returncode == 5, r.stderr
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert "remote side" in line and "refused" in line and line.startswith("mqtt: error:")
    assert "wrong" not in r.stderr
    ok = mqtt(
        "bridge", "--local", local.url, "--remote", mosquitto_auth.url, "-t", "a out", "--remote-username", "admin",
        "--remote-password", AUTH_USERS["admin"], "--state-dir", str(tmp_path / "s"), "--print-config",
    )  # fmt: skip
    assert ok.returncode == 0 and "password" not in ok.stdout and "not written out" in ok.stderr


# --- journal ---------------------------------------------------------------------------------------------------


def test_damaged_journal_is_moved_aside_and_a_second_bridge_refused(tmp_path: Path) -> None:
    local = ours(tmp_path / "local")
    remote = ours(tmp_path / "remote")
    state = tmp_path / "bridge" / "state"
    state.mkdir(parents=True)
    (state / "t.journal").write_bytes(b"MQTTBJ1\n" + b"\x00\x00\x00\x05\x12\x34\x56\x78Fjunk")
    bridge = BridgeProcess(tmp_path / "bridge", local, remote, "-t", "a/# out 2")
    bridge.wait_connected()
    assert "is damaged (checksum mismatch at byte 8); moved aside to" in bridge.text()
    aside = list(state.glob("t.journal.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().endswith(b"Fjunk")

    second = mqtt("bridge", "--local", local.url, "--remote", remote.url, "-t", "a/# out 2", "--name", "t",
                  "--state-dir", str(state))  # fmt: skip
    assert second.returncode == 1
    assert second.stderr.strip().endswith("another bridge with this name is running (its journal is locked)")
    assert bridge.stop() == 0


# --- usage -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "a/# sideways"], "topic rule 'a/# sideways'"),
        (["-t", "a/# out 3"], "topic rule 'a/# out 3'"),
        (["-t", "a/#/b"], "topic rule 'a/#/b'"),
        (["--remote", "http://x", "-t", "a"], "'http://x': the scheme must be"),
        (["--remote-protocol-version", "4", "-t", "a"], "protocol version '4'"),
        (["--restart-timeout", "5", "1", "-t", "a"], "need 0 < BASE <= CAP"),
        ([], "a bridge needs --local URL, --remote URL and at least one -t RULE"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    base = ["--local", "mqtt://127.0.0.1:1", "--remote", "mqtt://127.0.0.1:2"] if args else []
    if args and args[0] == "--remote":
        base = base[:2]
    r = mqtt("bridge", *base, *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqtt: error: ") and message in lines[0], lines


def test_print_config_round_trip_and_config_errors(tmp_path: Path) -> None:
    args = [
        "--local", "mqtt://127.0.0.1:1883", "--remote", "mqtts://cloud.example:8883", "--remote", "mqtt://backup:1883",
        "-t", 'sensors/# out 1 "" site/', "-t", "cmd/# in 2", "--name", "site", "--restart-timeout", "1", "60",
        "--remote-username", "u", "--remote-password-file", "/etc/pw", "--remote-protocol-version", "311",
        "--notification-topic", "bridges/site",
    ]  # fmt: skip
    r = mqtt("bridge", *args, "--print-config")
    assert r.returncode == 0, r.stderr
    data = tomllib.loads(r.stdout)
    (b,) = data["bridge"]
    assert b["name"] == "site" and b["topics"] == ['sensors/# out 1 "" site/', "cmd/# in 2"]
    assert b["restart_timeout"] == [1.0, 60.0] and b["notification_topic"] == "bridges/site"
    assert b["local"] == {"url": ["mqtt://127.0.0.1:1883"]}
    assert b["remote"] == {
        "url": ["mqtts://cloud.example:8883", "mqtt://backup:1883"],
        "username": "u",
        "password_file": "/etc/pw",
        "protocol_version": "311",
    }
    conf = tmp_path / "b.toml"
    conf.write_text(r.stdout)
    again = mqtt("bridge", "--config", str(conf), "--print-config")
    assert again.returncode == 0 and tomllib.loads(again.stdout) == data

    conf.write_text(r.stdout.replace("notification_topic", "notify_topic"))
    bad = mqtt("bridge", "--config", str(conf))
    assert bad.returncode == 2 and "bridge 1: unknown key 'notify_topic'" in bad.stderr
    conf.write_text("[[bridge]]\nname = 'x'\n")
    bad = mqtt("bridge", "--config", str(conf))
    assert bad.returncode == 2 and "bridge 1: no [bridge.local] table" in bad.stderr
    both = mqtt("bridge", "--config", str(conf), "-t", "a")
    assert both.returncode == 2 and "either --config or bridge flags" in both.stderr


def test_config_runs_several_bridges(tmp_path: Path) -> None:
    a, b, c = (ours(tmp_path / n) for n in "abc")
    conf = tmp_path / "bridges.toml"
    conf.write_text(
        f"""
[[bridge]]
name = "a-b"
topics = ["x/# out 1"]
state_dir = "{tmp_path / 'state'}"
local = {{ url = "{a.url}" }}
remote = {{ url = "{b.url}" }}

[[bridge]]
name = "a-c"
topics = ["x/# out 1 \\"\\" copy/"]
state_dir = "{tmp_path / 'state'}"
local = {{ url = "{a.url}" }}
remote = {{ url = "{c.url}" }}
"""
    )
    log = tmp_path / "log"
    with log.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "mqtt_cli", "bridge", "--config", str(conf)], stderr=f)
        RUNNING.append(proc)
    deadline = time.monotonic() + 20
    while log.read_text().count("connected to") < 4:
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.02)
    time.sleep(0.3)
    wb, wc = Watcher(b, "#"), Watcher(c, "#")
    publish(a, [("x/1", b"one", 1, False)])
    wb.wait_count(1)
    wc.wait_count(1)
    wb.close()
    wc.close()
    assert wb.messages == [("x/1", b"one", 1, False)] and wc.messages == [("copy/x/1", b"one", 1, False)]
    proc.terminate()
    assert proc.wait(timeout=20) == 0


def test_counts_in_json_status(tmp_path: Path) -> None:
    local = ours(tmp_path / "local")
    remote = ours(tmp_path / "remote")
    out = tmp_path / "status"
    with out.open("wb") as f, (tmp_path / "err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqtt_cli", "bridge", "--local", local.url, "--remote", remote.url, "-t",
             "a/# out 1", "-t", "b/# in 0", "--json-status", "--status-interval", "0.1",
             "--state-dir", str(tmp_path / "s")],
            stdout=f, stderr=err,
        )  # fmt: skip
        RUNNING.append(proc)
    deadline = time.monotonic() + 20
    while (tmp_path / "err").read_text().count("connected to") < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    time.sleep(0.3)
    publish(local, [(f"a/{i}", b"x", 1, False) for i in range(30)])
    publish(remote, [(f"b/{i}", b"y", 0, False) for i in range(5)])
    time.sleep(0.5)
    import json

    last = json.loads(out.read_text().strip().splitlines()[-1])
    assert last["local"]["connected"] and last["remote"]["connected"]
    assert last["out"]["forwarded"] == 30 and last["out"]["acknowledged"] == 30
    assert last["in"]["forwarded"] == 5 and last["local"]["in_flight"] == 0
    proc.terminate()
    assert proc.wait(timeout=20) == 0




def test_linger_does_not_slow_a_flow_a_small_window_limits(tmp_path: Path) -> None:
    """--linger lets a busy side read more at once, but a flow that the source broker's window limits (ours: 20
    in flight to a 3.1.1 client) must not wait a linger per window: with half a second, 2,000 messages would
    take 50 s. A bridge that lingered on every busy read failed this."""
    local = ours(tmp_path / "local", "--max-inflight", "20")
    remote = mosq(tmp_path / "remote")
    watcher = Watcher(remote, "w/#", qos=1)
    bridge = BridgeProcess(
        tmp_path / "b", local, remote, "-t", "w/# out 1", "--linger", "500", "--local-protocol-version", "311"
    )
    bridge.wait_connected()
    time.sleep(0.3)
    n = 2000
    start = time.monotonic()
    publish(local, [(f"w/{i % 7}", b"%d" % i, 1, False) for i in range(n)])
    watcher.wait_count(n, timeout=20)
    took = time.monotonic() - start
    assert set(watcher.payloads()) == {b"%d" % i for i in range(n)}
    assert took < 10, f"{n} messages through a window of 20 took {took:.1f} s"
    assert bridge.stop() == 0


def test_rules_removed_between_runs_are_unsubscribed(tmp_path: Path) -> None:
    """The persistent session would keep an old rule's subscription (and its messages coming) after the rules
    change; the bridge unsubscribes what it subscribed to last time and no longer needs."""
    local = ours(tmp_path / "local")
    remote = ours(tmp_path / "remote")
    bridge = BridgeProcess(tmp_path / "bridge", local, remote, "-t", "old/# out 1", "-t", "kept/# out 1")
    bridge.wait_connected()
    assert bridge.stop() == 0
    bridge.args[bridge.args.index("old/# out 1")] = "new/# out 1"
    bridge.start()
    bridge.wait_connected()
    bridge.wait_for("local: unsubscribed from old/# (no longer in the rules)")
    time.sleep(0.2)
    watch = Watcher(remote, "#")
    publish(local, [("old/x", b"stale", 1, False), ("new/x", b"fresh", 1, False), ("kept/x", b"k", 1, False)])
    watch.wait_count(2)
    time.sleep(0.3)
    watch.close()
    assert sorted(m[1] for m in watch.messages) == [b"fresh", b"k"]
    assert bridge.stop() == 0


class BlackHole:
    """A "broker" that accepts the bridge (a 5.0 CONNACK) and then acknowledges nothing: its messages stay in
    flight, so a drain has something to wait for."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.received = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        conn.recv(65536)  # CONNECT
        conn.sendall(bytes([0x20, 3, 0, 0, 0]))
        while data := conn.recv(65536):
            self.received += len(data)


def test_second_signal_leaves_at_once_and_loses_nothing(tmp_path: Path) -> None:
    local, remote = ours(tmp_path / "local"), ours(tmp_path / "remote")
    hole = BlackHole()
    bridge = BridgeProcess(tmp_path / "bridge", local, hole, "-t", "a/# out 1")  # type: ignore[arg-type]
    bridge.wait_connected()
    time.sleep(0.3)
    publish(local, [("a/1", b"kept", 1, False)])
    deadline = time.monotonic() + 10
    while hole.received == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hole.received, "the bridge forwarded nothing"
    assert bridge.proc is not None
    bridge.proc.terminate()  # drains: waits (up to 10 s) for the black hole's PUBACK
    time.sleep(0.5)
    assert bridge.proc.poll() is None, "the first signal should wait for the message in flight"
    started = time.monotonic()
    bridge.proc.terminate()
    assert bridge.proc.wait(timeout=5) == 130
    assert time.monotonic() - started < 3
    # Not acknowledged to the local broker: it is still in the bridge's session there, and goes out once the
    # bridge runs again towards a real remote broker.
    watch = Watcher(remote, "a/#", qos=1)
    bridge.args[bridge.args.index(hole.url)] = remote.url
    bridge.start()
    bridge.wait_connected()
    watch.wait_count(1)
    watch.close()
    assert watch.messages == [("a/1", b"kept", 1, False)]
