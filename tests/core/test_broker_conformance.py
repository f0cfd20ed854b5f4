"""BrokerCore against the rules of MQTT 3.1.1 and 5.0, and mosquitto's choices where the rules allow several.

A test that checks a normative statement has its id in its name: `MQTT_3_1_2_8` is [MQTT-3.1.2-8] (several ids:
several in the name). tests/broker/test_conformance.py runs the same kind of sequences over sockets against
`mqtt serve` and Debian's mosquitto side by side.
"""

from __future__ import annotations

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect, Publish, SubAck, Subscribe, Subscription
from mqtt_cli.core.properties import Properties
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
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(reason_strings=True)))
    c = client(broker, "c", 5)
    (d,) = c.send(Connect("c", protocol_version=5))
    assert isinstance(d, Disconnect) and d.reason_code == 0x82 and d.properties.reason_string == "second CONNECT"


def test_malformed_v5_connect_closes_without_connack_by_default_MQTT_3_1_4_1(broker: BrokerCore) -> None:
    """A CONNECT breaking a rule: closed; the refusing CONNACK is a MAY (4.13), which mosquitto does not send."""
    c = Client(broker, 5)
    bad = _frame(0x10, _s("MQTT") + bytes((5, 0x03, 0, 60, 0)) + _s("c"))  # reserved flag set
    assert c.send_raw(bad) == []
    assert c.closed
    loud = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(reason_strings=True)))
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
def test_server_only_packet_types_are_a_protocol_error_before_their_contents_MQTT_4_13_1_1(
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
def test_bad_remaining_length_or_body_closes_MQTT_4_13_1_1(broker: BrokerCore, raw: bytes) -> None:
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
def test_control_characters_in_connect_fields_are_malformed(
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
def test_control_characters_in_topics_and_filters_are_malformed(broker: BrokerCore, ch: str, version: int) -> None:
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
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_topic_levels=3)))
    c = client(broker, "c", 5)
    assert c.subscribe("a/b/c/d") == [SubAck(1, (0,))]
    assert c.subscribe("a/b/c/d/e", pid=2) == [Disconnect(0x81)]
    unlimited = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_topic_levels=0)))
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


def test_mqtt_3_1_1_keeps_its_stricter_rules_MQTT_3_1_2_3_MQTT_3_1_2_19(broker: BrokerCore) -> None:
    for flags, rest in ((0x03, b""), (0x82, b"")):
        c = Client(broker, 4)
        assert c.send_raw(_frame(0x10, _s("MQTT") + bytes((4, flags, 0, 60)) + _s("a") + rest)) == []
        assert c.closed


# --- Receive Maximum (#10) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_inflight, announced", [(20, 20), (1, 1), (65534, 65534), (0, None), (65535, None)])
def test_max_inflight_is_announced_as_receive_maximum(max_inflight: int, announced: int | None) -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=max_inflight)))
    ack = Client(broker, 5).connect("c")
    assert ack.properties.receive_maximum == announced


def test_default_receive_maximum_is_mosquittos_20(broker: BrokerCore) -> None:
    assert Client(broker, 5).connect("c").properties.receive_maximum == 20


def test_exceeding_receive_maximum_is_disconnected_with_0x93_MQTT_3_3_4_7(broker: BrokerCore) -> None:
    from mqtt_cli.core.packets import PubRec, PubRel

    c = client(broker, "c", 5)
    for pid in range(1, 21):
        assert c.send(Publish("t", b"", 2, packet_id=pid)) == [PubRec(pid)]
    assert c.send(PubRel(1)) != []  # one released: room for one more
    assert c.send(Publish("t", b"", 2, packet_id=21)) == [PubRec(21)]
    assert c.send(Publish("t", b"", 2, packet_id=22)) == [Disconnect(0x93)]
    assert c.closed


def test_no_receive_maximum_means_65535_unreleased(broker: BrokerCore) -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=0)))
    c = client(broker, "c", 5)
    data = b"".join(_frame(0x34, _s("t") + pid.to_bytes(2, "big") + b"\x00") for pid in range(1, 65536))
    got = c.send_raw(data)
    assert len(got) == 65535 and not c.closed


# --- QoS 2 PUBREC: 0x00, before onward delivery (mosquitto) ----------------------------------------------------


