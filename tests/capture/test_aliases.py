"""MQTT 5.0 topic aliases are resolved per connection and per direction wherever `mqtt dump` counts or matches
topics: `--stats`, `--topic`, the one-line view (aliases.TopicAliases, one class for all of them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mqtt_cli.capture.filters import RecordFilter
from mqtt_cli.capture.stats import DumpStats
from mqtt_cli.core import ConnAck, Connect, Properties, Publish, encode

from .helpers import dissect
from .loopback import PUB_LINES, pub_lines_capture
from .pcapwriter import Conversation, pcap


def _aliased(topic: str, alias: int, payload: bytes = b"x") -> bytes:
    return encode(Publish(topic, payload, 0, properties=Properties(topic_alias=alias)), 5)


def _alias_conversations() -> list[tuple[int, bytes]]:
    """Connection a: the client sets alias 1 to a/one and the broker alias 1 to down/x (each direction its own);
    connection b: alias 1 used before it is set (the capture began late), then set to b/two."""
    ts = 1_700_000_000_000_000_000
    a = Conversation(cport=40001, ts=ts).handshake()
    a.send(encode(Connect("a", protocol_version=5), 5))
    a.send(encode(ConnAck(), 5), False)
    a.send(_aliased("a/one", 1))
    a.send(_aliased("down/x", 1), False)
    a.send(_aliased("", 1))
    a.send(_aliased("", 1), False)
    a.send(_aliased("", 1))
    b = Conversation(cport=40002, ts=ts + 1000).handshake()
    b.send(encode(Connect("b", protocol_version=5), 5))
    b.send(encode(ConnAck(), 5), False)
    b.send(_aliased("", 1))
    b.send(_aliased("b/two", 1))
    b.send(_aliased("", 1))
    return sorted(a.close().frames() + b.close().frames(), key=lambda f: f[0])


def test_stats_and_filters_resolve_aliases_per_connection_and_direction() -> None:
    records = dissect(_alias_conversations())
    stats = DumpStats()
    for rec in records:
        stats.add(rec)
    assert dict(stats.by_topic) == {"a/one": 3, "down/x": 2, "b/two": 2, None: 1}
    # Records keep the wire's topic: empty where the alias stands for it.
    assert [r["topic"] for r in records if r["type"] == "PUBLISH"].count("") == 5
    keep = RecordFilter(topics=["a/#"])
    assert sum(1 for rec in records if keep(rec)) == 3
    # A filter on the type only still learns aliases from the records it drops (the --topic filter runs first).
    both = RecordFilter(types=["PUBLISH"], clients=["b"], topics=["b/two"])
    assert sum(1 for rec in records if both(rec)) == 2


def test_dump_stats_names_an_alias_set_before_the_capture(tmp_path: Path) -> None:
    path = tmp_path / "aliases.pcap"
    path.write_bytes(pcap(_alias_conversations()))
    out = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "dump", "--stats", "--quiet", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {line.split("│")[0].strip(): line.split("│")[1].strip() for line in out.stdout.splitlines() if "│" in line}
    assert rows["a/one"] == "3" and rows["down/x"] == "2" and rows["b/two"] == "2"
    assert rows["(unknown topic alias)"] == "1" and "(empty)" not in rows
    lines = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "dump", str(path)], capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    assert sum("down/x via alias 1" in line for line in lines) == 1
    assert sum("(unknown alias) via alias 1" in line for line in lines) == 1


@pytest.fixture(scope="module")
def pub_lines(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    return pub_lines_capture(tmp_path_factory.mktemp("pub-lines"))


@pytest.mark.slow
@pytest.mark.interop
def test_dump_stats_of_mqtt_pub_lines_counts_every_line_under_its_topic(pub_lines: tuple[Path, int]) -> None:
    path, port = pub_lines
    out = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "dump", "--stats", "--quiet", "-p", str(port), str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    topics = out.stdout.split("Topics (PUBLISH)", 1)[1].split("QoS flows", 1)[0]
    rows = {line.split("│")[0].strip(): int(line.split("│")[1]) for line in topics.splitlines() if "│" in line}
    assert rows == PUB_LINES
    # The wire really carried aliases: most PUBLISH packets have an empty topic.
    wire = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "dump", "--json", "-p", str(port), "--type", "PUBLISH", str(path)],
        capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert wire.count('"topic":""') == sum(PUB_LINES.values()) - len(PUB_LINES)
    for topic, count in PUB_LINES.items():
        found = subprocess.run(
            [sys.executable, "-m", "mqtt_cli", "dump", "--quiet", "--stats", "-p", str(port), "--topic", topic,
             str(path)],
            capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        assert f"{topic} │ {count:>7}" in found or f"{topic} │ {count}" in found, found
