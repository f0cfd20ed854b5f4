"""`mqtt rr` (request/response), profiles with `mqtt config`, and the basic round trip against RabbitMQ."""

import json
import time
from pathlib import Path

import pytest

from mqtt_cli.commands._json import message_from_json, message_to_json
from mqtt_cli.commands._output import FormatError, format_message
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties

from ..brokers import Broker
from .conftest import Mqtt, popen_mqtt, rr_answered_live


def at(broker: Broker) -> list[str]:
    return ["-h", broker.host, "-p", str(broker.port)]


def test_rr_with_a_responder(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    env = mqtt.env  # type: ignore[attr-defined]
    # The responder: `sub --json` of one request, turned into its response, given to `pub --json-lines`.
    assert (
        mqtt("sub", *at(mosquitto), "-t", f"{topic}/req", "-q", "1", "-c", "-i", f"{topic}-resp", "-E").returncode == 0
    )
    session = ["-q", "1", "-c", "-i", f"{topic}-resp"]
    responder = popen_mqtt(
        "sub", *at(mosquitto), "-t", f"{topic}/req", *session, "-C", "1", "--json", "-W", "20", env=env
    )
    rr = popen_mqtt(
        "rr", *at(mosquitto), "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "ping", "-W", "20", "-q", "1", env=env
    )
    request = json.loads(responder.communicate(timeout=30)[0])
    assert request["payload"] == "ping" and request["properties"]["response_topic"] == f"{topic}/resp"
    answer = {"topic": request["properties"]["response_topic"], "payload": "pong",
              "properties": {"correlation_data": request["properties"]["correlation_data"]}}  # fmt: skip
    wrong = {**answer, "payload": "not yours", "properties": {"correlation_data": "00"}}
    lines = (json.dumps(wrong) + "\n" + json.dumps(answer) + "\n").encode()
    assert mqtt("pub", *at(mosquitto), "--json-lines", "-q", "1", input=lines).returncode == 0
    out, err = rr.communicate(timeout=30)
    assert (rr.returncode, out) == (0, b"pong\n"), err


def test_rr_timeout_and_311_fallback(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    # A retained message on the response topic with other correlation data is not the answer.
    mqtt("pub", *at(mosquitto), "-t", f"{topic}/resp", "-m", "old", "-r", "--correlation-data", "x")
    result = mqtt("rr", *at(mosquitto), "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q", "-W", "0.5")
    assert result.returncode == 27 and "no response" in result.stderr
    # 3.1.1 has no correlation data: the first message on the response topic is the answer, but not a retained
    # one (it was there before the request).
    rr311 = ["rr", *at(mosquitto), "-V", "311", "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "q", "-v"]
    result = mqtt(*rr311, "-W", "1")
    assert (result.returncode, result.text) == (27, ""), result.stderr
    answer = rr_answered_live(mqtt, rr311, at(mosquitto), f"{topic}/resp", "live")
    assert answer == (0, f"{topic}/resp live\n".encode())


def test_config_profiles_and_precedence(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    assert mqtt("config", "list").returncode == 0
    assert mqtt("config", "set", "port", "1").returncode == 0  # the default profile: nothing listens there
    assert mqtt("config", "set", "port", str(mosquitto.port), "--profile", "local").returncode == 0
    assert mqtt("config", "set", "host", mosquitto.host, "--profile", "local").returncode == 0
    assert mqtt("config", "set", "username", "me", "--profile", "local").returncode == 0
    assert mqtt("config", "set", "password", "hunter2", "--profile", "local").returncode == 0
    assert mqtt("config", "set", "insecure", "maybe").returncode == 2
    assert mqtt("config", "set", "colour", "blue").returncode == 2
    listed = mqtt("config", "list").text.splitlines()
    assert listed[1:] == ["default", "local"]
    # one way to name a profile in every subcommand: --profile (or MQTT_PROFILE), as the clients do
    shown = mqtt("config", "show", "--profile", "local").text
    assert f"port = {mosquitto.port}" in shown and "password = '****'" in shown and "hunter2" not in shown
    assert mqtt("config", "show", env_extra={"MQTT_PROFILE": "local"}).text == shown
    missing = mqtt("config", "show", "--profile", "nope")
    assert missing.returncode == 2 and "no profile 'nope'" in missing.stderr
    path = Path(mqtt.env["XDG_CONFIG_HOME"]) / "mqtt-cli" / "config.toml"  # type: ignore[attr-defined]
    assert path.stat().st_mode & 0o077 == 0  # may hold passwords: the owner's only

    pub = ["pub", "-t", f"{topic}/p", "-m", "x", "-V", "311"]
    assert mqtt(*pub).returncode == 3  # profile "default": port 1
    assert mqtt(*pub, "--profile", "local").returncode == 0
    assert mqtt(*pub, env_extra={"MQTT_PROFILE": "local"}).returncode == 0
    assert mqtt(*pub, env_extra={"MQTT_PORT": str(mosquitto.port)}).returncode == 0  # environment > profile
    assert mqtt(*pub, "-p", str(mosquitto.port), env_extra={"MQTT_PORT": "1"}).returncode == 0  # flag > environment
    assert mqtt("config", "set", "port", "--unset").returncode == 0
    assert "port" not in mqtt("config", "show").text


@pytest.mark.slow
@pytest.mark.interop
def test_rabbitmq_round_trip_falls_back_to_311(mqtt: Mqtt, rabbitmq: Broker, topic: str) -> None:
    # RabbitMQ's MQTT plugin closes the connection on a 5.0 CONNECT: auto falls back to 3.1.1.
    assert mqtt("sub", *at(rabbitmq), "-t", f"{topic}/#", "-q", "1", "-c", "-i", f"{topic}-s", "-E").returncode == 0
    for qos in ("0", "1"):
        result = mqtt("pub", *at(rabbitmq), "-t", f"{topic}/q{qos}", "-q", qos, "-m", f"m{qos}")
        assert result.returncode == 0, result.stderr
    out = mqtt(
        "sub", *at(rabbitmq), "-t", f"{topic}/#", "-q", "1", "-c", "-i", f"{topic}-s", "-C", "2", "-v", "-W", "20"
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.text.splitlines()) == [f"{topic}/q0 m0", f"{topic}/q1 m1"]
    lines = "".join(f"{i}\n" for i in range(1000)).encode()
    assert mqtt("pub", *at(rabbitmq), "-t", f"{topic}/l", "-l", "-q", "1", input=lines).returncode == 0
    out = mqtt("sub", *at(rabbitmq), "-t", f"{topic}/#", "-q", "1", "-c", "-i", f"{topic}-s", "-C", "1000", "-W", "20")
    assert sorted(map(int, out.text.split())) == list(range(1000))
    five = mqtt("pub", *at(rabbitmq), "-V", "5", "-t", "x", "-m", "x")
    assert five.returncode == 5 and "closed the connection in answer to CONNECT" in five.stderr


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("port", "116465", "port 116465 is out of range: use 1..65535"),
        ("port", "0", "port 0 is out of range: use 1..65535"),
        ("keepalive", "70000", "keepalive 70000 is out of range: use 0..65535"),
        ("keepalive", "-5", "keepalive -5 is out of range"),  # a negative number is a value, not an option
        ("connect_timeout", "nan", "connect_timeout nan is out of range"),
        ("connect_timeout", "0", "connect_timeout 0.0 is out of range: use 0.1.."),
        ("session_expiry", "-1", "session_expiry -1 is out of range: use 0..4294967295"),
        ("qos", "5", "qos 5 is out of range: use 0..2"),
        ("protocol_version", "4", "protocol_version '4' is not valid"),
        ("tls_version", "tlsv1.0", "tls_version 'tlsv1.0' is not valid"),
    ],
)
def test_config_set_checks_ranges(mqtt: Mqtt, key: str, value: str, message: str) -> None:
    result = mqtt("config", "set", key, value, "--profile", "p")
    assert result.returncode == 2, result.stderr
    assert f"profile 'p': {message}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "[profiles.p]" not in mqtt("config", "list").text  # nothing written


def test_config_set_takes_values_that_look_like_options(mqtt: Mqtt) -> None:
    assert mqtt("config", "set", "password", "-secret", "--profile", "p").returncode == 0
    assert "password = '-secret'" in mqtt("config", "show", "--profile", "p", "--reveal").text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("port = 116465", "port 116465 is out of range"),
        ("keepalive = 70000", "keepalive 70000 is out of range"),
        ("connect_timeout = nan", "connect_timeout nan is out of range"),
        ("qos = 5", "qos 5 is out of range"),
        ('protocol_version = "4"', "protocol_version '4' is not valid"),
    ],
)
def test_hand_edited_profile_values_are_checked(mqtt: Mqtt, line: str, message: str) -> None:
    config = Path(mqtt.env["XDG_CONFIG_HOME"]) / "mqtt-cli"  # type: ignore[attr-defined]
    config.mkdir(parents=True)
    (config / "config.toml").write_text(f"[profiles.p]\n{line}\n")
    for command in (["pub", "-t", "a", "-m", "x"], ["sub", "-t", "a"], ["rr", "-t", "a", "-e", "b", "-m", "x"]):
        result = mqtt(*command, "--profile", "p")
        assert result.returncode == 2, (command, result.returncode, result.stderr)
        assert f"profile 'p': {message}" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["config", "set", "hots", "x"], "unknown key 'hots'; did you mean 'host'? known: host, port"),
        (["config", "set", "--unset", "prot", "--profile", "prod"],
         "profile 'prod' has no key 'prot'; did you mean 'port'? it has host, port"),
        (["config", "show", "--profile", "prodd"], "no profile 'prodd' in {config}; did you mean 'prod'?"),
        (["pub", "-t", "a", "-m", "x", "--profile", "prodd"], "no profile 'prodd' in {config}; did you mean 'prod'?"),
        (["sub", "-t", "a", "--profile", "typo"], "profile 'typo': unknown key 'hots'; did you mean 'host'?"),
        (["serve", "--listen", "mqtt://127.0.0.1:0?version=5"], "unknown setting 'version'; did you mean 'versions'?"),
        (["bridge", "--config", "{bridge}"], "bridge 1: unknown key 'topic'; did you mean 'topics'?"),
        (["bridge", "--config", "{bridge_side}"], "[bridge.remote]: unknown key 'pasword'; did you mean 'password'?"),
    ],
)  # fmt: skip
def test_every_key_name_a_command_takes_has_a_did_you_mean(mqtt: Mqtt, args: list[str], message: str) -> None:
    home = Path(mqtt.env["XDG_CONFIG_HOME"])  # type: ignore[attr-defined]
    config = home / "mqtt-cli" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[profiles.prod]\nhost = "h"\nport = 1\n[profiles.typo]\nhots = "h"\n')
    side = '[bridge.local]\nurl = "mqtt://127.0.0.1:1"\n[bridge.remote]\nurl = "mqtt://127.0.0.1:2"\n'
    (home / "b.toml").write_text('[[bridge]]\ntopic = ["a"]\n' + side)
    (home / "s.toml").write_text('[[bridge]]\ntopics = ["a"]\n' + side + 'pasword = "x"\n')
    names = {"{config}": str(config), "{bridge}": str(home / "b.toml"), "{bridge_side}": str(home / "s.toml")}
    args = [names.get(a, a) for a in args]
    result = mqtt(*args)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert message.replace("{config}", str(config)) in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_format_message_fields() -> None:
    p = Publish("a/b", b"hi\x00", 1, True, False, 7, Properties(content_type="c", user_properties=[("k", "v")]))
    assert format_message("%t %p %q %r %m %i %l %x %X", p, 0.0) == b"a/b hi\x00 1 1 7 7 3 686900 686900"
    assert format_message("%C|%P|%E|%F|%R|%S|%A|%D", p, 0.0) == b"c|k:v||||||"
    assert format_message(r"%-6t|%6.2t|\n\t\\", p, 0.0) == b"a/b   |    a/|\n\t\\"
    assert format_message("@Y", p, 0.0) == time.strftime("%Y", time.localtime(0.0)).encode()
    assert format_message("%U", p, 1.5) == b"1.500000000"
    for bad in ("%z", "%", "\\q", "@"):
        with pytest.raises(FormatError):
            format_message(bad, p, 0.0)


def test_json_is_lossless_both_ways() -> None:
    props = Properties(
        correlation_data=b"\x00\xff", user_properties=[("a", "1"), ("a", "2")], message_expiry_interval=5
    )
    for payload in (b"text", b"\xff\xfe binary", b"", "é".encode()):
        p = Publish("t/x", payload, 2, True, False, 1, props)
        back = message_from_json(message_to_json(p, 0.0))
        assert (back["topic"], back["payload"], back["qos"], back["retain"], back["properties"]) == (
            "t/x", payload, 2, True, props
        )  # fmt: skip
