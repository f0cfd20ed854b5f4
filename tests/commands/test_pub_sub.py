"""`mqtt pub` and `mqtt sub` as processes against Debian's mosquitto: messages, flags, output forms, versions."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ..brokers import AUTH_USERS, Broker
from ..scripted_brokers import queue_before_suback
from .conftest import Mqtt

BINARY = bytes(range(256)) + b"\n\r\n\x00end"


def at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


def persistent_sub(mqtt: Mqtt, broker: Broker, topic: str, name: str, *extra: str) -> None:
    """Registers a persistent QoS 1 session (`sub -E -c`): messages published next wait in it for `-c -i name`."""
    result = mqtt("sub", *at(broker), "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-E", *extra)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("version", ["31", "311", "5"])
def test_pub_then_sub_every_version_and_qos(mqtt: Mqtt, mosquitto: Broker, topic: str, version: str) -> None:
    name = f"{topic}-{version}"
    persistent_sub(mqtt, mosquitto, topic, name, "-V", version)
    for qos in ("1", "2"):  # QoS 0 messages are not kept for an offline session: retained below
        result = mqtt("pub", *at(mosquitto), "-V", version, "-t", f"{topic}/q{qos}", "-q", qos, "-m", f"hello {qos}")
        assert (result.returncode, result.stderr) == (0, "")
    out = mqtt("sub", *at(mosquitto), "-V", version, "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-C", "2", "-v",
               "-W", "20")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.text.splitlines() == [f"{topic}/q1 hello 1", f"{topic}/q2 hello 2"]
    assert mqtt("pub", *at(mosquitto), "-V", version, "-t", f"{topic}/q0", "-m", "hello 0", "-r").returncode == 0
    out = mqtt("sub", *at(mosquitto), "-V", version, "-t", f"{topic}/q0", "--retained-only", "-v")
    assert out.text == f"{topic}/q0 hello 0\n"


def test_binary_payloads_are_byte_exact(mqtt: Mqtt, mosquitto: Broker, topic: str, tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(BINARY)
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/f", "-f", path, "-r", "-q", "1").returncode == 0
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/s", "-s", "-r", input=BINARY[::-1]).returncode == 0
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/f", "--retained-only", "-N")
    assert out.stdout == BINARY
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/s", "--retained-only", "-N")
    assert out.stdout == BINARY[::-1]
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/f", "--retained-only", "--hex")
    assert out.text == BINARY.hex() + "\n"
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/f", "--retained-only", "--json")
    (obj,) = map(json.loads, out.text.splitlines())
    assert obj["encoding"] == "base64" and obj["retain"] is True and obj["topic"] == f"{topic}/f"


def test_json_round_trip_through_a_pipe(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    sent = [
        ("a", b"text \xc3\xa9", ["--content-type", "text/plain", "--user-property", "k=v", "--user-property", "k=w"]),
        ("b", BINARY, ["--correlation-data", "c0rr", "--response-topic", "reply/here", "--payload-format", "0"]),
        ("c", b"x", ["--message-expiry", "3600"]),
    ]
    for name, payload, props in sent:
        r = mqtt(
            "pub", *at(mosquitto), "-V", "5", "-t", f"{topic}/src/{name}", "-s", "-r", "-q", "1", *props, input=payload
        )
        assert r.returncode == 0, r.stderr
    first = mqtt("sub", *at(mosquitto), "-t", f"{topic}/src/#", "--retained-only", "--json")
    lines = [json.loads(line) for line in first.text.splitlines()]
    # What a jq filter would do: move the messages elsewhere.
    moved = "".join(json.dumps({**o, "topic": o["topic"].replace("/src/", "/dst/")}) + "\n" for o in lines)
    r = mqtt("pub", *at(mosquitto), "--json-lines", "-q", "1", input=moved.encode())
    assert r.returncode == 0, r.stderr
    second = mqtt("sub", *at(mosquitto), "-t", f"{topic}/dst/#", "--retained-only", "--json")
    again = [json.loads(line) for line in second.text.splitlines()]
    strip = [
        {k: v for k, v in o.items() if k not in ("received", "topic")}
        | {"properties": {k: v for k, v in o["properties"].items() if k != "message_expiry_interval"}}
        for o in lines
    ]
    assert [
        {k: v for k, v in o.items() if k not in ("received", "topic")}
        | {"properties": {k: v for k, v in o["properties"].items() if k != "message_expiry_interval"}}
        for o in again
    ] == strip
    assert lines[0]["properties"]["user_properties"] == [["k", "v"], ["k", "w"]]
    assert lines[1]["properties"]["correlation_data"] == b"c0rr".hex()
    assert 3500 < lines[2]["properties"]["message_expiry_interval"] <= 3600


@pytest.mark.parametrize("count", [0, 1, 10_000])
def test_retained_only_ends_when_all_arrived(mqtt: Mqtt, mosquitto: Broker, topic: str, count: int) -> None:
    lines = "".join(
        json.dumps({"topic": f"{topic}/{i}", "payload": str(i), "retain": True}) + "\n" for i in range(count)
    )
    if count:
        assert mqtt("pub", *at(mosquitto), "--json-lines", "-q", "1", input=lines.encode()).returncode == 0
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "--retained-only", "-v", timeout=60)
    assert out.returncode == 0, out.stderr
    got = out.text.splitlines()
    assert len(got) == count
    assert sorted(got) == sorted(f"{topic}/{i} {i}" for i in range(count))


def test_stdin_lines_100000_all_delivered(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    n = 100_000
    persistent_sub(mqtt, mosquitto, topic, f"{topic}-counter")
    lines = "".join(f"{i}\n" for i in range(n)).encode()
    result = mqtt("pub", *at(mosquitto), "-t", f"{topic}/lines", "-l", "-q", "1", input=lines, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    out = mqtt(
        "sub", *at(mosquitto), "-t", f"{topic}/#", "-q", "1", "-c", "-i", f"{topic}-counter", "-C", n, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = out.text.splitlines()
    assert len(got) == n and set(got) == {str(i) for i in range(n)}


def test_lines_keep_empty_lines_and_a_last_line_without_newline(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    persistent_sub(mqtt, mosquitto, topic, f"{topic}-l")
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/l", "-l", "-q", "1", input=b"one\n\nthree").returncode == 0
    out = mqtt(
        "sub",
        *at(mosquitto),
        "-t",
        f"{topic}/#",
        "-q",
        "1",
        "-c",
        "-i",
        f"{topic}-l",
        "-C",
        "3",
        "-F",
        "[%p]",
        "-W",
        "20",
    )
    assert out.text.splitlines() == ["[one]", "[]", "[three]"]


def test_null_message_repeat_and_retain(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    persistent_sub(mqtt, mosquitto, topic, f"{topic}-r")
    assert (
        mqtt(
            "pub", *at(mosquitto), "-t", f"{topic}/r", "-m", "x", "--repeat", "3", "--repeat-delay", "0.01", "-q", "1"
        ).returncode
        == 0
    )
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/n", "-n", "-q", "2").returncode == 0
    out = mqtt(
        "sub",
        *at(mosquitto),
        "-t",
        f"{topic}/#",
        "-q",
        "1",
        "-c",
        "-i",
        f"{topic}-r",
        "-C",
        "4",
        "-F",
        "%t:%l",
        "-W",
        "20",
    )
    assert out.text.splitlines() == [f"{topic}/r:1"] * 3 + [f"{topic}/n:0"]


def test_sub_filters_exclude_skip_retained_and_unsubscribe(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    for sub_topic in ("keep", "drop/x"):
        assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/{sub_topic}", "-m", sub_topic, "-r").returncode == 0
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-T", f"{topic}/drop/#", "--retained-only")
    assert out.text.splitlines() == ["keep"]
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-R", "-W", "0.3")
    assert (out.returncode, out.stdout) == (27, b"")
    # -U: unsubscribe a persistent session, which then gets nothing more.
    persistent_sub(mqtt, mosquitto, topic, f"{topic}-u")
    assert mqtt("sub", *at(mosquitto), "-c", "-i", f"{topic}-u", "-U", f"{topic}/#").returncode == 0
    mqtt("pub", *at(mosquitto), "-t", f"{topic}/after", "-m", "late", "-q", "1")
    out = mqtt("sub", *at(mosquitto), "-c", "-i", f"{topic}-u", "-t", f"{topic}/none", "-W", "0.3")
    assert out.stdout == b""


def test_remove_retained(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    for i in range(3):
        assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/{i}", "-m", str(i), "-r").returncode == 0
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "--retained-only", "--remove-retained")
    assert sorted(out.text.splitlines()) == ["0", "1", "2"]
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "--retained-only")
    assert (out.returncode, out.stdout) == (0, b"")


def test_format_strings(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    r = mqtt("pub", *at(mosquitto), "-V", "5", "-t", f"{topic}/f", "-m", "hi", "-r", "-q", "1",
             "--content-type", "ct", "--user-property", "a=b")  # fmt: skip
    assert r.returncode == 0
    out = mqtt(
        "sub", *at(mosquitto), "-t", f"{topic}/f", "--retained-only", "-F", r"%t|%p|%q|%r|%l|%x|%X|%C|%P|%%|\t|%5l|@@"
    )
    assert out.text == f"{topic}/f|hi|0|1|2|6869|6869|ct|a:b|%|\t|    2|@\n"
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/f", "--retained-only", "-F", "%j")
    obj = json.loads(out.text)
    assert (obj["topic"], obj["payload"], obj["retain"]) == (f"{topic}/f", "hi", 1)


def test_exit_on_subscribe_and_count(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-E")
    assert (out.returncode, out.stdout) == (0, b"")


def test_message_properties_reach_a_5_subscriber(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    props = ["--content-type", "application/json", "--response-topic", "r/t", "--correlation-data", "id-1",
             "--payload-format", "1", "--topic-alias", "1"]  # fmt: skip
    r = mqtt("pub", *at(mosquitto), "-t", f"{topic}/p", "-m", "{}", "-r", *props)
    assert r.returncode == 0, r.stderr
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/p", "--retained-only", "--json", "--subscription-identifier", "9")
    props = json.loads(out.text)["properties"]
    assert props["content_type"] == "application/json" and props["response_topic"] == "r/t"
    assert props["correlation_data"] == b"id-1".hex() and props["payload_format_indicator"] == 1
    assert props["subscription_identifiers"] == [9]


def test_url_websocket_and_unix_socket(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    assert mqtt("pub", "-L", f"mqtt://{mosquitto.host}:{mosquitto.port}/{topic}/url", "-m", "u", "-r").returncode == 0
    out = mqtt("sub", "-L", f"ws://{mosquitto.host}:{mosquitto.ws_port}/mqtt", "-t", f"{topic}/#", "--retained-only")
    assert out.text == "u\n"
    out = mqtt("sub", "--unix", str(mosquitto.unix_path), "-t", f"{topic}/url", "--retained-only", "-V", "311")
    assert out.text == "u\n"


def test_will_is_published_when_the_client_dies(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    import signal
    import subprocess
    import time

    from .conftest import popen_mqtt, wait_for_output

    proc = popen_mqtt("sub", *at(mosquitto), "-t", f"{topic}/x", "--will-topic", f"{topic}/will",
                      "--will-payload", "gone", "--will-retain", "--will-qos", "1", "-d", env=mqtt.env)  # type: ignore[attr-defined]  # fmt: skip
    wait_for_output(proc, b"received SUBACK")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/will", "--retained-only")
        if out.stdout:
            break
        time.sleep(0.1)
    assert out.text == "gone\n"
    assert proc.returncode == -signal.SIGKILL
    del subprocess


def test_subscription_options(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/r", "-m", "kept", "-r", "-q", "1").returncode == 0
    # Retain handling 2: no retained messages on subscribing.
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "--retain-handling", "2", "-W", "0.5")
    assert (out.returncode, out.stdout) == (27, b"")
    # Retain as published: a retained message queued for a session keeps its retain flag. (mosquitto 2.0.11 keeps
    # it for queued messages without the option too, so only the option's side is checked here.)
    session = ["-t", f"{topic}/live/#", "-q", "1", "-c", "-i", f"{topic}-rap", "--retain-as-published"]
    assert mqtt("sub", *at(mosquitto), *session, "-E").returncode == 0
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/live/x", "-m", "m", "-r", "-q", "1").returncode == 0
    # (retain handling 2 on the way back: subscribing again must not send the retained message anew)
    out = mqtt("sub", *at(mosquitto), *session, "--retain-handling", "2", "-C", "1", "-F", "%r %p", "-W", "20")
    assert out.text == "1 m\n"
    # No local: our own --remove-retained clear does not come back to us.
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/r", "--no-local", "--retained-only", "--remove-retained")
    assert (out.returncode, out.text) == (0, "kept\n")


def test_messages_before_suback_do_not_hold_it_back(mqtt: Mqtt) -> None:
    """A resumed session's queue can reach the client before SUBACK. The reader must not stop on a full message
    buffer with SUBACK unread behind it (it did: `sub -c` then waited for SUBACK until its 60 s ran out). The
    broker here answers CONNECT with 3,000 messages, more than the buffer holds, and SUBSCRIBE after them."""
    n = 3000
    port = queue_before_suback(n)
    out = mqtt("sub", "-h", "127.0.0.1", "-p", port, "-V", "311", "-t", "q/#", "-c", "-i", "s1", "-C", n, timeout=30)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.text.splitlines() == [str(i) for i in range(n)]


def test_password_option_rewrite_leaves_other_values_alone(
    mqtt: Mqtt, mosquitto: Broker, broker_factory: Callable[..., Broker], topic: str
) -> None:
    # "-P" and "--password" as the value of -m are payloads, not password prompts.
    for payload in ("-P", "--password"):
        assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/m", "-r", "-q", "1", "-m", payload).returncode == 0
        out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/m", "--retained-only")
        assert out.text == f"{payload}\n"
    # A password starting with '-' (not one of the command's options) is the password, as with mosquitto_pub.
    broker = broker_factory(users={"bob": "-dash-pw"})
    result = mqtt("pub", *at(broker), "-u", "bob", "-P", "-dash-pw", "-t", "a", "-m", "x")
    assert (result.returncode, result.stderr) == (0, "")
    mosquitto_pub = subprocess.run(["mosquitto_pub", *at(broker), "-u", "bob", "-P", "-dash-pw", "-t", "a", "-m", "x"])
    assert mosquitto_pub.returncode == 0  # the oracle agrees


def test_connection_target_on_the_command_line_replaces_the_profiles(
    mqtt: Mqtt, mosquitto: Broker, mosquitto_auth: Broker, topic: str
) -> None:
    config = Path(mqtt.env["XDG_CONFIG_HOME"]) / "mqtt-cli"  # type: ignore[attr-defined]
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        '[profiles.url]\nurl = "mqtt://127.0.0.1:1"\n'
        f'[profiles.unix]\nunix = "{config / "missing" / "mqtt.sock"}"\n'
        '[profiles.user]\nusername = "reader"\n'
    )
    pub = ["pub", "-t", f"{topic}/x", "-m", "x"]
    # A profile's url or unix socket gives way to -h/-p on the command line (no complaint about a --url never typed).
    for profile in ("url", "unix"):
        result = mqtt(*pub, "--profile", profile, *at(mosquitto))
        assert (result.returncode, result.stderr) == (0, ""), profile
    result = mqtt(*pub, "--profile", "url", "-p", mosquitto.port)
    assert (result.returncode, result.stderr) == (0, "")
    # The user and password of a -L URL go together: a profile's or the environment's user name does not win.
    url = f"mqtt://admin:{AUTH_USERS['admin']}@{mosquitto_auth.host}:{mosquitto_auth.port}"
    result = mqtt("pub", "--profile", "user", "-L", url, "-t", "a", "-m", "x")
    assert (result.returncode, result.stderr) == (0, "")
    result = mqtt("pub", "-L", url, "-t", "a", "-m", "x", env_extra={"MQTT_USERNAME": "reader"})
    assert (result.returncode, result.stderr) == (0, "")


def test_empty_payload_and_json_helper_as_mosquitto_sub(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    # The same two messages, queued for a session of ours and one of mosquitto_sub's (the oracle), per form (a
    # session each: mosquitto_sub -C may leave its last message unacknowledged, to come again).
    for i, form in enumerate((["-v"], ["-F", "%j"], ["-F", "%J"])):
        sessions = {"ours": f"{topic}-ours{i}", "mosquitto": f"{topic}-mosq{i}"}
        args = ["-t", f"{topic}/{i}/#", "-q", "1", "-c", "-C", "2", "-W", "20"]
        for name in sessions.values():
            assert mqtt("sub", *at(mosquitto), *args, "-i", name, "-E").returncode == 0
        assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/{i}/empty", "-n", "-q", "1").returncode == 0
        assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/{i}/obj", "-m", '{"a":1}', "-q", "1").returncode == 0
        ours = mqtt("sub", *at(mosquitto), *args, "-i", sessions["ours"], *form)
        theirs = subprocess.run(["mosquitto_sub", *at(mosquitto), *args, "-i", sessions["mosquitto"], *form],
                                capture_output=True, timeout=30)  # fmt: skip
        assert ours.returncode == theirs.returncode == 0, (ours.stderr, theirs.stderr)
        if form == ["-v"]:
            expected = f'{topic}/{i}/empty (null)\n{topic}/{i}/obj {{"a":1}}\n'
            assert ours.text == theirs.stdout.decode() == expected
            continue
        # "tst" differs (the time, and mosquitto's "Z+0000"), "mid" too (each session numbers its own); every
        # other field, and their order, the same.
        mine = [json.loads(line) for line in ours.text.splitlines()]
        oracle = [json.loads(line) for line in theirs.stdout.decode().splitlines()]
        for m in mine + oracle:
            del m["tst"]
            assert isinstance(m["mid"], int)
            m["mid"] = 0
        assert [list(m.items()) for m in mine] == [list(m.items()) for m in oracle], (mine, oracle)
        assert mine[0]["payloadlen"] == 0 and mine[0]["payload"] is None


@pytest.mark.parametrize("command", ["sub", "rr"])
def test_timeout_says_goodbye_so_no_will_goes_out(mqtt: Mqtt, mosquitto: Broker, topic: str, command: str) -> None:
    """-W ends the wait, not the connection: DISCONNECT goes out and the will does not (as mosquitto_sub -W).
    The timeout ended the whole connection block, so the broker published the will of a client that left on time."""
    args = ["-t", f"{topic}/q", "-e", f"{topic}/r", "-m", "?"] if command == "rr" else ["-t", f"{topic}/q"]
    will = ["--will-topic", f"{topic}/will", "--will-payload", "gone", "--will-retain", "--will-qos", "1"]
    out = mqtt(command, *at(mosquitto), *args, *will, "-W", "0.5")
    assert out.returncode == 27, out.stderr
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/marker", "-m", "m", "-r").returncode == 0
    wills = mqtt("sub", *at(mosquitto), "-t", f"{topic}/will", "-t", f"{topic}/marker", "--retained-only", "-v")
    assert wills.text == f"{topic}/marker m\n"  # the will would be retained beside it


def _debug_lines(text: str, client_id: str) -> list[str]:
    """What -d printed, with the client's identifier and libmosquitto's own counter for QoS 0 (the wire has
    none) made comparable."""
    lines = [ln for ln in text.splitlines() if ln.startswith(("Client ", "Subscribed ", "Received "))]
    return [re.sub(r"(q0, r[01], )m\d+,", r"\1m0,", ln.replace(f"Client {client_id} ", "Client ID ")) for ln in lines]


@pytest.mark.parametrize("version", ["31", "311", "5"])
@pytest.mark.parametrize("qos", ["0", "1", "2"])
def test_debug_prints_what_mosquitto_pub_d_prints(mqtt: Mqtt, mosquitto: Broker, topic: str, version: str,
                                                  qos: str) -> None:  # fmt: skip
    mosq_version = {"31": "mqttv31", "311": "mqttv311", "5": "mqttv5"}[version]
    common = ["-t", f"{topic}/d", "-m", "hello", "-q", qos, "-r", "-i", "dbg"]
    ours = mqtt("pub", *at(mosquitto), *common, "-V", version, "-d")
    theirs = subprocess.run(["mosquitto_pub", *at(mosquitto), *common, "-V", mosq_version, "-d"], capture_output=True,
                            text=True, timeout=20)  # fmt: skip
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    expected = _debug_lines(theirs.stdout, "dbg")
    assert len(expected) >= 4  # CONNECT, CONNACK, PUBLISH, ..., DISCONNECT: the oracle printed something
    assert _debug_lines(ours.text, "dbg") == expected


def test_debug_prints_what_mosquitto_sub_d_prints(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    """Two filters (one SUBSCRIBE, a line per filter), a retained QoS 1 message, -C 1."""
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/s", "-m", "kept", "-r", "-q", "1").returncode == 0
    common = ["-t", f"{topic}/s", "-t", f"{topic}/other", "-q", "1", "-C", "1", "-i", "dbg-sub", "-W", "20"]
    ours = mqtt("sub", *at(mosquitto), *common, "-V", "311", "-d")
    theirs = subprocess.run(["mosquitto_sub", *at(mosquitto), *common, "-V", "mqttv311", "-d"], capture_output=True,
                            text=True, timeout=30)  # fmt: skip
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    expected = _debug_lines(theirs.stdout, "dbg-sub")
    assert any("received PUBLISH (d0, q1, r1, m1," in ln for ln in expected), expected
    assert _debug_lines(ours.text, "dbg-sub") == expected
    assert "kept" in ours.text.splitlines()  # the message itself, among the debug lines


def test_json_helper_prints_properties_as_mosquitto_sub(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    """-F %j/%J hold a 5.0 message's "properties" object exactly as Debian's mosquitto_sub 2.0 writes it:
    libmosquitto's names, wire order, user properties in one object (a repeated name repeated as a key),
    correlation data as a string; compared as text, only the time and the packet identifier set aside."""
    props = ["--user-property", "k=v", "--user-property", "k=w", "--content-type", "text/json", "--response-topic",
             "r/t", "--correlation-data", "abc", "--message-expiry", "86400", "--payload-format", "1",
             "--user-property", "a=b"]  # fmt: skip
    for i, form in enumerate(("%j", "%J")):
        sessions = {"ours": f"{topic}-ours{i}", "mosquitto": f"{topic}-mosq{i}"}
        args = ["-V", "5", "-t", f"{topic}/{i}/#", "-q", "1", "-c", "-C", "2", "-W", "20"]
        for name in sessions.values():
            assert mqtt("sub", *at(mosquitto), *args, "-i", name, "-E").returncode == 0
        messages = (("obj", '{"a":1}'), ("plain", '[1, 2.0, 0.1, 1e300, "é\\n", {"k": null, "k": true}]'))
        for sub_topic, message in messages:
            pub = mqtt("pub", *at(mosquitto), "-V", "5", "-t", f"{topic}/{i}/{sub_topic}", "-m", message, "-q", "1",
                       *props)  # fmt: skip
            assert pub.returncode == 0, pub.stderr
        ours = mqtt("sub", *at(mosquitto), *args, "-i", sessions["ours"], "-F", form)
        theirs = subprocess.run(["mosquitto_sub", *at(mosquitto), *args, "-i", sessions["mosquitto"], "-F", form],
                                capture_output=True, timeout=30)  # fmt: skip
        assert ours.returncode == theirs.returncode == 0, (ours.stderr, theirs.stderr)

        def steady(text: str) -> str:
            text = re.sub(r'"tst":"[^"]*"', '"tst":""', text)
            text = re.sub(r'"mid":\d+', '"mid":0', text)
            return re.sub(r'"message-expiry-interval":\d+', '"message-expiry-interval":0', text)  # counts down

        assert '"properties":{"user-properties":{"k":"v","k":"w","a":"b"},' in ours.text, ours.text
        assert steady(ours.text) == steady(theirs.stdout.decode())


def test_pub_format_sends_binary_typed_on_a_line(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    name = f"{topic}-fmt"
    persistent_sub(mqtt, mosquitto, topic, name)
    sent = [
        ("pub", "-t", f"{topic}/h", "-q", "1", "--format", "hex", "-m", "00ff 10"),
        ("pub", "-t", f"{topic}/b", "-q", "1", "--format", "base64", "-m", "AAEC"),
    ]
    for args in sent:
        result = mqtt(*args, *at(mosquitto))
        assert (result.returncode, result.stderr) == (0, ""), args
    lines = mqtt("pub", *at(mosquitto), "-t", f"{topic}/l", "-q", "1", "--format", "hex", "-l", input=b"0a0b\nff\n")
    assert (lines.returncode, lines.stderr) == (0, "")
    out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-C", "4", "-W", "20",
               "-F", "%t %x")  # fmt: skip
    assert out.text.splitlines() == [f"{topic}/h 00ff10", f"{topic}/b 000102", f"{topic}/l 0a0b", f"{topic}/l ff"]
    bad = mqtt("pub", *at(mosquitto), "-t", f"{topic}/l", "--format", "hex", "-l", input=b"0a\nzz\n")
    assert bad.returncode == 2 and "standard input line 2: --format hex: not hexadecimal" in bad.stderr


def test_sub_format_output_and_stats(mqtt: Mqtt, mosquitto: Broker, topic: str, tmp_path: Path) -> None:
    """--format writes each payload as text, hex, base64 or pretty JSON; --output appends to a file, one message a
    line; --stats counts per topic and QoS on standard error when sub ends."""
    name = f"{topic}-out"
    messages = [("j", b'{"a":[1,2]}', "1"), ("j", b"not json", "1"), ("b", bytes([0, 255]), "0"), ("b", b"x", "1")]

    def publish_all() -> None:
        persistent_sub(mqtt, mosquitto, topic, name)
        for sub_topic, payload, qos in messages:
            result = mqtt("pub", *at(mosquitto), "-t", f"{topic}/{sub_topic}", "-q", qos, "-s", input=payload)
            assert result.returncode == 0, result.stderr

    def receive(*args: str) -> tuple[bytes, str]:
        out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-C", "3", "-W", "20",
                   *args)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout, out.stderr

    messages[2] = ("b", bytes([0, 255]), "1")  # QoS 0 is not kept for the offline session
    publish_all()
    stdout, stderr = receive("--format", "json")
    assert stdout == b'{\n  "a": [\n    1,\n    2\n  ]\n}\nnot json\n\x00\xff\n'
    assert stderr == ""
    publish_all()
    stdout, _ = receive("--format", "base64", "-v")
    assert stdout.decode().splitlines() == [f"{topic}/j eyJhIjpbMSwyXX0=", f"{topic}/j bm90IGpzb24=", f"{topic}/b AP8="]
    out_file = tmp_path / "messages.txt"
    out_file.write_text("kept\n")
    publish_all()
    stdout, stderr = receive("--format", "json", "--output", str(out_file), "--stats")
    assert stdout == b""
    assert out_file.read_bytes() == b'kept\n{"a": [1, 2]}\nnot json\n\x00\xff\n'  # appended, one a line
    assert stderr.splitlines() == ["mqtt: 3 messages received", "  count  QoS  topic", f"      2    1  {topic}/j",
                                   f"      1    1  {topic}/b"]  # fmt: skip
    bad = mqtt("sub", *at(mosquitto), "-t", "a", "--output", str(tmp_path / "no" / "f"), "-E")
    assert bad.returncode == 2 and bad.stderr.startswith("mqtt: error: --output ") and "No such file" in bad.stderr
    yaml = mqtt("sub", "-t", "a", "--format", "yaml")
    assert yaml.stderr == "mqtt: error: --format 'yaml': use text, hex, base64, json\n"


def test_one_json_naming_of_properties_in_dump_sub_and_pub(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    """`dump --json` and `sub --json` name the 5.0 properties alike (the attributes of Properties), and `pub
    --json-lines` takes either's line back (and the `[[name, value], ...]` list dump wrote until 0.1.0)."""
    from mqtt_cli.core.encoder import encode
    from mqtt_cli.core.packets import Publish
    from mqtt_cli.core.properties import Properties

    props = Properties(
        payload_format_indicator=1, message_expiry_interval=86400, content_type="text/plain", response_topic="r/t",
        correlation_data=b"\x00\x01", user_properties=[("k", "v"), ("k", "w")],
    )  # fmt: skip
    expected = {
        "payload_format_indicator": 1, "message_expiry_interval": 86400, "content_type": "text/plain",
        "response_topic": "r/t", "correlation_data": "0001", "user_properties": [["k", "v"], ["k", "w"]],
    }  # fmt: skip
    packet = encode(Publish(f"{topic}/dumped", b"hi", 1, packet_id=1, properties=props), 5)
    dumped = mqtt("dump", "--json", "--protocol-version", "5", "--hex", packet.hex())
    assert dumped.returncode == 0, dumped.stderr
    record = json.loads(dumped.stdout)
    assert record["properties"] == expected

    name = f"{topic}-names"
    persistent_sub(mqtt, mosquitto, topic, name, "-V", "5")
    old_form = {"topic": f"{topic}/old", "payload": "x", "qos": 1,
                "properties": [["user_property", ["a", "b"]], ["content_type", "c"]]}  # fmt: skip
    lines = json.dumps({**record, "payload": "hi"}) + "\n" + json.dumps(old_form) + "\n"
    pub = mqtt("pub", *at(mosquitto), "-V", "5", "--json-lines", input=lines.encode())
    assert (pub.returncode, pub.stderr) == (0, "")
    out = mqtt("sub", *at(mosquitto), "-V", "5", "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-C", "2", "--json",
               "-W", "20")  # fmt: skip
    assert out.returncode == 0, out.stderr
    first, second = (json.loads(line) for line in out.text.splitlines())
    assert first["properties"]["message_expiry_interval"] <= 86400  # counts down while queued
    first["properties"]["message_expiry_interval"] = 86400
    assert (first["topic"], first["payload"], first["properties"]) == (f"{topic}/dumped", "hi", expected)
    assert second["properties"] == {"user_properties": [["a", "b"]], "content_type": "c"}