def test_qos2_pubrec_is_0_without_subscribers_and_puback_still_0x10(broker: BrokerCore) -> None:
    from mqtt_cli.core.packets import PubAck, PubRec

    c = client(broker, "c", 5)
    assert c.send(Publish("nobody", b"", 2, packet_id=1)) == [PubRec(1)]
    assert c.send(Publish("nobody", b"", 1, packet_id=2)) == [PubAck(2, 0x10)]


@pytest.mark.parametrize("version", [4, 5])
def test_qos2_pubrec_goes_before_the_publishers_own_copy(broker: BrokerCore, version: int) -> None:
    from mqtt_cli.core.packets import PubRec

    c = client(broker, "c", version)
    c.subscribe(Subscription("t", 2))
    got = c.send(Publish("t", b"x", 2, packet_id=7))
    assert got[0] == PubRec(7)
    assert isinstance(got[1], Publish) and got[1].payload == b"x"


def test_connack_properties_come_in_mosquittos_order() -> None:
    broker = BrokerCore(
        BrokerConfig(sys_interval=0, limits=Limits(max_keepalive=30, retain_available=False, max_packet_size=1000))
    )
    c = Client(broker, 5)
    broker.receive(c.conn, _frame(0x10, _s("MQTT") + bytes((5, 2, 0, 60, 0)) + _s("")), 0.0)
    ids = [pid for pid, _ in c.reader.feed(bytes(c.conn.out))[0].properties.items]
    # What mosquitto 2.0.11 sends with max_keepalive 30, retain_available false and max_packet_size 1000.
    assert ids == [0x22, 0x13, 0x12, 0x25, 0x27, 0x21]


# --- wills on take-over (#3) and will delay (#4) -------------------------------------------------------------


def _will_client(broker: BrokerCore, version: int, expiry: int, clean: bool, delay: int | None = None) -> Client:
    from mqtt_cli.core.packets import Will

    will_props = Properties(will_delay_interval=delay) if delay is not None else Properties()
    will = Will("will/t", b"gone", properties=will_props if version == 5 else Properties())
    props = Properties(session_expiry_interval=expiry) if version == 5 else Properties()
    c = Client(broker, version)
    ack = c.connect("c", clean_start=clean, will=will, properties=props)
    assert ack.reason_code == 0
    return c


@pytest.mark.parametrize("old_keeps", [True, False])
@pytest.mark.parametrize("new_clean", [True, False])
@pytest.mark.parametrize("version", [4, 5])
def test_take_over_publishes_the_old_will_only_when_the_session_ends_MQTT_3_1_4_3(
    broker: BrokerCore, version: int, old_keeps: bool, new_clean: bool
) -> None:
    watcher = client(broker, "w", version)
    watcher.subscribe("will/#")
    _will_client(broker, version, 100 if old_keeps else 0, clean=not old_keeps)
    props = Properties(session_expiry_interval=100) if version == 5 else Properties()
    Client(broker, version).connect("c", clean_start=new_clean, properties=props)
    got = [p.topic for p in watcher.received()]
    ends = new_clean or not old_keeps
    assert got == (["will/t"] if ends else [])


@pytest.mark.parametrize("new_clean", [True, False])
def test_a_reconnect_within_the_will_delay_cancels_the_will_MQTT_3_1_3_9_MQTT_3_1_2_8(
    broker: BrokerCore, new_clean: bool
) -> None:
    watcher = client(broker, "w", 5)
    watcher.subscribe("will/#")
    c = _will_client(broker, 5, expiry=100, clean=False, delay=3)
    c.lose(now=10.0)
    broker.tick(11.0)
    Client(broker, 5).connect("c", now=12.0, clean_start=new_clean, properties=Properties(session_expiry_interval=100))
    broker.tick(20.0)
    assert watcher.received() == []


def test_a_delayed_will_goes_when_its_delay_has_passed_MQTT_3_1_2_8(broker: BrokerCore) -> None:
    watcher = client(broker, "w", 5)
    watcher.subscribe("will/#")
    c = _will_client(broker, 5, expiry=100, clean=True, delay=3)
    c.lose(now=10.0)
    assert broker.tick(10.0) == 13.0
    broker.tick(12.9)
    assert watcher.received() == []
    broker.tick(13.0)
    assert [p.topic for p in watcher.received()] == ["will/t"]


