"""`report`: each section on a made-up capture whose answers are known, the sample captures against numbers
worked out from `mqtt dump` records in Python, and the three renderings (JSON-ready data, rich tables, HTML)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mqtt_cli.core import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    encode,
)
from mqtt_cli.pipeline.html import report_html
from mqtt_cli.pipeline.ingest import ingest
from mqtt_cli.pipeline.report import build_report
from mqtt_cli.pipeline.tables import report_tables, sparkline, when
from tests.capture.pcapwriter import Conversation, pcap

from .conftest import dump_records

MS = 1_000_000


def _known_capture(path: Path) -> None:
    """Four connections whose report is known by construction."""
    ts = 1_700_000_000_000_000_000
    # 1. QoS 1 acknowledged after 2 ms, 4 ms; one never acknowledged; one re-sent with DUP then acknowledged.
    a = Conversation(cport=40001, ts=ts, step=MS).handshake()
    a.send(encode(Connect("alpha", keepalive=10)))
    a.send(encode(ConnAck()), False)
    a.send(encode(Publish("t/a", b"12345", 1, packet_id=1)))
    a.step = 2 * MS
    a.send(encode(PubAck(1)), False)
    a.step = MS
    a.send(encode(Publish("t/a", b"123", 1, packet_id=2)))
    a.step = 4 * MS
    a.send(encode(PubAck(2)), False)
    a.step = MS
    a.send(encode(Publish("t/b", b"lost", 1, packet_id=3)))  # never acknowledged
    a.send(encode(Publish("t/c", b"again", 1, packet_id=4)))
    a.send(encode(Publish("t/c", b"again", 1, packet_id=4, dup=True)))
    a.send(encode(PubAck(4)), False)
    # 2. QoS 2: the whole flow, 1 ms per step; and one flow stopped after PUBREC.
    a.send(encode(Publish("t/q2", b"two", 2, packet_id=5)))
    a.send(encode(PubRec(5)), False)
    a.send(encode(PubRel(5)))
    a.send(encode(PubComp(5)), False)
    a.send(encode(Publish("t/q2", b"half", 2, packet_id=6)))
    a.send(encode(PubRec(6)), False)
    a.send(encode(Disconnect()))
    a.close()
    # 3. Refused: bad user name or password (3.1.1 return code 4).
    b = Conversation(cport=40002, ts=ts + 100 * MS).handshake()
    b.send(encode(Connect("beta", username="u", password=b"p")))
    b.send(encode(ConnAck(reason_code=4)), False)
    b.close()
    # 4. keepalive 2 s, silent for 5 s; a PINGREQ never answered; a QoS 3 PUBLISH (a protocol violation).
    c = Conversation(cport=40003, ts=ts + 200 * MS, step=MS).handshake()
    c.send(encode(Connect("gamma", keepalive=2)))
    c.send(encode(ConnAck()), False)
    c.send(encode(PingReq()))
    c.send(encode(PingResp()), False)
    c.step = 5_000 * MS
    c.send(encode(PingReq()))
    c.step = MS
    bad = bytearray(encode(Publish("t/bad", b"x", 1, packet_id=9)))
    bad[0] |= 0x06  # both QoS bits: QoS 3
    c.send(bytes(bad))
    frames = sorted(a.frames() + b.frames() + c.frames(), key=lambda f: f[0])
    path.write_bytes(pcap(frames))


@pytest.fixture(scope="module")
def known(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("known")
    capture = tmp / "known.pcap"
    _known_capture(capture)
    ingest(spark, [str(capture)], str(tmp / "table"))
    return build_report(spark, str(tmp / "table")), capture


def test_latencies_and_flows(known: tuple[dict[str, Any], Path]) -> None:
    report, _ = known
    lat = report["latency"]
    assert lat["qos1_puback"]["count"] == 3
    assert lat["qos1_puback"]["max"] == pytest.approx(4.0)
    assert lat["qos1_puback"]["p50"] == pytest.approx(2.0)
    assert lat["qos2_pubrec"]["count"] == 2
    assert lat["qos2_total"]["count"] == 1
    assert lat["qos2_total"]["max"] == pytest.approx(3.0)
    unacked = {row["qos"]: row for row in report["unacknowledged"]}
    assert unacked[1] == {"qos": 1, "unacknowledged": 1, "incomplete": 0, "resent": 1}
    assert unacked[2]["incomplete"] == 1 and unacked[2]["unacknowledged"] == 0
    assert report["dup"] == [{"client": "alpha", "direction": "to_broker", "resends": 1}]


def test_sessions_refusals_keepalive_and_violations(known: tuple[dict[str, Any], Path]) -> None:
    report, capture = known
    ses = report["sessions"]
    assert (ses["connections"], ses["disconnected"], ses["refused"], ses["without_disconnect"]) == (3, 1, 1, 1)
    [refused] = report["refused"]
    assert (refused["version"], refused["reason_code"], refused["refusals"], refused["clients"]) == (4, 4, 1, ["beta"])
    assert "password" in refused["reason"]
    keep = report["keepalive"]
    assert keep["pings"] == 2 and keep["pongs"] == 1 and keep["unanswered_pings"] == 1
    assert [(c["client"], c["keepalive"]) for c in keep["overdue"]] == [("gamma", 2)]
    assert keep["overdue"][0]["max_gap"] == pytest.approx(5.0, abs=0.01)
    errors = {row["error"] for row in report["malformed"]}
    dumped = {rec["error"] for rec in dump_records(capture, "-p", "1883") if rec.get("error")}
    assert errors == dumped and any("QoS 3" in e for e in errors)
    assert report["summary"]["violations"] == 1


def test_topics_clients_and_timeline(known: tuple[dict[str, Any], Path]) -> None:
    report, capture = known
    dumped = [r for r in dump_records(capture, "-p", "1883") if r["type"] == "PUBLISH"]
    assert report["summary"]["publishes"] == len(dumped)
    assert report["summary"]["messages"] == len(dumped) and report["summary"]["deliveries"] == 0  # publishers only
    topics = {row["topic"]: row for row in report["topics"]}
    assert topics["t/a"]["messages"] == 2 and topics["t/a"]["payload_bytes"] == 8
    alpha = next(row for row in report["clients"] if row["client"] == "alpha")
    assert alpha["published"] == sum(1 for r in dumped if r["client"] == "alpha")
    timeline = report["timeline"]
    assert sum(p["messages"] for p in timeline["points"]) == len(dumped)
    assert timeline["series"] and all(len(s["messages"]) == len(timeline["points"]) for s in timeline["series"])
    json.dumps(report)  # JSON-ready as it is (--json)


def test_sample_captures_against_dump_records(spark: Any, samples_table: tuple[Path, list[Path], Any]) -> None:
    out, captures, _ = samples_table
    report = build_report(spark, str(out))
    records = [rec for capture in captures for rec in dump_records(capture)]
    assert report["summary"]["packets"] == len(records)
    assert report["summary"]["publishes"] == sum(r["type"] == "PUBLISH" for r in records)
    publishes = [r for r in records if r["type"] == "PUBLISH"]
    assert report["summary"]["messages"] == sum(r["from_client"] is True for r in publishes)
    assert report["summary"]["deliveries"] == sum(r["from_client"] is False for r in publishes)
    # No re-sends nor losses in these captures: every QoS 1 PUBLISH meets its PUBACK, every QoS 2 its PUBCOMP.
    assert report["latency"]["qos1_puback"]["count"] == sum(r["type"] == "PUBACK" for r in records)
    assert report["latency"]["qos2_total"]["count"] == sum(r["type"] == "PUBCOMP" for r in records)
    assert set(report["seconds"]) >= {"summary", "topics", "latency", "sessions", "keepalive", "malformed"}


def test_renderings(known: tuple[dict[str, Any], Path]) -> None:
    report, _ = known
    console = Console(record=True, width=140)
    console.print(report_tables(report))
    text = console.export_text()
    for title in ("Summary", "Topics", "Acknowledgement latency", "Sessions", "Refused connections", "alpha"):
        assert title in text
    page = report_html(report)
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 2 and "<polyline" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained
    assert sparkline([0, 1, 2, 8]) == " ▁▂█"


def test_tiny_input_settings_give_the_same_report(
    spark: Any, samples_table: tuple[Path, list[Path], Any], known: tuple[dict[str, Any], Path]
) -> None:
    """session.TINY_INPUT_CONF (expressions interpreted, no whole-stage code, one shuffle partition, no adaptive
    plans): what `mqtt analyze report` runs a small table with. The same report as with Spark's usual settings."""
    from mqtt_cli.pipeline.session import TINY_INPUT_CONF

    for table in (samples_table[0], known[1].parent / "table"):
        usual = build_report(spark, str(table))
        before = {key: spark.conf.get(key, None) for key in TINY_INPUT_CONF}
        for key, value in TINY_INPUT_CONF.items():
            spark.conf.set(key, value)
        try:
            tiny = build_report(spark, str(table))
        finally:
            for key, value in before.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
        usual.pop("seconds")
        tiny.pop("seconds")
        assert tiny == usual, table


