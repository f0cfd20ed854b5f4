"""BrokerCore against the rules of MQTT 3.1.1 and 5.0, and mosquitto's choices where the rules allow several.

A test that checks a normative statement has its id in its name: `MQTT_3_1_2_8` is [MQTT-3.1.2-8] (several ids:
several in the name). tests/broker/test_conformance.py runs the same kind of sequences over sockets against
`mqtt serve` and Debian's mosquitto side by side.
"""

from __future__ import annotations

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect, Publish, SubAck, Subscribe, Subscription
from tests.core.test_broker import Client, client


@pytest.fixture
def broker() -> BrokerCore:
    return BrokerCore(BrokerConfig(sys_interval=0))


def _frame(first: int, body: bytes) -> bytes:
    from mqtt_cli.core.wire import encode_vbi

    return bytes((first,)) + encode_vbi(len(body)) + body


def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


# --- Reason Strings: none by default (mosquitto), on with reason_strings -------------------------------------


def test_no_reason_string_in_server_disconnect_by_default(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    assert c.send(Connect("c", protocol_version=5)) == [Disconnect(0x82)]
    assert c.closed


def test_reason_strings_option_says_why(tmp_path: object) -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, reason_strings=True))
    c = client(broker, "c", 5)
    (d,) = c.send(Connect("c", protocol_version=5))
    assert isinstance(d, Disconnect) and d.reason_code == 0x82 and d.properties.reason_string == "second CONNECT"


def test_malformed_v5_connect_closes_without_connack_by_default_MQTT_3_1_4_1(broker: BrokerCore) -> None:
    """A CONNECT breaking a rule: closed; the refusing CONNACK is a MAY (4.13), which mosquitto does not send."""
    c = Client(broker, 5)
    bad = _frame(0x10, _s("MQTT") + bytes((5, 0x03, 0, 60, 0)) + _s("c"))  # reserved flag set
    assert c.send_raw(bad) == []
    assert c.closed
    loud = BrokerCore(BrokerConfig(sys_interval=0, reason_strings=True))
    c = Client(loud, 5)
    (ack,) = c.send_raw(bad)
    assert isinstance(ack, ConnAck) and ack.reason_code == 0x81 and ack.properties.reason_string
    assert c.closed


# --- packets a server never receives, malformed fixed headers (#9) ------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"\x20\x02\x00\x00",  # CONNACK
        b"\x20\x01\x00",  # CONNACK cut short: still its type that counts
        b"\x90\x04\x00\x01\x00\x00",  # SUBACK
        b"\x90\x02\x00\x01",  # SUBACK without codes
        b"\xb0\x03\x00\x01\x00",  # UNSUBACK
        b"\xd0\x00",  # PINGRESP
        b"\xd0\x01\x00",  # PINGRESP with a body
        b"\xd1\x00",  # PINGRESP with flags
    ],
)
def test_server_only_packet_types_are_a_protocol_error_before_their_contents_MQTT_4_13_1(
    broker: BrokerCore, raw: bytes
) -> None:
    c = client(broker, "c", 5)
    assert c.send_raw(raw) == [Disconnect(0x82)]
    assert c.closed


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("ptype", range(16))
def test_every_packet_type_with_bad_fixed_header_flags_closes_MQTT_2_1_3_1(
    broker: BrokerCore, version: int, ptype: int
) -> None:
    c = client(broker, "c", version)
    # PUBLISH's flags are its own (QoS 3 is the bad one); every other type has fixed flags.
    first = 0x36 if ptype == 3 else (ptype << 4) | (0x0F ^ (0x02 if ptype in (6, 8, 10) else 0x00))
    got = c.send_raw(bytes((first, 2, 0, 1)))
    assert c.closed
    if version == 5:
        assert len(got) == 1 and isinstance(got[0], Disconnect) and got[0].reason_code in (0x81, 0x82)
    else:
        assert got == []


@pytest.mark.parametrize("raw", [b"\xc0\x01\x00", b"\xc0\x80\x80\x80\x80\x01", b"\x00\x00", b"\xe0\x80\x00"])
def test_bad_remaining_length_or_body_closes_MQTT_3_12_4_1(broker: BrokerCore, raw: bytes) -> None:
    c = client(broker, "c", 5)
    got = c.send_raw(raw)
    assert c.closed
    assert len(got) == 1 and got[0].reason_code == 0x81


