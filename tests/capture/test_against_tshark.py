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

import pytest

from mqtt_cli.core import Connect, Properties, Publish, encode

from ..conftest import REPO_ROOT, cli_env
from .helpers import dissect, read_capture, session
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