def _cells(line: str) -> list[str]:
    """A line of a rich table as its cells (columns are apart by "│" or two spaces and more)."""
    import re

    return [cell for cell in re.split(r"\s*[│┃]\s*|\s{2,}", line.strip()) if cell]


# --- messages and deliveries ---------------------------------------------------------------------------------

FAN_OUT_TOPIC = "plant/line1/temp"
FAN_OUT_START = 1_700_000_000_000_000_000


def fan_out_capture(path: Path, messages: int = 160, subscribers: int = 3) -> None:
    """One publisher sending `messages` QoS 0 messages at 20 a second to a broker that delivers each to
    `subscribers` subscribers: the broker's side of every connection is port 1883."""
    pub = Conversation(cport=42000, ts=FAN_OUT_START, step=MS).handshake()
    pub.send(encode(Connect("publisher")))
    pub.send(encode(ConnAck()), False)
    subs = []
    for n in range(subscribers):
        sub = Conversation(cport=42001 + n, ts=FAN_OUT_START + (n + 1) * 10 * MS, step=MS).handshake()
        sub.send(encode(Connect(f"subscriber{n}")))
        sub.send(encode(ConnAck()), False)
        sub.send(encode(Subscribe(1, (Subscription(FAN_OUT_TOPIC),))))
        sub.send(encode(SubAck(1, (0,))), False)
        subs.append(sub)
    for k in range(messages):
        at = FAN_OUT_START + 100 * MS + k * 50 * MS  # 20 a second
        packet = encode(Publish(FAN_OUT_TOPIC, f"{20 + k % 7}.5".encode()))
        pub.ts = at
        pub.send(packet)
        for n, sub in enumerate(subs):
            sub.ts = at + (n + 1) * MS // 10
            sub.send(packet, False)
    for conv in (pub, *subs):
        conv.send(encode(Disconnect()))
        conv.close()
    frames = sorted((f for conv in (pub, *subs) for f in conv.frames()), key=lambda f: f[0])
    path.write_bytes(pcap(frames))


