"""A CONNECT whose protocol name or level we do not speak, or whose name is cut short: `mqtt dump` (and the
pipeline's table, through the same Dissector) shows it as Wireshark does, field by field: a CONNECT with the
fields it could read and the error, not a MALFORMED record; and the connection's later packets are read in the
layout tshark reads them in (by the level byte; 3.1.1's for a level it does not know)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.core import encode
from mqtt_cli.core.packets import ConnAck, PubAck, Publish

from .helpers import dissect
from .pcapwriter import Conversation, pcap

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (make install)")


def _s(raw: bytes) -> bytes:
    return len(raw).to_bytes(2, "big") + raw


def _connect(name: bytes | None, level: int | None, flags: int = 0x02, rest: bytes = _s(b"cid")) -> bytes:
    body = (_s(name) if name is not None else b"") + (bytes((level, flags)) + b"\x00\x3c" + rest if level else b"")
    return bytes((0x10, len(body))) + body


WILL_USER = _s(b"cid") + _s(b"w/t") + _s(b"bye") + _s(b"usr") + _s(b"pw")
VARIANTS = {
    "unknown-name": _connect(b"MQTX", 4),
    "empty-name": _connect(b"", 4),
    "name-too-long": _connect(b"MQTTMQTT", 4),
    "mqisdp-level-4": _connect(b"MQIsdp", 4),
    "mqtt-level-3": _connect(b"MQTT", 3),
    "unknown-level": _connect(b"MQTT", 7),
    "unknown-level-will-user": _connect(b"MQTT", 9, flags=0xC6, rest=WILL_USER),
    "unknown-level-bridge-bit": _connect(b"MQTT", 0x87),
    "unknown-name-level-5": _connect(b"MQTX", 5, rest=b"\x03\x21\x00\x0a" + _s(b"cid")),
    "name-cut-short": b"\x10\x04\x00\x04MQ",
    "name-length-past-end": b"\x10\x0c\x00\x20MQTT\x04\x02\x00\x3c\x00\x01",
    "no-level": b"\x10\x06" + _s(b"MQTT"),
}


def _capture(connect: bytes, layout: int = 4) -> list[tuple[int, bytes]]:
    """CONNECT, the broker's refusal, then what the client sends anyway: a QoS 1 PUBLISH (its layout differs
    between 3.1.1 and 5.0: `layout` is the one the CONNECT's level byte asks for) and a PUBACK."""
    conv = Conversation().handshake()
    conv.send(connect)
    conv.send(encode(ConnAck(False, 0x84 if layout == 5 else 1), layout), False)
    conv.send(encode(Publish("a/b", b"XY", 1, packet_id=7), layout))
    conv.send(encode(PubAck(7), layout), False)
    return conv.close().frames()


def _tshark(path: Path) -> list[dict[str, Any]]:
    """Per MQTT packet, what tshark shows, in our record's key names (absent when tshark shows no such field)."""
    assert TSHARK is not None
    out = subprocess.run([TSHARK, "-r", str(path), "-T", "json", "-Y", "mqtt"], capture_output=True, text=True,
                         timeout=60, check=True).stdout  # fmt: skip
    packets = []
    for frame in json.loads(out):
        layers = frame["_source"]["layers"]
        mqtts = layers["mqtt"] if isinstance(layers["mqtt"], list) else [layers["mqtt"]]
        for m in mqtts:
            flags = m.get("mqtt.hdrflags_tree", {})
            rec: dict[str, Any] = {"frame": int(layers["frame"]["frame.number"])}
            rec["type"] = [
                "RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE",
                "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
            ][int(flags["mqtt.msgtype"])]  # fmt: skip
            rec["remaining_length"] = int(m["mqtt.len"])
            conflags = m.get("mqtt.conflags_tree", {})
            for ours, theirs, kind in (
                ("proto_name", "mqtt.protoname", str), ("proto_version", "mqtt.ver", int),
                ("keepalive", "mqtt.kalive", int), ("client_id", "mqtt.clientid", str),
                ("will_topic", "mqtt.willtopic", str), ("will_payload_len", "mqtt.willmsg_len", int),
                ("username", "mqtt.username", str), ("topic", "mqtt.topic", str), ("packet_id", "mqtt.msgid", int),
            ):  # fmt: skip
                if theirs in m:
                    rec[ours] = kind(m[theirs])
            if "mqtt.conflag.cleansess" in conflags:
                rec["clean_session"] = conflags["mqtt.conflag.cleansess"] == "1"
            for code in ("mqtt.conack.val", "mqtt.connack.reason_code"):
                if code in m:
                    rec["reason_code"] = int(m[code])
            if "mqtt.msg" in m:
                rec["payload_len"] = len(bytes.fromhex(m["mqtt.msg"].replace(":", "")))
            rec["malformed"] = "_ws.malformed" in layers
            packets.append(rec)
    return packets