@pytest.mark.parametrize("expiry, at", [(0, 10.0), (2, 12.0)])
def test_a_delayed_will_goes_when_the_session_ends_first(broker: BrokerCore, expiry: int, at: float) -> None:
    watcher = client(broker, "w", 5)
    watcher.subscribe("will/#")
    c = _will_client(broker, 5, expiry=expiry, clean=True, delay=30)
    c.lose(now=10.0)
    broker.tick(at - 0.1)
    if at > 10.0:
        assert watcher.received() == []
    broker.tick(at)
    assert [p.topic for p in watcher.received()] == ["will/t"]


# --- #5: a client's Maximum Packet Size ----------------------------------------------------------------------


@pytest.mark.parametrize("online", [True, False])
def test_messages_too_large_for_a_client_are_skipped_as_delivered_MQTT_3_1_2_25(
    broker: BrokerCore, online: bool
) -> None:
    from mqtt_cli.core.packets import PubAck, PubComp, PubRec, PubRel

    props = Properties(maximum_packet_size=40, receive_maximum=2, session_expiry_interval=100)
    sub = client(broker, "s", 5, clean_start=False, properties=props)
    sub.subscribe(Subscription("t", 2))
    if not online:
        sub.lose()
    pub = client(broker, "p", 5)
    payloads = [b"." * 50] * 6 + [b"a", b"b", b"c", b"d"]
    for pid, payload in enumerate(payloads, 1):
        pub.send(Publish("t", payload, 1 + pid % 2, packet_id=pid))
        pub.send(PubRel(pid))
    if not online:
        sub = Client(broker, 5)
        assert sub.connect("s", clean_start=False, properties=props).session_present
        pending = sub.after_connack
    else:
        pending = sub.received()
    got = []
    while pending:
        p = pending.pop(0)
        if isinstance(p, PubRel):
            pending += sub.send(PubComp(p.packet_id))
            continue
        got.append(p.payload)
        pending += sub.send(PubAck(p.packet_id) if p.qos == 1 else PubRec(p.packet_id))
    assert got == [b"a", b"b", b"c", b"d"]
    assert len(broker.sessions["s"].outgoing) == 0 and not broker.sessions["s"].queue


# --- #6: message expiry --------------------------------------------------------------------------------------


def test_queued_and_retained_messages_expire_and_carry_what_is_left_MQTT_3_3_2_5_MQTT_3_3_2_6(
    broker: BrokerCore,
) -> None:
    keep = Properties(session_expiry_interval=100)
    sub = client(broker, "s", 5, properties=keep)
    sub.subscribe(Subscription("ex/#", 2))
    sub.lose(now=0.0)
    pub = client(broker, "p", 5)
    for pid, (qos, expiry) in enumerate([(1, 2), (2, 2), (1, 30), (2, 30), (0, 2)], 1):
        props = Properties(message_expiry_interval=expiry)
        pub.send(Publish(f"ex/{qos}/{expiry}", b"", qos, packet_id=pid if qos else None, properties=props), 0.0)
    pub.send(Publish("ex/retained", b"r", 1, True, packet_id=9, properties=Properties(message_expiry_interval=20)))
    again = Client(broker, 5)
    again.connect("s", now=10.5, clean_start=False, properties=keep)
    got = [(p.topic, p.properties.message_expiry_interval) for p in again.after_connack]
    assert got == [("ex/1/30", 20), ("ex/2/30", 20), ("ex/retained", 10)]  # 19.5 s left: rounded up
    fresh = Client(broker, 5)
    fresh.connect("fresh", now=19.0)
    (_, retained) = fresh.send(Subscribe(1, (Subscription("ex/#", 1),)), 19.0)
    assert retained.topic == "ex/retained" and retained.properties.message_expiry_interval == 1
    fresh = Client(broker, 5)
    fresh.connect("fresh2", now=20.0)
    assert fresh.send(Subscribe(1, (Subscription("ex/#", 1),)), 25.0) == [SubAck(1, (1,))]


# --- #7: property values out of range ------------------------------------------------------------------------

# (property block, what) for each ranged property a client can send, with an out-of-range value.
_BAD_CONNECT_PROPERTIES = {
    "request_problem_information=2": b"\x17\x02",
    "request_problem_information=0xED": b"\x17\xed",
    "request_response_information=2": b"\x19\x02",
    "receive_maximum=0": b"\x21\x00\x00",
    "maximum_packet_size=0": b"\x27\x00\x00\x00\x00",
    "server-only maximum_qos": b"\x24\x01",
}
_BAD_PUBLISH_PROPERTIES = {
    "payload_format_indicator=2": b"\x01\x02",
    "payload_format_indicator=0xED": b"\x01\xed",
    "payload_format_indicator=0xFF": b"\x01\xff",
    "topic_alias=0": b"\x23\x00\x00",
    "subscription_identifier=0": b"\x0b\x00",
}


