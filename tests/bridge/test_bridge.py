"""`mqtt bridge` as a real process between real brokers (ours and Debian's mosquitto): loss across restarts and a
killed bridge, no loops, notifications, journal damage, and one-line errors with their exit codes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.broker.conftest import start_ours
from tests.brokers import AUTH_USERS, Broker, free_port, start_mosquitto
from tests.conftest import missing_path

from .helpers import RUNNING, BridgeProcess, Watcher, publish

pytestmark = pytest.mark.interop


def mqtt(*args: str, timeout: float = 30, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqtt_cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
    )


def ours(workdir: Path, *args: str) -> Broker:
    broker = start_ours(workdir, *args)
    RUNNING.append(broker)
    return broker


def mosq(workdir: Path, **kw: Any) -> Broker:
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
def test_both_directions_on_hash_do_not_loop(tmp_path: Path, local_kind: str, remote_kind: str, version: str) -> None:
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


def test_notification_is_0_on_a_broker_whose_other_side_cannot_be_reached(tmp_path: Path) -> None:
    """As mosquitto's bridge: the local broker reads 0 (retained) while the remote is unreachable, not nothing;
    then 1 once it is there, and one 0 on each broker when the bridge stops."""
    local = ours(tmp_path / "local")
    remote = ours(tmp_path / "remote")
    remote.stop()  # unreachable until restarted, on the same port
    bridge = BridgeProcess(tmp_path / "bridge", local, remote, "-t", "r/# out 1", "--notification-topic", "nt/s")
    bridge.wait_for("local connected to")
    state = Watcher(local, "nt/s", qos=1)
    assert state.wait_last(b"0")[1:] == (b"0", 1, True)
    remote.restart()
    bridge.wait_connected()
    remote_state = Watcher(remote, "nt/s", qos=1)
    state.wait_last(b"1")
    remote_state.wait_last(b"1")
    assert bridge.stop() == 0
    state.wait_last(b"0")
    remote_state.wait_last(b"0")
    time.sleep(0.3)
    assert [m[1] for m in remote_state.messages] == [b"1", b"0"]  # the goodbye once, not twice
    state.close()
    remote_state.close()


def test_rabbitmq_as_the_remote_without_the_bridge_flag(tmp_path: Path, rabbitmq: Broker) -> None:
    """RabbitMQ's MQTT plugin closes the connection on the bridge flag (protocol level 0x84): the bridge connects
    again without it ("where the broker accepts it"), says so, and forwards both ways at QoS 1."""
    local = ours(tmp_path / "local")
    bridge = BridgeProcess(tmp_path / "bridge", local, rabbitmq, "-t", 'rb/# out 1 "" site/', "-t", "cmd/# in 1")
    bridge.wait_connected(timeout=30)
    assert "does not accept the bridge flag" in bridge.text()
    time.sleep(0.3)
    up = Watcher(rabbitmq, "site/#", qos=1)
    publish(local, [("rb/a", b"up", 1, False)])
    up.wait_count(1)
    assert up.messages == [("site/rb/a", b"up", 1, False)]
    down = Watcher(local, "cmd/#", qos=1)
    publish(rabbitmq, [("cmd/x", b"down", 1, False)])
    down.wait_count(1)
    assert down.messages == [("cmd/x", b"down", 1, False)]
    up.close()
    down.close()
    assert bridge.stop() == 0


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

    # 0 is a value, not an absent flag; a password in a URL is left out like --remote-password.
    zeros = mqtt("bridge", "--local", "mqtt://u:secret@127.0.0.1:1", "--remote", "mqtt://127.0.0.1:2", "-t", "a",
                 "--local-keepalive", "0", "--remote-session-expiry", "0", "--print-config")  # fmt: skip
    assert zeros.returncode == 0, zeros.stderr
    (z,) = tomllib.loads(zeros.stdout)["bridge"]
    assert z["local"] == {"url": ["mqtt://u@127.0.0.1:1"], "keepalive": 0} and z["remote"]["session_expiry"] == 0
    assert "secret" not in zeros.stdout and "the local password is not written out" in zeros.stderr

    conf.write_text(r.stdout.replace("notification_topic", "notify_topic"))
    bad = mqtt("bridge", "--config", str(conf))
    assert bad.returncode == 2 and "bridge 1: unknown key 'notify_topic'" in bad.stderr
    conf.write_text("[[bridge]]\nname = 'x'\n")
    bad = mqtt("bridge", "--config", str(conf))
    assert bad.returncode == 2 and "bridge 1: no [bridge.local] table" in bad.stderr
    both = mqtt("bridge", "--config", str(conf), "-t", "a")
    assert both.returncode == 2 and "either --config or bridge flags" in both.stderr


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('insecure = "false"', 'insecure = "false": expected true or false'),  # would have turned checks off
        ("keepalive = 1.9", "keepalive = 1.9: expected an integer"),
        ("session_expiry = true", "session_expiry = true: expected an integer"),
        ("url = 5", "url = 5: expected a string or a list of strings"),
        ('client_id = ""', "client_id is empty"),
        ('cafile = "{missing}"', "[bridge.local]: cafile {missing}: No such file or directory"),
    ],
)
def test_config_values_are_checked(tmp_path: Path, line: str, message: str) -> None:
    conf = tmp_path / "b.toml"
    line, message = missing_path(line, tmp_path), missing_path(message, tmp_path)
    url = "" if line.startswith("url") else 'url = "mqtt://127.0.0.1:1"\n'
    conf.write_text(f'[[bridge]]\ntopics = ["a"]\n[bridge.local]\n{url}{line}\n[bridge.remote]\nurl = "mqtt://x"\n')
    r = mqtt("bridge", "--config", str(conf))
    assert r.returncode == 2, r.stderr
    (err,) = r.stderr.strip().splitlines()
    assert err.startswith(f"mqtt: error: --config {conf}: bridge 1: ") and message in err, err


def test_tls_options_imply_tls_as_for_the_clients(tmp_path: Path) -> None:
    """--remote-cafile speaks TLS to an mqtt:// URL (the clients' --cafile, mosquitto's bridge_cafile): a message
    crosses to a TLS-only mosquitto. A missing file is named by this side's flag."""
    local = mosq(tmp_path / "local")
    remote = mosq(tmp_path / "remote", tls=True)
    assert remote.ca_path is not None
    bridge = BridgeProcess(
        tmp_path / "bridge", local, remote, "-t", "t/# out 1", "--remote-cafile", str(remote.ca_path)
    )
    bridge.wait_connected()
    assert f"remote connected to mqtts://{remote.host}:{remote.port}" in bridge.text()
    publish(local, [("t/1", b"over tls", 1, True)])
    deadline = time.monotonic() + 20
    got = ""
    while "over tls" not in got and time.monotonic() < deadline:
        got = subprocess.run(
            ["mosquitto_sub", "-h", remote.host, "-p", str(remote.port), "--cafile", str(remote.ca_path),
             "-t", "t/#", "--retained-only", "-W", "2", "-v"],
            capture_output=True, text=True, timeout=10,
        ).stdout  # fmt: skip
    assert got.strip() == "t/1 over tls"
    assert bridge.stop() == 0
    nowhere = tmp_path / "missing"
    missing = mqtt("bridge", "--local", local.url, "--remote", remote.url, "-t", "a", "--remote-cafile", str(nowhere))
    expected = f"mqtt: error: bridge: remote: --remote-cafile {nowhere}: No such file or directory"
    assert missing.returncode == 2 and expected in missing.stderr