@pytest.fixture(scope="module")
def fan_out(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("fan-out")
    fan_out_capture(tmp / "fan-out.pcap")
    ingest(spark, [str(tmp / "fan-out.pcap")], str(tmp / "table"))
    return tmp / "table"


def test_a_message_to_three_subscribers_is_one_message_and_three_deliveries(spark: Any, fan_out: Path) -> None:
    """160 messages at 20 a second, each delivered to three subscribers: 160 messages and 480 deliveries in
    every table and chart (not 640 PUBLISH called messages), 20 messages a second at the peak."""
    report = build_report(spark, str(fan_out))
    s = report["summary"]
    assert (s["publishes"], s["messages"], s["deliveries"]) == (640, 160, 480)
    assert s["delivered_bytes"] == 3 * s["message_bytes"] > 0
    [topic] = report["topics"]
    assert (topic["topic"], topic["messages"], topic["deliveries"]) == (FAN_OUT_TOPIC, 160, 480)
    assert (topic["publishers"], topic["receivers"]) == (1, 3)
    assert topic["payload_bytes"] == s["message_bytes"]
    clients = {c["client"]: (c["published"], c["received"]) for c in report["clients"]}
    assert clients == {"publisher": (160, 0), **{f"subscriber{n}": (0, 160) for n in range(3)}}
    timeline = report["timeline"]
    assert timeline["step_seconds"] == 1
    assert sum(p["messages"] for p in timeline["points"]) == 160
    assert sum(p["deliveries"] for p in timeline["points"]) == 480
    assert max(p["messages"] for p in timeline["points"]) == 20
    assert max(p["deliveries"] for p in timeline["points"]) == 60
    series = {(x["kind"], x["name"]): sum(x["messages"]) for x in timeline["series"]}
    assert series == {("topic", FAN_OUT_TOPIC): 160, ("client", "publisher"): 160}

    console = Console(record=True, width=200)
    console.print(report_tables(report))
    text = console.export_text()
    lines = [_cells(line) for line in text.splitlines()]
    assert ["messages (PUBLISH to the broker)", "160"] in lines
    assert ["deliveries (PUBLISH to subscribers)", "480"] in lines
    [row] = [cells for cells in lines if cells[:1] == [FAN_OUT_TOPIC]]
    assert row[1:6] == ["160", row[2], "1", "480", "3"]
    peaks = {cells[0]: cells[1] for cells in lines if cells and cells[0].startswith("all ")}
    assert peaks == {"all messages": "20.0", "all deliveries": "60.0"}
    page = report_html(report)
    assert "<td>messages (PUBLISH to the broker)</td><td>160</td>" in page
    assert "<td>deliveries (PUBLISH to subscribers)</td><td>480</td>" in page
    assert f"<td>{FAN_OUT_TOPIC}</td><td>160</td>" in page
    assert "all deliveries" in page


def test_the_text_report_written_to_a_file_is_not_cut(
    spark: Any, fan_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mqtt analyze report t/ > report.txt`: every row whole, however wide (rich cuts to 80 columns when
    standard output is no terminal). Printed as the command prints it, to a file in place of standard output."""
    from contextlib import redirect_stdout

    from mqtt_cli.pipeline.tables import report_tables
    from mqtt_cli.render import print_whole

    out = tmp_path / "report.txt"
    monkeypatch.delenv("COLUMNS", raising=False)
    with out.open("w") as stdout, redirect_stdout(stdout):
        print_whole(report_tables(build_report(spark, str(fan_out))))
    text = out.read_text()
    first = FAN_OUT_START + 100 * MS + MS  # the publisher's first PUBLISH (each segment comes a step after its time)
    last = FAN_OUT_START + 100 * MS + 159 * 50 * MS + 3 * MS // 10 + MS  # the last delivery
    [row] = [line for line in text.splitlines() if line.startswith(FAN_OUT_TOPIC)]
    cells = _cells(row)
    assert cells[1:6] == ["160", cells[2], "1", "480", "3"]
    assert cells[6:] == [when(first), when(last)], row
    assert max(len(line) for line in text.splitlines()) > 80  # the rows were wider than rich's default
    assert "…" not in text