def _props_block(raw: bytes) -> bytes:
    return bytes((len(raw),)) + raw


@pytest.mark.parametrize("raw", _BAD_CONNECT_PROPERTIES.values(), ids=_BAD_CONNECT_PROPERTIES)
def test_connect_properties_out_of_range_close_MQTT_3_1_4_1(broker: BrokerCore, raw: bytes) -> None:
    c = Client(broker, 5)
    assert c.send_raw(_frame(0x10, _s("MQTT") + bytes((5, 2, 0, 60)) + _props_block(raw) + _s("c"))) == []
    assert c.closed and not broker.sessions


@pytest.mark.parametrize("raw", [b"\x01\x02", b"\x01\xed"], ids=["2", "0xED"])
def test_will_payload_format_indicator_out_of_range_closes(broker: BrokerCore, raw: bytes) -> None:
    c = Client(broker, 5)
    body = _s("MQTT") + bytes((5, 0x06, 0, 60, 0)) + _s("c") + _props_block(raw) + _s("w") + _s("x")
    assert c.send_raw(_frame(0x10, body)) == []
    assert c.closed and not broker.sessions


@pytest.mark.parametrize("raw", _BAD_PUBLISH_PROPERTIES.values(), ids=_BAD_PUBLISH_PROPERTIES)
@pytest.mark.parametrize("qos", [0, 1])
def test_publish_properties_out_of_range_are_a_protocol_error(broker: BrokerCore, raw: bytes, qos: int) -> None:
    c = client(broker, "c", 5)
    pid = b"\x00\x01" if qos else b""
    assert c.send_raw(_frame(0x30 | qos << 1, _s("t") + pid + _props_block(raw) + b"x")) == [Disconnect(0x82)]
    assert c.closed