@pytest.mark.parametrize(
    "code", [0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2]
)
def test_disconnect_with_a_server_only_reason_code_is_a_protocol_error_MQTT_3_14_2_1(
    broker: BrokerCore, code: int
) -> None:
    from mqtt_cli.core.packets import Will

    watcher = client(broker, "w", 5)
    watcher.subscribe("will")
    c = client(broker, "c", 5, will=Will("will", b"gone"))
    assert c.send(Disconnect(code)) == [Disconnect(0x82)]
    assert c.closed
    (will,) = watcher.received()
    assert will.topic == "will"  # not a normal disconnection: the will goes out


def test_client_reason_codes_in_disconnect_are_accepted(broker: BrokerCore) -> None:
    for code in (0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x8C, 0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99):
        c = client(broker, f"c{code}", 5)
        assert c.send(Disconnect(code)) == []
        assert c.closed


@pytest.mark.parametrize(
    "name",
    [b"", b"MQTTTT", b"mqtt", b"MQIsdpX", b"\x00\x04MQ"],
    ids=["empty", "too-long", "lower-case", "mqisdp-long", "cut-short"],
)
@pytest.mark.parametrize("level", [3, 4, 5])
def test_a_connect_with_a_wrong_protocol_name_is_closed_unanswered_MQTT_3_1_2_1(
    broker: BrokerCore, name: bytes, level: int
) -> None:
    c = Client(broker, level)
    body = (
        name if name.startswith(b"\x00\x04") else _s(name) + bytes((level, 2, 0, 60)) + (b"\x00" if level == 5 else b"")
    )
    if not name.startswith(b"\x00\x04"):
        body += _s("c")
    assert c.send_raw(_frame(0x10, body)) == []
    assert c.closed


@pytest.mark.parametrize("name, level", [("MQTT", 3), ("MQTT", 6), ("MQIsdp", 4), ("MQTT", 2)])
def test_a_connect_with_an_unknown_level_gets_connack_1_MQTT_3_1_2_2(broker: BrokerCore, name: str, level: int) -> None:
    c = Client(broker, 4)
    broker.receive(c.conn, _frame(0x10, _s(name) + bytes((level, 2, 0, 60)) + _s("c")), 0.0)
    assert c.closed
    # 3.x form (return code 1), or 5.0 form (0x84, empty properties) for a level above 4.
    assert bytes(c.conn.out) == (b"\x20\x03\x00\x84\x00" if level & 0x7F >= 5 else b"\x20\x02\x00\x01")


# --- control characters and topic levels (mosquitto's choices) -----------------------------------------------

_CONTROLS = ["\x01", "\x1f", "\x7f", "\x80", "\x9f"]


@pytest.mark.parametrize("ch", _CONTROLS)
@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("field", ["client_id", "username", "will_topic"])
def test_control_characters_in_connect_fields_are_malformed_MQTT_1_5_4_2(
    broker: BrokerCore, ch: str, version: int, field: str
) -> None:
    from mqtt_cli.core.packets import Will

    kw: dict[str, object] = {}
    client_id = "c"
    if field == "client_id":
        client_id = f"c{ch}"
    elif field == "username":
        kw["username"] = f"u{ch}"
    else:
        kw["will"] = Will(f"w{ch}", b"")
    c = Client(broker, version)
    assert c.send(Connect(client_id, protocol_version=version, **kw)) == []  # type: ignore[arg-type]
    assert c.closed
    assert not broker.sessions


@pytest.mark.parametrize("ch", _CONTROLS)
@pytest.mark.parametrize("version", [4, 5])
def test_control_characters_in_topics_and_filters_are_malformed_MQTT_1_5_4_2(
    broker: BrokerCore, ch: str, version: int
) -> None:
    from mqtt_cli.core.packets import Unsubscribe

    watcher = client(broker, "w", version)
    watcher.subscribe("#")
    expected = [Disconnect(0x81)] if version == 5 else []
    for packet in (
        Publish(f"a{ch}", b"x"),
        Publish(f"a{ch}", b"x", 1, packet_id=1),
        Subscribe(1, (Subscription(f"a{ch}"),)),
        Unsubscribe(1, (f"a/{ch}",)),
    ):
        c = client(broker, "c", version)
        assert c.send(packet) == expected, packet
        assert c.closed
    assert watcher.received() == []  # nothing was delivered


def test_text_without_control_characters_passes(broker: BrokerCore) -> None:
    c = client(broker, "c-\u00a0\u00e9\u4e2d", 5, username="u\u00a0")
    assert c.subscribe("t/\u00a0/+") == [SubAck(1, (0,))]
    (p,) = c.send(Publish("t/\u00a0/\u00ff", b"x"))
    assert p.topic == "t/\u00a0/\u00ff"