def test_json_lines_take_null_as_absent(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    """`pub --json-lines`: a null member (topic, payload, encoding, qos, retain, properties, any property) is an
    absent one, as `sub --json` readers and other tools write them."""
    every_null = {name: None for name in ("payload_format_indicator", "message_expiry_interval", "content_type",
                                          "response_topic", "correlation_data", "user_properties")}  # fmt: skip
    lines = [
        {"topic": f"{topic}/a", "payload": "x", "properties": {**every_null, "content_type": "c"}, "retain": True},
        {"topic": f"{topic}/b", "payload": None, "encoding": None, "qos": None, "retain": True, "properties": None},
        {"topic": None, "payload": "z", "dup": None, "received": None, "retain": True, "properties": every_null},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/b", "-m", "old", "-r").returncode == 0
    pub = mqtt("pub", *at(mosquitto), "-V", "5", "-t", f"{topic}/c", "--json-lines", input=text.encode())
    assert (pub.returncode, pub.stderr) == (0, "")
    out = mqtt("sub", *at(mosquitto), "-V", "5", "-t", f"{topic}/#", "--retained-only", "--json")
    got = {o["topic"]: (o["payload"], o["properties"]) for o in map(json.loads, out.text.splitlines())}
    # b's null payload is an empty one: retained, it cleared the retained "old"
    assert got == {f"{topic}/a": ("x", {"content_type": "c"}), f"{topic}/c": ("z", {})}