def test_subscription_identifier_0_in_subscribe_is_a_protocol_error(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    assert c.send_raw(_frame(0x82, b"\x00\x01" + _props_block(b"\x0b\x00") + _s("t") + b"\x00")) == [Disconnect(0x82)]


def test_every_single_byte_property_has_a_range() -> None:
    from mqtt_cli.core.properties import PROPERTY_TABLE, WireType

    for spec in PROPERTY_TABLE.values():
        if spec.wire_type is WireType.BYTE:
            assert spec.value_range == (0, 1), spec.name


# --- #8: thousands of user properties cost linear time -------------------------------------------------------


def _connect_with_user_properties(n: int) -> bytes:
    from mqtt_cli.core.wire import encode_vbi

    props = b"".join(b"\x26" + _s(f"k{i}") + _s("v") for i in range(n))
    return _frame(0x10, _s("MQTT") + bytes((5, 0x06, 0, 60)) + encode_vbi(len(props)) + props + _s("c") + b"\x00"
                  + _s("w") + _s(""))  # fmt: skip


def test_user_properties_cost_linear_time() -> None:
    """Ten times the user properties may cost about ten times as long, never a hundred (quadratic). The ratio is
    generous (machines are noisy); the quadratic case this guards against came out above 100."""
    import gc
    import timeit

    def accept(data: bytes) -> None:
        broker = BrokerCore(BrokerConfig(sys_interval=0))
        c = broker.open("x", 0.0)
        broker.receive(c, data, 0.0)
        assert bytes(c.out[:4]) == b"\x20\x09\x00\x00"  # accepted
        broker.connection_lost(c, 0.0)

    small, large = _connect_with_user_properties(5_000), _connect_with_user_properties(50_000)
    gc.disable()
    try:
        t_small = min(timeit.repeat(lambda: accept(small), number=1, repeat=3))
        t_large = min(timeit.repeat(lambda: accept(large), number=1, repeat=3))
    finally:
        gc.enable()
    assert t_large / t_small < 40, (t_small, t_large)


def test_user_properties_keep_their_order_and_named_lookups_still_work() -> None:
    from mqtt_cli.core.properties import Properties as P

    many = P([(0x26, (f"k{i}", "v")) for i in range(100)] + [(0x11, 7)] + [(0x26, ("k0", "again"))])
    assert many.session_expiry_interval == 7 and many.get(0x11) == 7 and many.receive_maximum is None
    assert many.user_properties[0] == ("k0", "v") and many.user_properties[-1] == ("k0", "again")
    assert many.get(0x26) == ("k0", "v")  # the first value, as for a short list


# --- #11: topic aliases towards clients that allow them ------------------------------------------------------


def _topics_and_aliases(packets: list[object]) -> list[tuple[str, int | None]]:
    return [(p.topic, p.properties.topic_alias) for p in packets if isinstance(p, Publish)]


def test_broker_assigns_topic_aliases_to_a_client_that_allows_them_MQTT_3_3_2_11(broker: BrokerCore) -> None:
    from mqtt_cli.core.packets import PubAck

    sub = client(broker, "s", 5, properties=Properties(topic_alias_maximum=2))
    aliases = broker.sessions["s"].connection.aliases_out
    assert (aliases.maximum, aliases.free()) == (2, 1)
    sub.subscribe(Subscription("a/#", 1))
    plain = client(broker, "plain", 5)  # asks for no aliases: gets none
    assert broker.sessions["plain"].connection.aliases_out is None
    plain.subscribe(Subscription("a/#", 1))
    pub = client(broker, "p", 5)
    for i, topic in enumerate(["a/1", "a/1", "a/2", "a/3", "a/2", "a/1", "a/3"], 1):
        props = Properties(user_properties=[("n", str(i))])
        pub.send(Publish(topic, b"%d" % i, i % 2, packet_id=i if i % 2 else None, properties=props))
    got = sub.received()
    assert _topics_and_aliases(got) == [
        ("a/1", 1),
        ("", 1),
        ("a/2", 2),
        ("a/3", None),  # both aliases taken: in full
        ("", 2),
        ("", 1),
        ("a/3", None),
    ]
    assert [p.properties.user_properties for p in got] == [(("n", str(i)),) for i in range(1, 8)]
    assert [p.payload for p in got] == [b"%d" % i for i in range(1, 8)]
    assert _topics_and_aliases(plain.received()) == [
        (t, None) for t in ["a/1", "a/1", "a/2", "a/3", "a/2", "a/1", "a/3"]
    ]
    for p in got:
        if p.qos:
            sub.send(PubAck(p.packet_id))


def test_topic_aliases_start_afresh_on_each_connection_and_resends_carry_the_topic_MQTT_3_3_2_7(
    broker: BrokerCore,
) -> None:
    allow = Properties(topic_alias_maximum=5, session_expiry_interval=100)
    sub = client(broker, "s", 5, clean_start=False, properties=allow)
    sub.subscribe(Subscription("t", 1))
    pub = client(broker, "p", 5)
    pub.send(Publish("t", b"1", 1, packet_id=1))
    pub.send(Publish("t", b"2", 1, packet_id=2))
    assert _topics_and_aliases(sub.received()) == [("t", 1), ("", 1)]
    sub.lose()
    again = Client(broker, 5)
    again.connect("s", clean_start=False, properties=allow)
    resent = again.after_connack
    assert _topics_and_aliases(resent) == [("t", None), ("t", None)] and all(p.dup for p in resent)
    pub.send(Publish("t", b"3", 1, packet_id=3))
    assert _topics_and_aliases(again.received()) == [("t", 1)]  # a new connection: the alias is set again


def test_a_message_too_large_does_not_set_an_alias(broker: BrokerCore) -> None:
    sub = client(broker, "s", 5, properties=Properties(topic_alias_maximum=5, maximum_packet_size=30))
    sub.subscribe(Subscription("t/#", 0))
    pub = client(broker, "p", 5)
    pub.send(Publish("t/x", b"." * 40))
    pub.send(Publish("t/x", b"small"))
    assert _topics_and_aliases(sub.received()) == [("t/x", 1)]


# --- where we follow the spec and mosquitto does not --------------------------------------------------------


def test_maximum_qos_3_in_subscribe_is_a_protocol_error_in_5_0(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    assert c.send_raw(_frame(0x82, b"\x00\x01\x00" + _s("t") + b"\x03")) == [Disconnect(0x82)]  # mosquitto: 0x81
    c = client(broker, "c4", 4)
    assert c.send_raw(_frame(0x82, b"\x00\x01" + _s("t") + b"\x03")) == []
    assert c.closed


def test_a_wildcard_in_a_publish_topic_is_0x90_MQTT_3_3_2_2(broker: BrokerCore) -> None:
    c = client(broker, "c", 5)
    assert c.send_raw(_frame(0x30, _s("a/#") + b"\x00x")) == [Disconnect(0x90)]  # mosquitto: 0x82


def test_an_unknown_pubrel_gets_pubcomp_0x92_in_5_0(broker: BrokerCore) -> None:
    from mqtt_cli.core.packets import PubComp, PubRel

    assert client(broker, "c", 5).send(PubRel(9)) == [PubComp(9, 0x92)]  # mosquitto: 0x00
    assert client(broker, "c4", 4).send(PubRel(9)) == [PubComp(9)]


def test_an_empty_will_topic_is_refused_and_closed_MQTT_4_7_3_1(broker: BrokerCore) -> None:
    for version in (3, 4, 5):
        for delay in (b"", b"\x05\x18\x00\x00\x00\x05"):
            if delay and version != 5:
                continue
            c = Client(broker, version)
            name, props = (b"MQIsdp", b"") if version == 3 else (b"MQTT", b"\x00" if version == 5 else b"")
            will_props = (bytes((len(delay),)) + delay) if version == 5 else b""
            body = _s(name) + bytes((version, 0x06, 0, 60)) + props + _s("c") + will_props + _s("") + _s("x")
            assert c.send_raw(_frame(0x10, body)) == []
            assert c.closed and not broker.sessions


@pytest.mark.parametrize("flt", ["a#", "+a", "a/#/b", "", "$share/g", "$share/g/", "$share/g+/a"])
@pytest.mark.parametrize("version", [4, 5])
def test_an_invalid_topic_filter_is_malformed_MQTT_4_7_1_1_MQTT_4_8_2_2(
    broker: BrokerCore, flt: str, version: int
) -> None:
    pp = b"\x00" if version == 5 else b""
    expected = [Disconnect(0x81)] if version == 5 else []
    for packet in (
        _frame(0x82, b"\x00\x01" + pp + _s("ok") + b"\x00" + _s(flt) + b"\x00"),
        _frame(0xA2, b"\x00\x01" + pp + _s(flt)),
    ):
        c = client(broker, "c", version)
        assert c.send_raw(packet) == expected
        assert c.closed
    assert not broker.router.subscriptions.match("ok")  # nothing of the refused SUBSCRIBE was applied


def test_a_connack_over_the_clients_maximum_packet_size_closes_MQTT_3_1_2_24(broker: BrokerCore) -> None:
    c = Client(broker, 5)
    assert c.send(Connect("c", protocol_version=5, properties=Properties(maximum_packet_size=5))) == []
    assert c.closed and not broker.sessions and broker.connected == 0


# --- a PUBREC again after PUBREL: PUBREL again (mosquitto), not a protocol error ------------------------------


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_pubrec_for_a_released_message_gets_pubrel_again(version: int, persistent: bool) -> None:
    """A subscriber that reconnects owing a PUBREC sends it right after CONNACK, while the broker re-sends the
    PUBLISH (DUP); it answers that re-send with PUBREC again, which finds the flow awaiting PUBCOMP."""
    from mqtt_cli.core.packets import PubComp, PubRec, PubRel

    broker = BrokerCore(BrokerConfig(sys_interval=0))
    if persistent:
        broker.storage.enable_persistence()
    sub = Client(broker, version)
    sub.connect("s", clean_start=False)
    sub.subscribe(Subscription("t", 2))
    pub = client(broker, "p", version)
    pub.send(Publish("t", b"x", 2, packet_id=1))
    if persistent:
        broker.output(0.0)
        broker.commit_done(0.0, 0.0)
        broker.output(0.0)
    (delivered,) = [p for p in sub.received() if isinstance(p, Publish)]
    pid = delivered.packet_id
    assert pid is not None
    def answer(packet: PubRec) -> list[object]:
        got = sub.send(packet)
        if persistent:  # the PUBREL waits for the commit saying so
            broker.output(0.0)
            broker.commit_done(0.0, 0.0)
            broker.output(0.0)
            got += sub.received()
        return got

    assert answer(PubRec(pid)) == [PubRel(pid)]
    assert answer(PubRec(pid)) == [PubRel(pid)]
    assert not sub.closed
    assert sub.send(PubComp(pid)) == [] and not sub.closed
    assert pid not in broker.sessions["s"].outgoing
