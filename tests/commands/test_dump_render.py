"""What `mqtt dump` shows people (mqtt_cli.render): lines, colour on terminals, trees, --stats, progress."""

from __future__ import annotations

import io
import json

from rich.console import Console

from mqtt_cli.capture.rawstream import decode_stream, parse_hex
from mqtt_cli.capture.stats import DumpStats
from mqtt_cli.core import Connect, Properties, PubAck, Publish, Will, encode
from mqtt_cli.render import JsonLines, PacketLines, PacketTrees, hexdump, payload_preview, stats_tables, with_progress


def records(*packets: bytes, version: int | None = None) -> list[dict]:
    return list(decode_stream([b"".join(packets)], version, keep_objects=True))


def test_payload_preview() -> None:
    assert payload_preview(b"") == "(empty)"
    assert payload_preview(b"21.5") == '"21.5"'
    assert payload_preview(("é" * 100).encode()).endswith("…")
    assert payload_preview(b"\x00\x01\xff") == "0x 00 01 ff"
    assert payload_preview(bytes(100)).endswith(" …")


def test_hexdump() -> None:
    text = hexdump(b"MQTT\x00\x05" + bytes(20), limit=16)
    assert text.splitlines()[0] == "00000000  4d 51 54 54 00 05 00 00 00 00 00 00 00 00 00 00  |MQTT............|"
    assert text.splitlines()[1] == "… 10 more bytes"


def test_plain_lines_and_topic_aliases() -> None:
    out = io.StringIO()
    lines = PacketLines(out=out)
    recs = records(
        encode(Connect("aliaser", protocol_version=5), 5),
        encode(Publish("long/topic/name", b"1", 0, properties=Properties(topic_alias=3)), 5),
        encode(Publish("", b"2", 0, properties=Properties(topic_alias=3)), 5),
        encode(Publish("", b"3", 0, properties=Properties(topic_alias=4)), 5),
    )
    for rec in recs:
        rec["stream"], rec["from_client"] = 0, True
        lines.write(rec)
    text = out.getvalue().splitlines()
    assert "aliaser →  CONNECT" in text[0]
    assert "long/topic/name alias=3" in text[1]
    assert "long/topic/name via alias 3" in text[2]  # resolved for people; the record keeps ""
    assert recs[2]["topic"] == ""
    assert "(unknown alias) via alias 4" in text[3]


def test_colour_only_on_a_terminal() -> None:
    rec = records(encode(Connect("c")))[0]
    terminal = io.StringIO()
    PacketLines(console=Console(file=terminal, force_terminal=True, color_system="standard")).write(rec)
    assert "\x1b[" in terminal.getvalue()
    plain = io.StringIO()
    PacketLines(out=plain).write(rec)
    assert "\x1b[" not in plain.getvalue() and "CONNECT" in plain.getvalue()


def test_tree_shows_every_field_will_and_errors() -> None:
    out = io.StringIO()
    trees = PacketTrees(out=out)
    will = Will("last/words", b"bye", 1, True, Properties(will_delay_interval=5))
    connect = encode(Connect("w", username="u", password=b"secret", will=will, protocol_version=5), 5)
    for rec in records(connect, b"\x36\x08\x00\x01a\x00\x05\x00hi"):  # QoS 3, in 5.0
        trees.write(rec)
    text = out.getvalue()
    for expected in ("client_id: 'w'", "username: 'u'", "password: (6 bytes, not shown)", "will: 'last/words' QoS 1",
                     "will_delay_interval: 5", "|bye|", "breaks 1 rule(s)", "QoS 3"):  # fmt: skip
        assert expected in text, expected
    assert "secret" not in text


def test_stats_tables_and_open_flows() -> None:
    stats = DumpStats()
    recs = [
        {"type": "PUBLISH", "stream": 0, "from_client": True, "client": "a", "packet_id": 1, "qos": 1, "topic": "x"},
        {"type": "PUBACK", "stream": 0, "from_client": False, "client": "a", "packet_id": 1},
        {"type": "PUBLISH", "stream": 0, "from_client": True, "client": "a", "packet_id": 2, "qos": 2, "topic": "y"},
        {"type": "PUBREC", "stream": 0, "from_client": False, "client": "a", "packet_id": 2},
        {"type": "PUBLISH", "stream": 1, "from_client": False, "client": "b", "packet_id": 9, "qos": 1, "topic": "z"},
        {"type": "MALFORMED", "stream": 1, "from_client": False, "client": "b", "error": "PUBLISH: x (at byte 4)"},
    ]
    for rec in recs:
        stats.add(rec)
    flows = {(f.client, f.packet_id, f.waiting) for f in stats.open_flows}
    assert flows == {("a", 2, "PUBREL"), ("b", 9, "PUBACK")}
    assert stats.by_type["PUBLISH"] == 3 and stats.malformed == 1 and stats.errors["PUBLISH: x"] == 1
    out = io.StringIO()
    Console(file=out, width=120).print(
        stats_tables(
            stats, {"frames": 10, "connections": 2, "gaps": 1, "lost_bytes": 5, "encrypted": 0, "skipped_bytes": 0}
        )
    )
    text = out.getvalue()
    assert "QoS flows left unacknowledged: 2" in text and "capture gaps" in text and "1 (5 bytes lost)" in text


def test_pubrel_and_pubcomp_close_a_qos2_flow() -> None:
    stats = DumpStats()
    base = {"stream": 3, "client": "c", "packet_id": 4}
    stats.add({**base, "type": "PUBLISH", "from_client": False, "qos": 2, "topic": "t"})
    stats.add({**base, "type": "PUBREC", "from_client": True})
    stats.add({**base, "type": "PUBREL", "from_client": False})
    assert [f.waiting for f in stats.open_flows] == ["PUBCOMP"]
    stats.add({**base, "type": "PUBCOMP", "from_client": True})
    assert stats.open_flows == []


def test_json_lines_writer_takes_dicts_and_texts() -> None:
    out = io.BytesIO()
    writer = JsonLines(out, batch=2)
    writer.write({"type": "PINGREQ", "topic": "é"})
    writer.write('{"type":"PUBLISH"}')
    writer.write({"b": b"\x01"})
    writer.close()
    lines = out.getvalue().decode().splitlines()
    assert [json.loads(line) for line in lines] == [{"type": "PINGREQ", "topic": "é"}, {"type": "PUBLISH"}, {"b": "01"}]
    assert "é" in lines[0]  # UTF-8, not escaped


def test_progress_passes_items_through() -> None:
    positions = iter(range(100))
    assert list(with_progress(range(10), lambda: next(positions), 100, "x", every=3)) == list(range(10))


def test_hex_parsing() -> None:
    assert parse_hex("10 0c:00-04,0x4d") == bytes([0x10, 0x0C, 0x00, 0x04, 0x4D])
    assert records(parse_hex(encode(PubAck(5)).hex()))[0]["packet_id"] == 5