def test_closed_json_status_output_stops_the_bridge_cleanly(tmp_path: Path) -> None:
    """`--json-status | head -1`: the bridge drains and exits 0, as a command whose output is closed does."""
    local, remote = ours(tmp_path / "local"), ours(tmp_path / "remote")
    cmd = [sys.executable, "-m", "mqtt_cli", "bridge", "--local", local.url, "--remote", remote.url, "-t", "a out 1",
           "--json-status", "--status-interval", "0.1", "--state-dir", str(tmp_path / "s")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    RUNNING.append(proc)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b'{"bridge":"bridge"')
    proc.stdout.close()
    assert proc.wait(timeout=20) == 0
    err = proc.stderr.read().decode()
    assert "the status output was closed: stopping" in err and "Traceback" not in err and "Exception" not in err


def test_config_runs_several_bridges(tmp_path: Path) -> None:
    a, b, c = (ours(tmp_path / n) for n in "abc")
    conf = tmp_path / "bridges.toml"
    conf.write_text(
        f"""
[[bridge]]
name = "a-b"
topics = ["x/# out 1"]
state_dir = "{tmp_path / "state"}"
local = {{ url = "{a.url}" }}
remote = {{ url = "{b.url}" }}

[[bridge]]
name = "a-c"
topics = ["x/# out 1 \\"\\" copy/"]
state_dir = "{tmp_path / "state"}"
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


@pytest.mark.slow
@pytest.mark.parametrize("local_kind", ["mosquitto", "ours"])
def test_a_stalled_remote_with_more_than_65535_messages_behind_it(tmp_path: Path, local_kind: str) -> None:
    """A broker with no in-flight limit (mosquitto's max_inflight_messages 0, our --max-inflight 0) sends a
    3.1.1 bridge every queued message at once. With the remote stopped, more than 65,535 await the bridge's
    acknowledgement. mosquitto then reuses identifiers still in flight (DUP 0): the bridge took those for
    re-sends and dropped them, so 4,465 of these 70,000 never crossed and mosquitto's queue stayed stuck behind
    them. Ours ran out of identifiers and disconnected the publisher."""
    if local_kind == "ours":
        local = ours(tmp_path / "local", "--max-inflight", "0", "--max-queued-messages", "0")
    else:
        local = mosq(tmp_path / "local", extra_conf="max_inflight_messages 0")
    remote = mosq(tmp_path / "remote")
    watcher = Watcher(remote, "s/#", qos=1)
    bridge = BridgeProcess(
        tmp_path / "b", local, remote, "-t", "s/# out 1",
        "--local-protocol-version", "311", "--remote-protocol-version", "311",
    )  # fmt: skip
    bridge.wait_connected()
    time.sleep(0.3)
    n = 70_000
    assert remote.proc is not None
    remote.proc.send_signal(signal.SIGSTOP)
    try:
        lines = "".join(f"{i}\n" for i in range(n))
        sent = mqtt("pub", "-h", local.host, "-p", str(local.port), "-t", "s/x", "-q", "1", "-l", input=lines)
        assert sent.returncode == 0, sent.stderr
    finally:
        remote.proc.send_signal(signal.SIGCONT)
    watcher.wait_count(n, timeout=60)
    got = watcher.payloads()
    missing = n - len(set(got) & {b"%d" % i for i in range(n)})
    assert missing == 0, f"{missing} of {n} messages did not cross"
    assert bridge.stop() == 0


def test_rules_removed_between_runs_are_unsubscribed(tmp_path: Path) -> None:
    """The persistent session would keep an old rule's subscription (and its messages coming) after the rules
    change; the bridge unsubscribes what it subscribed to last time and no longer needs."""
    local = ours(tmp_path / "local")
    remote = ours(tmp_path / "remote")
    bridge = BridgeProcess(tmp_path / "bridge", local, remote, "-t", "old/# out 1", "-t", "kept/# out 1")
    bridge.wait_connected()
    first = Watcher(remote, "#")
    publish(local, [("old/y", b"through", 1, False)])  # subscribed: the first run's filters are in the session
    first.wait_count(1)
    first.close()
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
    assert "stopping: waiting for 1 message(s) in flight (up to 10 s; a second signal leaves at once)" in bridge.text()
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


def test_a_clean_stop_reads_as_one_and_the_status_names_where_it_connects(tmp_path: Path) -> None:
    """The default name is not repeated ("bridge: ...", not "bridge bridge: ..."); before its first connection a
    side's status shows the address being tried, not ""; SIGINT/SIGTERM log "disconnected", not "connection
    lost: disconnected by the client", which reads as a failure."""
    local = ours(tmp_path / "local")
    nobody = free_port()
    cmd = [sys.executable, "-m", "mqtt_cli", "bridge", "--local", local.url, "--remote", f"mqtt://127.0.0.1:{nobody}",
           "-t", "a out 1", "--json-status", "--status-interval", "0.1", "--state-dir", str(tmp_path / "s"),
           "--restart-timeout", "0.1", "0.5"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    RUNNING.append(proc)
    assert proc.stdout is not None and proc.stderr is not None
    status = json.loads(proc.stdout.readline())
    assert status["remote"]["endpoint"] == f"mqtt://127.0.0.1:{nobody}" and not status["remote"]["connected"]
    while not status["local"]["connected"]:
        status = json.loads(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0
    err = proc.stderr.read().decode()
    assert "bridge: local connected to" in err and "bridge: local disconnected" in err, err
    assert "connection lost" not in err and "bridge bridge" not in err, err