def _levels(n: int) -> str:
    return "/".join(["a"] * n)


@pytest.mark.parametrize("version", [4, 5])
def test_topics_over_the_level_limit_are_refused_as_mosquitto(broker: BrokerCore, version: int) -> None:
    from mqtt_cli.core.packets import Unsubscribe, Will

    c = client(broker, "ok", version)
    assert c.subscribe(_levels(201)) == [SubAck(1, (0,))]  # mosquitto counts 200 separators, not levels
    assert [p.topic for p in c.send(Publish(_levels(201), b"x"))] == [_levels(201)]
    for packet, code in (
        (Publish(_levels(202), b"x", 1, packet_id=1), 0x82),
        (Subscribe(1, (Subscription(_levels(202)),)), 0x81),
        (Unsubscribe(1, (_levels(202),)), 0x81),
    ):
        c = client(broker, "c", version)
        assert c.send(packet) == ([Disconnect(code)] if version == 5 else []), packet
        assert c.closed
    c = Client(broker, version)
    assert c.send(Connect("w", protocol_version=version, will=Will(_levels(202), b""))) == []
    assert c.closed


def test_the_level_limit_is_configurable() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, max_topic_levels=3))
    c = client(broker, "c", 5)
    assert c.subscribe("a/b/c/d") == [SubAck(1, (0,))]
    assert c.subscribe("a/b/c/d/e", pid=2) == [Disconnect(0x81)]
    unlimited = BrokerCore(BrokerConfig(sys_interval=0, max_topic_levels=0))
    c = client(unlimited, "c", 5)
    assert c.subscribe(_levels(5000)) == [SubAck(1, (0,))]


# --- MQTT 3.1 CONNECT forms (#12), as mosquitto answers them ------------------------------------------------

_V31_ACCEPTED = {
    "id-1": (0x02, "a", b""),
    "id-23": (0x02, "x" * 23, b""),
    "id-24": (0x00, "x" * 24, b""),  # 3.1 says 23 at most; mosquitto (and we) take longer ones
    "id-65535": (0x02, "x" * 65535, b""),
    "no-clean-session": (0x00, "a", b""),
    "reserved-flag": (0x03, "a", b""),
    "user-and-password": (0xC2, "a", _s("u") + _s("p")),
    "user-flag-without-user": (0x82, "a", b""),
    "password-flag-without-password": (0xC2, "a", _s("u")),
    "both-flags-without-fields": (0xC2, "a", b""),
    "will-qos2-retain": (0x36, "a", _s("w/t") + _s("bye")),
    "will-qos1-empty-payload": (0x0E, "a", _s("w/t") + _s("")),
}


@pytest.mark.parametrize("form", _V31_ACCEPTED)
def test_mqtt_3_1_connect_forms_are_answered(broker: BrokerCore, form: str) -> None:
    flags, client_id, rest = _V31_ACCEPTED[form]
    c = Client(broker, 3)
    got = c.send_raw(_frame(0x10, _s("MQIsdp") + bytes((3, flags, 0, 60)) + _s(client_id) + rest))
    assert got == [ConnAck(False, 0)]
    assert not c.closed


@pytest.mark.parametrize("flags", [0x00, 0x02])
def test_mqtt_3_1_empty_client_id_is_refused_with_2(broker: BrokerCore, flags: int) -> None:
    c = Client(broker, 3)
    assert c.send_raw(_frame(0x10, _s("MQIsdp") + bytes((3, flags, 0, 60)) + _s(""))) == [ConnAck(False, 2)]
    assert c.closed


@pytest.mark.parametrize(
    "flags, rest",
    [(0x42, _s("p")), (0x06, _s("w")), (0x1E, _s("w") + _s("p"))],
    ids=["password-without-user-flag", "will-without-payload", "will-qos3"],
)
def test_mqtt_3_1_broken_connects_are_closed(broker: BrokerCore, flags: int, rest: bytes) -> None:
    c = Client(broker, 3)
    assert c.send_raw(_frame(0x10, _s("MQIsdp") + bytes((3, flags, 0, 60)) + _s("a") + rest)) == []
    assert c.closed


def test_mqtt_3_1_1_keeps_its_stricter_rules_MQTT_3_1_2_3_MQTT_3_1_2_22(broker: BrokerCore) -> None:
    for flags, rest in ((0x03, b""), (0x82, b"")):
        c = Client(broker, 4)
        assert c.send_raw(_frame(0x10, _s("MQTT") + bytes((4, flags, 0, 60)) + _s("a") + rest)) == []
        assert c.closed
