"""mosquitto's `-D COMMAND NAME VALUE` in pub, sub and rr: what mosquitto_sub sees of what `mqtt pub -D` sends,
the same on the fast path and typer's, each bad -D a one-line usage error (exit 2) with nothing sent."""

from __future__ import annotations

import json
import subprocess

import pytest

from mqtt_cli.commands._dprops import SEP, gather, parse_properties
from mqtt_cli.core.properties import Properties

from ..brokers import Broker
from .conftest import Mqtt
from .test_pub_sub import at


def test_arguments_of_each_d_are_gathered_but_not_a_value_that_looks_like_one() -> None:
    takes_value = {"-m", "-t"}.__contains__
    args = ["pub", "-D", "PUBLISH", "user-property", "k", "v", "-m", "-D", "-D", "connect", "session-expiry-interval",
            "60", "-t", "a"]  # fmt: skip
    assert gather(args, takes_value) == [
        "pub", "-D", SEP.join(["PUBLISH", "user-property", "k", "v"]), "-m", "-D",
        "-D", SEP.join(["connect", "session-expiry-interval", "60"]), "-t", "a",
    ]  # fmt: skip


def test_properties_per_command() -> None:
    values = (
        ("PUBLISH", "user-property", "k", "v"), ("publish", "content-type", "text/x"),
        ("CONNECT", "session-expiry-interval", "60"), ("Will", "will-delay-interval", "5"),
        ("SUBSCRIBE", "subscription-identifier", "7"), ("DISCONNECT", "reason-string", "bye"),
        ("PUBLISH", "correlation-data", "id-1"),
    )  # fmt: skip
    given = parse_properties([SEP.join(v) for v in values])
    assert given.publish == Properties(user_properties=[("k", "v")], content_type="text/x", correlation_data=b"id-1")
    assert given.connect == Properties(session_expiry_interval=60)
    assert given.will == Properties(will_delay_interval=5)
    assert given.subscribe == Properties(subscription_identifiers=[7])
    assert given.disconnect == Properties(reason_string="bye")
    assert not parse_properties(None)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-D", "PUBLISH", "user-property", "k"], "-D PUBLISH user-property k: too few arguments; use -D COMMAND"),
        (["-D", "PUBLISH", "content-type"], "-D PUBLISH content-type: too few arguments"),
        (["-D", "PUBLSH", "content-type", "x"], "-D PUBLSH content-type x: no command 'PUBLSH' to give properties"),
        (["-D", "PUBLISH", "content-typo", "x"], "no MQTT 5.0 property 'content-typo' (did you mean content-type?)"),
        (["-D", "CONNECT", "content-type", "x"], "-D CONNECT content-type x: CONNECT cannot carry content-type"),
        (["-D", "PUBLISH", "subscription-identifier", "1"], "PUBLISH cannot carry subscription-identifier"),
        (["-D", "CONNECT", "session-expiry-interval", "soon"], "'soon' is not a number"),
        (["-D", "CONNECT", "receive-maximum", "0"], "-D CONNECT receive-maximum 0: "),
        (["-D", "PUBLISH", "payload-format-indicator", "2"], "-D PUBLISH payload-format-indicator 2: "),
        (["-D", "AUTH", "authentication-method", "x"], "AUTH properties are not supported"),
        (["-D", "PUBACK", "reason-string", "x"], "no command 'PUBACK' to give properties to"),
        (["-D", "WILL", "will-delay-interval", "5"], "-D WILL: will properties need --will-topic"),
        (["-V", "311", "-D", "CONNECT", "session-expiry-interval", "5"], "-D: MQTT 5.0 properties need MQTT 5.0"),
    ],
)
@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_bad_d_is_one_line_exit_2_and_nothing_is_sent(
    mqtt: Mqtt, mosquitto: Broker, topic: str, args: list[str], said: str, fast: str
) -> None:
    bad = mqtt("pub", *at(mosquitto), "-t", f"{topic}/bad", "-m", "x", "-r", *args, env_extra={"MQTT_CLI_FAST": fast})
    assert bad.returncode == 2, bad.stderr
    [line] = bad.stderr.splitlines()
    assert line.startswith("mqtt: error: ") and said in line, line
    left = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "--retained-only")
    assert (left.returncode, left.text) == (0, "")


@pytest.mark.parametrize("fast", ["1", "0"])
def test_mosquitto_sub_sees_the_properties_of_pub_d(mqtt: Mqtt, mosquitto: Broker, topic: str, fast: str) -> None:
    """The fast path and typer's send the same: mosquitto_sub prints the user properties (%P), content type (%C)
    and response topic (%R) of the retained message."""
    pub = mqtt("pub", *at(mosquitto), "-t", f"{topic}/p", "-m", "x", "-r", "-D", "PUBLISH", "user-property", "k", "v",
               "-D", "publish", "user-property", "k2", "v 2", "-D", "PUBLISH", "content-type", "text/x",
               "-D", "PUBLISH", "response-topic", "r/t", "-D", "CONNECT", "session-expiry-interval", "60",
               "-D", "DISCONNECT", "reason-string", "bye", env_extra={"MQTT_CLI_FAST": fast})  # fmt: skip
    assert (pub.returncode, pub.stderr) == (0, "")
    seen = subprocess.run(
        ["mosquitto_sub", *at(mosquitto), "-V", "5", "-t", f"{topic}/p", "-C", "1", "-W", "10", "-F", "%P|%C|%R|%p"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout == "k:v k2:v 2|text/x|r/t|x\n"


def test_sub_and_rr_take_d(mqtt: Mqtt, mosquitto: Broker, topic: str) -> None:
    """sub: -D SUBSCRIBE subscription-identifier (the broker tags what the subscription delivers); rr: -D PUBLISH
    user-property on the request (a mosquitto_sub stands for the responder, -W ends rr's wait)."""
    assert mqtt("pub", *at(mosquitto), "-t", f"{topic}/s", "-m", "x", "-r", "-V", "5").returncode == 0
    out = mqtt("sub", *at(mosquitto), "-V", "5", "-t", f"{topic}/s", "--retained-only", "--json",
               "-D", "SUBSCRIBE", "subscription-identifier", "7")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.text)["properties"]["subscription_identifiers"] == [7]
    # mosquitto_sub stands for the responder: a session of its own keeps the request until it reads it.
    session = ["mosquitto_sub", *at(mosquitto), "-V", "5", "-c", "-x", "60", "-i", f"{topic}-rr", "-q", "1",
               "-t", f"{topic}/req"]  # fmt: skip
    assert subprocess.run([*session, "-E"], capture_output=True, timeout=30).returncode == 0
    rr = mqtt("rr", *at(mosquitto), "-t", f"{topic}/req", "-e", f"{topic}/resp", "-m", "ask", "-q", "1", "-W", "1",
              "-D", "PUBLISH", "user-property", "who", "rr")  # fmt: skip
    assert rr.returncode == 27, rr.stderr  # nobody answers
    seen = subprocess.run([*session, "-C", "1", "-W", "10", "-F", "%P|%p"], capture_output=True, text=True, timeout=30)
    printed = seen.stdout
    assert "who:rr|ask" in printed.splitlines(), printed
    for command in (["rr", "-t", "a", "-e", "b", "-m", "x"], ["sub", "-t", "a"]):
        kind = "PUBLISH" if command[0] == "rr" else "SUBSCRIBE"
        bad = mqtt(*command, *at(mosquitto), "-V", "311", "-D", kind, "user-property", "k", "v")
        assert bad.returncode == 2 and f"-D {kind}" in bad.stderr and "MQTT 5.0" in bad.stderr, bad.stderr