def _ours(frames: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    return [r for r in dissect(frames) if r["type"] != "MALFORMED" or r.get("packet_type")]


@needs_tshark
@pytest.mark.parametrize("name", list(VARIANTS))
def test_connect_variant_as_tshark_shows_it(tmp_path: Path, name: str) -> None:
    frames = _capture(VARIANTS[name], 5 if name.endswith("level-5") else 4)
    path = tmp_path / f"{name}.pcap"
    path.write_bytes(pcap(frames))
    theirs = _tshark(path)
    ours = _ours(frames)
    assert [r["type"] for r in ours] == [t["type"] for t in theirs] == ["CONNECT", "CONNACK", "PUBLISH", "PUBACK"]
    for t, o in zip(theirs, ours, strict=True):
        for key, value in t.items():
            if key == "malformed":
                continue
            assert o.get(key) == value, f"{o['type']} {key}: ours {o.get(key)!r}, tshark {value!r}"
        if o["type"] == "CONNECT":
            # What tshark could not read, we do not show either (a core field of the comparison: client_id).
            for key in ("client_id", "proto_version", "keepalive"):
                assert (key in o) == (key in t), f"CONNECT {key}: ours {o.get(key)!r}, tshark {t.get(key)!r}"
            assert o["error"].startswith("CONNECT"), o
            assert t["malformed"] == ("proto_version" not in t)
        else:
            assert "error" not in o, o


def test_known_connect_has_no_error_and_sets_the_version() -> None:
    # The tolerant reader's second try is only for what the first could not read: a 5.0 CONNECT stays as it was.
    conv = Conversation().handshake()
    conv.send(_connect(b"MQTT", 5, rest=b"\x00" + _s(b"cid")))
    conv.send(encode(Publish("t", b"x", 1, packet_id=3), 5))
    records = dissect(conv.close().frames())
    assert [(r["type"], r.get("error"), r.get("properties")) for r in records] == [
        ("CONNECT", None, []), ("PUBLISH", None, []),
    ]  # fmt: skip


def test_unknown_name_with_level_5_reads_the_connection_as_5() -> None:
    # As tshark: the level byte decides the layout, whatever the name says.
    records = _ours(_capture(VARIANTS["unknown-name-level-5"], 5))
    assert records[0]["properties"] == [["receive_maximum", 10]]
    assert records[0]["error"].startswith("CONNECT asks for protocol 'MQTX' level 5")
    assert [(r["type"], r.get("properties")) for r in records[2:]] == [("PUBLISH", []), ("PUBACK", [])]
    assert "error" not in records[2] and "error" not in records[3]


def test_pipeline_rows_keep_the_connect_and_read_the_connection_as_311() -> None:
    pa = pytest.importorskip("pyarrow")
    from mqtt_cli.pipeline.dissect import DissectOptions, dissect_rows

    frames = _capture(VARIANTS["unknown-level"])
    batch = pa.RecordBatch.from_arrays(
        [pa.array([0] * len(frames), pa.int32()), pa.array(range(1, len(frames) + 1), pa.int64()),
         pa.array([ts for ts, _ in frames], pa.int64()), pa.array([1] * len(frames), pa.int32()),
         pa.array([f for _, f in frames], pa.binary())],
        names=["file_id", "frame", "ts", "linktype", "data"],
    )  # fmt: skip
    rows = pa.Table.from_batches(list(dissect_rows(iter([batch]), DissectOptions(), {0: "x.pcap"}))).to_pylist()
    assert [(r["type"], r["proto_version"], r["protocol_version"]) for r in rows] == [
        ("CONNECT", 7, 4), ("CONNACK", None, 4), ("PUBLISH", None, 4), ("PUBACK", None, 4),
    ]  # fmt: skip
    assert rows[0]["client_id"] == "cid" and rows[0]["error"].startswith("CONNECT asks for protocol 'MQTT' level 7")


def test_codec_tolerant_reader_reads_on_strict_reader_refuses_at_once() -> None:
    from mqtt_cli.core import PacketReader, UnsupportedProtocolVersion

    data = VARIANTS["unknown-level-will-user"]
    with pytest.raises(UnsupportedProtocolVersion) as caught:
        PacketReader().feed(data)  # the broker's reader: refused before the rest is read (CONNACK 0x01 / 0x84)
    assert caught.value.packet is None and caught.value.details["protocol_level"] == 9
    reader = PacketReader(strict=False)
    [err] = reader.feed(data)
    assert isinstance(err, UnsupportedProtocolVersion)
    assert (err.packet.client_id, err.packet.will.topic, err.packet.username, err.packet.protocol_version) == (
        "cid", "w/t", "usr", 9,
    )  # fmt: skip
    assert reader.version is None  # a level it does not know: later packets are read as 3.1.1
    empty = PacketReader(strict=False).feed(VARIANTS["empty-name"])[0]
    assert empty.packet.protocol_name == ""  # as on the wire, not the default name of its level
