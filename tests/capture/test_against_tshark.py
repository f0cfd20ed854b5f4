"""Our reading of captures against tshark's, on captures written here in the formats the samples lack, and on
real traffic: Debian's mosquitto and its clients on 127.0.0.1, captured with dumpcap."""

from __future__ import annotations

import gzip
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.capture.records import format_ts
from mqtt_cli.capture.stats import DumpStats
from mqtt_cli.core import ConnAck, Connect, Properties, PubAck, Publish, encode

from ..conftest import REPO_ROOT, cli_env
from .helpers import TS0, dissect, read_capture, session
from .pcapwriter import ETHERNET, NULL, RAW, SLL, SLL2, Conversation, Interface, pcap, pcapng

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (make install)")
TYPES = ["RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE",
         "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH"]  # fmt: skip


def tshark_packets(path: Path, ports: tuple[int, ...] = (1883,)) -> dict[int, list[tuple[str, str]]]:
    """frame number -> [(type, topic or ""), ...] as tshark decodes them."""
    assert TSHARK is not None
    decode_as = [arg for port in ports for arg in ("-d", f"tcp.port=={port},mqtt")]
    out = subprocess.run(
        [TSHARK, "-r", str(path), *decode_as, "-Y", "mqtt", "-T", "fields", "-e", "frame.number",
         "-e", "mqtt.msgtype", "-e", "mqtt.topic", "-E", "occurrence=a", "-E", "aggregator=|"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    frames: dict[int, list[tuple[str, str]]] = {}
    for line in out.splitlines():
        number, msgtypes, topics = [*line.split("\t"), "", ""][:3]
        kinds = [TYPES[int(t)] for t in msgtypes.split("|")]
        names = iter(topics.split("|")) if topics else iter(())
        frames[int(number)] = [(k, next(names, "") if k in ("PUBLISH", "SUBSCRIBE") else "") for k in kinds]
    return frames


def our_packets(path: Path, ports: tuple[int, ...] = (1883,)) -> dict[int, list[tuple[str, str]]]:
    _, records = read_capture(path.read_bytes())
    frames: dict[int, list[tuple[str, str]]] = defaultdict(list)
    from mqtt_cli.capture import Dissector

    dissector = Dissector(ports, detect=False)
    for ts, linktype, frame, number in records:
        for rec in dissector.frame(ts, linktype, frame, number):
            topic = rec.get("topic") or (rec.get("topics") or [""])[0]
            frames[rec["frame"]].append((rec["type"], topic if rec["type"] in ("PUBLISH", "SUBSCRIBE") else ""))
    return dict(frames)


def variants() -> list[tuple[str, bytes]]:
    v311 = session(Conversation(cport=40001), client_id="a")
    v5 = session(Conversation(cport=40002, ts=v311.ts + 10**6), version=5, client_id="b")
    v6 = session(Conversation(client="fd00::2", server="fd00::1", cport=40003, ts=v5.ts + 10**6), version=5)
    ethernet = v311.frames() + v5.frames()
    return [
        ("pcap-ns-big-endian-sll2-ipv6", pcap(v6.frames(SLL2), SLL2, nanos=True, big_endian=True)),
        ("pcap-sll", pcap(v311.frames(SLL), SLL)),
        ("pcap-bsd-null", pcap(v5.frames(NULL), NULL)),
        ("pcap-gzip", gzip.compress(pcap(ethernet))),
        ("pcapng-big-endian-interfaces", pcapng(
            [(0, ts, f) for ts, f in v311.frames()] + [(1, ts, f) for ts, f in v5.frames(RAW)],
            [Interface(ETHERNET), Interface(RAW, tsresol=9)], big_endian=True)),
        ("pcapng-simple-blocks", pcapng([(0, 0, f) for _, f in ethernet], [Interface(ETHERNET)], simple=True)),
    ]  # fmt: skip


@needs_tshark
@pytest.mark.parametrize(("name", "data"), variants(), ids=[v[0] for v in variants()])
def test_formats_decode_as_tshark_decodes_them(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    ours = our_packets(path)
    assert sum(len(v) for v in ours.values()) >= 12
    assert ours == tshark_packets(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


@pytest.mark.interop
@pytest.mark.skipif(
    TSHARK is None or not all(shutil.which(t) for t in ("dumpcap", "mosquitto", "mosquitto_pub", "mosquitto_sub")),
    reason="needs tshark, dumpcap, mosquitto and its clients (make install)",
)
def test_live_mosquitto_traffic(tmp_path: Path) -> None:
    """Real traffic, captured on the loopback interface: what we decode is what tshark decodes, frame by frame."""
    port = free_port()
    capture = tmp_path / "live.pcapng"
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
    dumpcap = subprocess.Popen(
        ["dumpcap", "-q", "-i", "lo", "-f", f"tcp port {port}", "-w", str(capture)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        wait_for_port(port, deadline)
        time.sleep(1.0)  # dumpcap needs a moment before it captures
        base = ["-h", "127.0.0.1", "-p", str(port)]
        sub = subprocess.Popen(["mosquitto_sub", *base, "-V", "mqttv5", "-t", "live/#", "-q", "2", "-C", "4",
                                "-i", "live-sub", "-W", "15"], stdout=subprocess.PIPE)  # fmt: skip
        time.sleep(0.5)
        for args in (["-V", "mqttv311", "-q", "0", "-m", "zero"], ["-V", "mqttv5", "-q", "1", "-m", "one", "-D",
                     "publish", "user-property", "k", "v"], ["-V", "mqttv5", "-q", "2", "-r", "-m", "two"],
                     ["-V", "mqttv31", "-q", "1", "-m", "x" * 5000]):  # fmt: skip
            subprocess.run(["mosquitto_pub", *base, "-t", "live/t", *args], check=True, timeout=10)
        assert sub.wait(timeout=15) == 0
        subprocess.run(["mosquitto_pub", *base, "-t", "live/t", "-r", "-n"], check=True, timeout=10)
        time.sleep(1.0)
    finally:
        broker.terminate()
        broker.wait(timeout=10)
        dumpcap.terminate()
        dumpcap.wait(timeout=10)
    ours = our_packets(capture, (port,))
    kinds = [k for packets in ours.values() for k, _ in packets]
    assert kinds.count("CONNECT") == 6 and kinds.count("PUBLISH") >= 8
    assert ours == tshark_packets(capture, (port,))
    # And through the command, as JSON.
    result = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "mqtt"), "dump", "--json", "-p", str(port),
                             str(capture)], capture_output=True, text=True, timeout=60, env=cli_env())  # fmt: skip
    assert result.returncode == 0 and "error" not in result.stdout


def test_written_publish_roundtrip_sanity() -> None:
    # The writer itself: a conversation's frames decode to what was sent (guards the helpers above).
    conv = (
        Conversation()
        .handshake()
        .send(encode(Connect("w")))
        .send(encode(Publish("x", b"y", 0, properties=Properties())))
    )
    assert [r["type"] for r in dissect(conv.frames())] == ["CONNECT", "PUBLISH"]


def _by_frame(records: list[dict[str, Any]]) -> dict[int, list[tuple[str, str]]]:
    """Our records as tshark_packets gives its packets (MALFORMED records, which tshark has no match for, left out)."""
    frames: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for rec in records:
        if rec["type"] != "MALFORMED":
            frames[rec["frame"]].append((rec["type"], rec.get("topic") or ""))
    return dict(frames)


def _monotonic(frames: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Frames re-stamped in capture order, as a capture of reordered segments would be."""
    return [(TS0 + n * 1000, frame) for n, (_, frame) in enumerate(frames)]


@needs_tshark
def test_packets_after_a_capture_gap_keep_their_own_frames(tmp_path: Path) -> None:
    # One direction only (nothing acknowledges the hole): what follows it is held until the end of the capture,
    # and must still carry the frames it arrived in, not the last one.
    conv = Conversation().handshake()
    conv.send(encode(Connect("oneway")))
    conv.send(encode(Publish("o/0", b"first", 0)))
    conv.send(encode(Publish("o/lost", b"lost", 0)))
    for n in range(1, 10):
        conv.send(encode(Publish(f"o/{n}", b"p%d" % n, 0)))
    frames = conv.frames()
    del frames[5]  # o/lost never reached the capture
    path = tmp_path / "gap.pcap"
    path.write_bytes(pcap(frames))
    records = dissect(frames)
    assert [r["frame"] for r in records] == sorted(r["frame"] for r in records)
    assert _by_frame(records) == tshark_packets(path)
    publishes = [r for r in records if r["type"] == "PUBLISH"]
    assert [(r["topic"], r["frame"], r["ts"]) for r in publishes[1:3]] == [
        ("o/1", 6, format_ts(frames[5][0])),
        ("o/2", 7, format_ts(frames[6][0])),
    ]


@needs_tshark
def test_out_of_order_publish_comes_before_its_acknowledgement(tmp_path: Path) -> None:
    conv = Conversation().handshake()
    conv.send(encode(Connect("c")))
    conv.send(encode(ConnAck()), False)
    conv.send(encode(Publish("p/1", b"1", 1, packet_id=1)))
    conv.send(encode(Publish("p/2", b"2", 1, packet_id=2)))
    conv.send(encode(PubAck(2)), False)
    conv.send(encode(PubAck(1)), False)
    conv.send(encode(Publish("p/3", b"3", 1, packet_id=3)))
    conv.send(encode(PubAck(3)), False)
    segs = conv.segments
    p1, p2, ack2, ack1 = segs[5:9]
    # The capture has PUBLISH 2 (frame 6), its PUBACK (7), then PUBLISH 1, which came late (8), then PUBACK 1.
    frames = _monotonic(conv.frames(segments=[*segs[:5], p2, ack2, p1, ack1, *segs[9:]]))
    path = tmp_path / "ooo.pcap"
    path.write_bytes(pcap(frames))
    records = dissect(frames)
    assert [(r["type"], r.get("packet_id"), r["frame"]) for r in records[2:6]] == [
        ("PUBLISH", 2, 6), ("PUBACK", 2, 7), ("PUBLISH", 1, 8), ("PUBACK", 1, 9)
    ]  # fmt: skip
    # tshark does not decode the late segment (no reassembly out of order by default); everything else agrees.
    ours = _by_frame(records)
    assert ours.pop(8) == [("PUBLISH", "p/1")]
    assert ours == tshark_packets(path)
    stats = DumpStats()
    for rec in records:
        stats.add(rec)
    assert stats.open_flows == []
