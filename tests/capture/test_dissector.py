"""Whole captures, written here, through the Dissector: link layers, reassembly, gaps, detection, TLS, and
every kind of malformed MQTT."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mqtt_cli.capture import Dissector
from mqtt_cli.capture import dissector as dissector_module
from mqtt_cli.capture.records import RecordBuilder, format_ts
from mqtt_cli.core import Auth, ConnAck, Connect, Properties, PubAck, Publish, encode

from .helpers import dissect, session, types
from .pcapwriter import ACK, ETHERNET, FIN, LINKS, PSH, RST, SYN, Conversation, udp_frame

SESSION = ["CONNECT", "CONNACK", "SUBSCRIBE", "SUBACK", "PUBLISH", "PUBACK", "PUBLISH", "PUBACK", "PUBLISH", "PUBACK",
           "PINGREQ", "DISCONNECT"]  # fmt: skip


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize(
    "link",
    sorted(LINKS),
    ids=lambda link: {1: "ethernet", 101: "raw", 0: "null", 108: "loop", 113: "sll", 276: "sll2"}[link],
)
def test_a_session_over_every_link_layer(link: int, v6: bool) -> None:
    addr = ("2001:db8::10", "2001:db8::1") if v6 else ("192.168.1.10", "192.168.1.1")
    conv = session(Conversation(client=addr[0], server=addr[1], cport=50123))
    records = dissect(conv.frames(link), link)
    assert types(records) == SESSION
    first = records[0]
    client = f"[{addr[0]}]:50123" if v6 else f"{addr[0]}:50123"
    server = f"[{addr[1]}]:1883" if v6 else f"{addr[1]}:1883"
    assert (first["src"], first["dst"], first["client"], first["from_client"]) == (client, server, "dev-1", True)
    assert (records[1]["src"], records[1]["from_client"]) == (server, False)
    assert {r["stream"] for r in records} == {0}


def test_vlan_tagged_ethernet() -> None:
    conv = session(Conversation())
    frames = [(ts, frame[:12] + b"\x81\x00\x00\x2a" + frame[12:]) for ts, frame in conv.frames(ETHERNET)]
    assert types(dissect(frames)) == SESSION


def test_version_5_learnt_from_connect_applies_to_both_directions() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("v5", protocol_version=5, properties=Properties(receive_maximum=5)), 5))
    conv.send(encode(ConnAck(properties=Properties(topic_alias_maximum=10)), 5), False)
    conv.send(encode(Publish("a", b"x", 1, packet_id=1), 5))
    conv.send(encode(PubAck(1, 0x10), 5), False)
    records = dissect(conv.frames())
    assert records[1]["properties"] == [["topic_alias_maximum", 10]]
    assert records[3]["reason_code"] == 0x10
    assert records[2]["properties"] == []


def test_connections_without_connect_read_as_311_or_as_told() -> None:
    conv = Conversation().handshake()
    conv.send(encode(PubAck(1, 0x10, Properties(reason_string="r")), 5), False)
    assert "error" in dissect(conv.frames())[0]  # 3.1.1: a PUBACK has 2 bytes
    record = dissect(conv.frames(), version=5)[0]
    assert record["reason_code"] == 0x10 and "error" not in record


def test_out_of_order_retransmitted_and_overlapping_segments() -> None:
    conv = session(Conversation(), mss=7)
    frames = conv.frames()
    expected = dissect(frames)
    rng = random.Random(3)
    handshake, data = frames[:3], frames[3:-3]
    shuffled = []
    for i in range(0, len(data), 4):  # reorder within windows of four segments, and repeat some
        window = data[i : i + 4]
        rng.shuffle(window)
        shuffled += window + rng.sample(window, 1)
    records = dissect(handshake + shuffled + frames[-3:])

    def by_direction(recs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        # Across directions the order follows the capture's; within one it is the stream's.
        return sorted((r["from_client"], r["offset"], r["type"], r.get("packet_id"), r.get("topic")) for r in recs)

    assert by_direction(records) == by_direction(expected)
    assert len(records) == len(expected)


def test_a_packet_spanning_segments_belongs_to_the_segment_that_completes_it() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("c")))
    big = encode(Publish("big", bytes(5000), 0))
    conv.send(big, mss=1448)  # four segments
    records = dissect(conv.frames())
    assert records[1]["type"] == "PUBLISH"
    assert records[1]["frame"] == 8 and records[1]["payload_len"] == 5000
    last = conv.segments[7]
    assert records[1]["ts"] == f"{last.ts // 10**9}.{last.ts % 10**9:09d}"


def test_packets_behind_a_late_segment_keep_the_frames_of_their_last_bytes() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("c")))
    conv.send(encode(Publish("a", b"1", 0)) + encode(Publish("b", b"2", 0)), mss=5)
    frames = conv.frames()
    late = frames[4]  # the first piece of the two publishes arrives last
    records = dissect(frames[:4] + frames[5:] + [late])
    # Bytes 5-9 (the end of "a") came in frame 5, bytes 10-11 (the end of "b") in frame 6, as the format says:
    # the record holding a packet's last byte, even when an earlier byte came later.
    publishes = [r for r in records if r["type"] == "PUBLISH"]
    assert [(r["topic"], r["frame"]) for r in publishes] == [("a", 5), ("b", 6)]
    assert publishes[0]["ts"] == format_ts(frames[5][0])


def test_records_come_out_in_frame_order_when_a_segment_comes_late() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("c")))
    conv.send(encode(Publish("a", b"1", 0)))
    conv.send(encode(Publish("b", b"2", 0)))
    frames = conv.frames()
    records = dissect([*frames[:4], frames[5], frames[4]])  # "b" is captured before "a"
    assert [(r.get("topic"), r["frame"]) for r in records] == [(None, 4), ("b", 5), ("a", 6)]


def test_records_held_behind_a_hole_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dissector_module, "MAX_HELD_RECORDS", 10)
    conv = Conversation().handshake()
    conv.send(encode(Connect("c")))
    conv.send(encode(ConnAck()), False)
    conv.send(encode(Publish("lost", b"", 0)))
    conv.send(encode(Publish("held", b"", 0)))
    for n in range(30):  # the broker goes on talking; its acknowledgement numbers never cover the hole
        conv.send(encode(Publish(f"s/{n}", b"", 0)), False)
    frames = conv.frames()
    segments = [s for n, s in enumerate(conv.segments) if n != 5]
    for seg in segments[6:]:
        seg.ack = conv.segments[5].seq
    dissector = Dissector((1883,))
    released_at = None
    for number, (ts, frame) in enumerate(conv.frames(segments=segments), 1):
        out = dissector.frame(ts, ETHERNET, frame, number)
        if any(r.get("topic") == "held" for r in out):
            released_at = number
    assert released_at is not None and released_at < len(frames) - 10  # not kept until the end of the capture


def test_gap_is_reported_and_decoding_resumes() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("gappy")))
    conv.send(encode(ConnAck()), False)
    for n in range(6):
        conv.send(encode(Publish(f"t/{n}", b"p" * 40, 1, packet_id=n + 1)))
        conv.send(encode(PubAck(n + 1)), False)
    frames = conv.frames()
    dropped = 7  # the second PUBLISH: the broker's PUBACK acknowledges it, the capture never had it
    records = dissect(frames[:dropped] + frames[dropped + 1 :])
    gap = [r for r in records if r["type"] == "MALFORMED"]
    assert len(gap) == 1 and gap[0]["lost_bytes"] == len(conv.segments[dropped].payload)
    assert "not captured" in gap[0]["error"]
    topics = [r["topic"] for r in records if r["type"] == "PUBLISH"]
    assert topics == ["t/0", "t/2", "t/3", "t/4", "t/5"]


def test_gap_inside_a_long_packet() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("c")))
    conv.send(encode(Publish("big", bytes(6000), 0)), mss=1000)
    conv.send(encode(Publish("after", b"ok", 0)))
    frames = conv.frames()
    records = dissect(frames[:6] + frames[7:])  # a middle piece of the big PUBLISH is lost
    assert [r["type"] for r in records] == ["CONNECT", "MALFORMED", "MALFORMED", "PUBLISH"]
    assert "PUBLISH being received" in records[1]["error"]
    assert records[-1]["topic"] == "after"


def test_connection_whose_start_was_not_captured() -> None:
    conv = session(Conversation())
    frames = conv.frames()
    records = dissect(frames[5:])  # no handshake, no CONNECT, no CONNACK
    assert types(records) == SESSION[2:]
    assert records[0]["client"] is None
    assert records[0]["from_client"] is True  # known from the port


def test_detection_of_connect_on_any_port() -> None:
    conv = session(Conversation(sport=5555))
    assert types(dissect(conv.frames())) == SESSION
    assert dissect(conv.frames(), detect=False) == []
    other = Conversation(sport=80).handshake().send(b"GET / HTTP/1.1\r\n\r\n").send(b"HTTP/1.1 200 OK\r\n\r\n", False)
    assert dissect(other.frames()) == []


def test_tls_is_reported_once_not_decoded() -> None:
    hello = b"\x16\x03\x01\x00\x05hello"
    conv = Conversation(sport=8883).handshake().send(hello).send(b"\x16\x03\x03\x00\x02hi", False)
    conv.send(b"\x17\x03\x03\x00\x10" + bytes(16))
    records = dissect(conv.frames())
    assert len(records) == 1 and records[0]["encrypted"] and records[0]["type"] == "MALFORMED"
    on_mqtt_port = Conversation().handshake().send(hello)
    assert [r["encrypted"] for r in dissect(on_mqtt_port.frames())] == [True]


def test_udp_and_other_traffic_are_skipped() -> None:
    frames = [udp_frame("127.0.0.1", "127.0.0.1", 40000, 18849, b"probe", 1)]
    frames += session(Conversation()).frames()
    assert types(dissect(frames)) == SESSION


def test_same_ports_reused_by_a_new_connection() -> None:
    first = session(Conversation(isn_client=1000), client_id="one")
    second = session(Conversation(isn_client=900000, ts=first.ts + 10**9), client_id="two")
    records = dissect(first.frames() + second.frames())
    assert [r["client"] for r in records if r["type"] == "CONNECT"] == ["one", "two"]
    assert [r["stream"] for r in records if r["type"] == "CONNECT"] == [0, 1]


def test_interleaved_connections() -> None:
    a = session(Conversation(cport=41000), client_id="a")
    b = session(Conversation(cport=42000), client_id="b", version=5)
    frames = sorted(a.frames() + [(ts + 500, f) for ts, f in b.frames()], key=lambda r: r[0])
    records = dissect(frames)
    for client in ("a", "b"):
        assert [r["type"] for r in records if r["client"] == client] == SESSION


def test_rst_and_end_of_capture_report_packets_cut_short() -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("cut")))
    conv.send(encode(Publish("half", bytes(100), 0))[:40])
    records = dissect(conv.frames())
    assert records[-1]["type"] == "MALFORMED" and "ends inside a PUBLISH" in records[-1]["error"]
    conv._add(True, RST | ACK)
    assert dissect(conv.frames())[-1]["frame"] == len(conv.segments)


# --- malformed MQTT: reported with the packet's fields and the rule it breaks ----------------------------


def raw_session(*chunks: bytes, version: int = 4) -> list[dict[str, Any]]:
    conv = Conversation().handshake()
    conv.send(encode(Connect("bad", protocol_version=version), version))
    for chunk in chunks:
        conv.send(chunk)
    return dissect(conv.frames())[1:]


@pytest.mark.parametrize(
    ("data", "version", "kind", "error"),
    [
        (b"\x00\x00", 4, "RESERVED", "packet type 0 is reserved"),
        (b"\x36\x07\x00\x01a\x00\x05hi", 4, "PUBLISH", "QoS 3"),
        (b"\x30\x05\x00\x03a/#", 4, "PUBLISH", "wildcard"),
        (b"\x30\x06\x00\x03a/+\x00", 5, "PUBLISH", "wildcard"),
        (b"\x38\x05\x00\x01ahi", 4, "PUBLISH", "DUP"),
        (b"\xf0\x00", 4, "AUTH", "AUTH is not part of MQTT 3.x"),
        (b"\x82\x08\x00\x00\x00\x03a/b\x00", 4, "SUBSCRIBE", "packet identifier 0"),
        (b"\x80\x08\x00\x01\x00\x03a/b\x00", 4, "SUBSCRIBE", "flags"),
        (b"\x82\x08\x00\x01\x00\x03a#b\x00", 4, "SUBSCRIBE", "#"),
        (b"\x40\x03\x00\x01\x00", 4, "PUBACK", "unexpected bytes"),
        (b"\x30\x06\x00\x02\xc3\x28hi", 4, "PUBLISH", "not valid UTF-8"),  # topic shown with U+FFFD, as tshark
        (b"\x30\x06\x00\x09abcd", 4, "MALFORMED", "runs past the end"),
        (b"\x30\x06\x00\x01a\x02\xff\x01", 5, "PUBLISH", "unknown property identifier 0xFF"),
        (b"\xe0\x02\x02\x00", 5, "DISCONNECT", "reason code 0x02 is not allowed"),
    ],
    ids=["reserved-type", "qos-3", "wildcard-topic", "wildcard-topic-v5", "dup-on-qos0", "auth-in-311",
         "packet-id-0", "reserved-flags", "bad-filter", "long-puback", "bad-utf8", "string-past-end",
         "unknown-property", "bad-reason-code"],
)  # fmt: skip
def test_malformed_packets(data: bytes, version: int, kind: str, error: str) -> None:
    records = raw_session(data + encode(Publish("next", b"ok", 0), version), version=version)
    assert records[0]["type"] == kind
    assert error in records[0]["error"]
    assert records[0]["flags"] == data[0] & 15 and records[0]["remaining_length"] == data[1]
    assert records[1]["type"] == "PUBLISH" and records[1]["topic"] == "next"  # decoding goes on


def test_unreadable_text_and_unknown_properties_are_shown_as_tshark_does() -> None:
    (bad_text,) = raw_session(b"\x30\x06\x00\x02\xc3\x28hi", version=4)
    assert bad_text["type"] == "PUBLISH" and bad_text["topic"] == "\ufffd(" and bad_text["payload_len"] == 2
    (unknown,) = raw_session(b"\x30\x07\x00\x01a\x02\xff\x01z", version=5)
    assert unknown["properties"] == [["unknown_0xff", "01"]] and unknown["payload_len"] == 1


def test_malformed_packet_keeps_its_fields() -> None:
    record = raw_session(b"\x36\x07\x00\x01a\x00\x05hi")[0]
    assert (record["qos"], record["topic"], record["packet_id"], record["payload_len"]) == (3, "a", 5, 2)


def test_remaining_length_over_four_bytes_breaks_framing_then_resynchronises() -> None:
    records = raw_session(b"\x30\xff\xff\xff\xff\x7f", encode(Publish("later", b"x", 0)))
    assert records[0]["type"] == "MALFORMED" and "longer than four bytes" in records[0]["error"]
    assert records[-1]["type"] == "PUBLISH" and records[-1]["topic"] == "later"


def test_auth_in_5_is_fine() -> None:
    records = raw_session(encode(Auth(0x18, Properties(authentication_method="SCRAM")), 5), version=5)
    assert records[0]["type"] == "AUTH" and "error" not in records[0] and records[0]["reason_code"] == 0x18


def test_json_text_records_are_the_encoded_dicts() -> None:
    from mqtt_cli.jsonlines import record_encoder

    encode_record = record_encoder()
    frames = session(Conversation(), version=5).frames() + session(Conversation(cport=40001)).frames()
    frames += session(Conversation(cport=40002), client_id='quote"and\u00e9').frames()
    as_dicts = [encode_record(r) for r in dissect(frames)]
    dissector = Dissector(json_text=True)
    texts = []
    for number, (ts, frame) in enumerate(frames, 1):
        texts += dissector.frame(ts, ETHERNET, frame, number)
    texts += dissector.finish()
    assert [t if isinstance(t, str) else encode_record(t) for t in texts] == as_dicts
    assert any(isinstance(t, str) for t in texts)


def test_records_keep_objects_for_renderers() -> None:
    records = dissect(session(Conversation()).frames(), keep_objects=True)
    assert isinstance(records[4]["_obj"], Publish)
    assert isinstance(RecordBuilder(keep_objects=True), RecordBuilder)


def test_bare_acks_and_fins_of_unknown_connections_are_ignored() -> None:
    conv = Conversation()
    conv._add(True, ACK)
    conv._add(False, FIN | ACK)
    conv._add(True, SYN | PSH)  # a SYN alone opens a connection, but carries nothing to report
    assert dissect(conv.frames()) == []


@pytest.mark.parametrize("ts", [None, -5, 0, 5, 999_999_999, 1_000_000_000, 1_000_000_001, 1_795_344_994_709_346_000])
def test_timestamps_of_the_hot_paths_are_format_ts(ts: int | None) -> None:
    """The record builder's own timestamp formatting (cut from the digits) and build_texts' agree with format_ts."""
    from mqtt_cli.capture.records import NO_CONTEXT

    builder = RecordBuilder()
    (text,) = builder.build_texts([(0x30, 3, 0)], [Publish("a", b"")], ts, 1, NO_CONTEXT, 4)
    expected = format_ts(ts)
    assert json.loads(text)["ts"] == expected
    (rec,) = builder.build_packets([(0x40, 2, 0)], [PubAck(1)], ts, 1, NO_CONTEXT, 4)
    assert rec["ts"] == expected
