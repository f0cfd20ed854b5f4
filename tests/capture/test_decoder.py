"""One direction's MQTT decoding: fixed headers beside the codec, gaps, re-synchronisation, streams cut short."""

from __future__ import annotations

import random

import pytest

from mqtt_cli.capture.decoder import DirectionDecoder, StreamNote
from mqtt_cli.capture.framing import NO, WAIT, YES, HeaderWalker, chain_verdict
from mqtt_cli.core import (
    Connect,
    Disconnect,
    PacketReader,
    PingReq,
    Properties,
    PubAck,
    Publish,
    RemoteProtocolError,
    Subscribe,
    Subscription,
    encode,
)


def stream_packets(version: int = 5) -> list[bytes]:
    return [
        encode(Connect("walker", protocol_version=version), version),
        encode(
            Publish(
                "a/b",
                b"x" * 300,
                1,
                packet_id=1,
                properties=Properties(content_type="t") if version == 5 else Properties(),
            ),
            version,
        ),
        encode(Subscribe(2, (Subscription("s/#", 2),)), version),
        encode(Publish("big", bytes(20000), 0), version),  # a three-byte remaining length
        encode(PingReq(), version),
        encode(PubAck(1), version),
        encode(Disconnect(), version),
    ]


@pytest.mark.parametrize("seed", range(12))
def test_walker_frames_like_the_reader_in_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    packets = stream_packets(rng.choice([4, 5]))
    data = b"".join(packets)
    cuts = sorted(rng.sample(range(1, len(data)), rng.randrange(1, 60)))
    if seed == 0:
        cuts = list(range(1, len(data)))  # one byte at a time
    walker, reader = HeaderWalker(), PacketReader(strict=False)
    heads, objs = [], []
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        heads += walker.walk(data[a:b])
        objs += reader.feed(data[a:b])
    assert len(heads) == len(objs) == len(packets)
    offsets = [sum(len(p) for p in packets[:i]) for i in range(len(packets))]
    assert [h[2] for h in heads] == offsets
    assert [h[0] for h in heads] == [p[0] for p in packets]
    assert heads[3][1] == len(packets[3]) - 4  # 1 type byte + 3 length bytes


def test_chain_verdict() -> None:
    pub = encode(Publish("a/b", b"hi", 0), 4)
    ack = encode(PubAck(7), 4)
    data = pub + ack
    assert chain_verdict(data, 0, {0}, 4) == YES  # two packets ending at the end of the data
    assert chain_verdict(data, 0, {0, len(pub)}, 4) == YES  # a packet ending on a segment boundary
    assert chain_verdict(data, 1, {0}, 4) == NO  # inside the first packet: implausible header
    assert chain_verdict(pub[:4], 0, {0}, 4) == WAIT  # the packet goes on past the data
    assert chain_verdict(b"\x62\x02\x00\x01", 0, set(), 4) == YES  # PUBREL with its required flags
    assert chain_verdict(b"\x60\x02\x00\x01", 0, set(), 4) == NO  # PUBREL without them
    assert chain_verdict(b"\x36\x05\x00\x01a\x00\x01", 0, set(), 4) == NO  # QoS 3
    assert chain_verdict(b"\xf0\x00", 0, set(), 4) == NO  # AUTH in 3.1.1
    assert chain_verdict(b"\xf0\x00", 0, set(), 5) == YES
    assert chain_verdict(b"\x40\x03\x00\x01\x00", 0, set(), 4) == NO  # a 3.1.1 PUBACK is 2 bytes
    assert chain_verdict(b"\x30\x80\x00", 0, set(), None) == NO  # a non-minimal remaining length


def decode(chunks: list[bytes | int], *, synced: bool = True, version: int | None = None) -> list[tuple]:
    """(frame, kind, detail) of every item: a chunk is a capture record's bytes, an int a gap of that size."""
    decoder = DirectionDecoder(version, synced=synced)
    items = []
    for frame, chunk in enumerate(chunks, 1):
        if isinstance(chunk, int):
            items += decoder.gap(chunk, frame * 10, frame)
        else:
            items += decoder.data(chunk, frame * 10, frame)
    items += decoder.end(999, 99)
    out = []
    for ts, frame, _first, _length, offset, obj in items:
        if isinstance(obj, StreamNote):
            out.append((frame, obj.kind, offset))
        elif isinstance(obj, RemoteProtocolError):
            out.append((frame, "error", offset))
        else:
            out.append((frame, type(obj).__name__, offset))
        assert ts == (frame * 10 if frame != 99 else 999)  # every item carries its own record's timestamp
    return out


P1 = encode(Publish("t/1", b"one", 1, packet_id=1), 4)
P2 = encode(Publish("t/2", b"two" * 20, 1, packet_id=2), 4)
P3 = encode(Publish("t/3", b"three", 1, packet_id=3), 4)


def test_packets_keep_the_record_that_completed_them() -> None:
    assert decode([P1 + P2[:10], P2[10:] + P3]) == [
        (1, "Publish", 0),
        (2, "Publish", len(P1)),
        (2, "Publish", len(P1) + len(P2)),
    ]


def test_gap_inside_a_packet_of_known_length_resumes_exactly_after_it() -> None:
    # P2's header arrived; 20 bytes of its body were lost; the rest of it and P3 follow in one record.
    lost = 20
    got = decode([P1 + P2[:10], lost, P2[10 + lost :] + P3])
    assert got == [
        (1, "Publish", 0),
        (2, "gap", len(P1) + 10),
        (3, "skipped", len(P1) + 10 + lost),
        (3, "Publish", len(P1) + len(P2)),
    ]


def test_stream_ending_right_after_a_gap_that_ends_a_packet() -> None:
    """The rest of a packet lost, then the end: the gap is reported, and nothing else (this used to raise)."""
    half = DirectionDecoder(4)
    assert half.data(b"\x30\x0a\x00\x03abc", 1, 1) == []
    (gap,) = half.gap(5, 2, 2)
    assert isinstance(gap[5], StreamNote) and gap[5].kind == "gap" and "PUBLISH" in gap[5].message
    assert half.end(3, 3) == []


def test_gap_at_a_packet_boundary_resumes_at_the_next_segment_that_chains() -> None:
    got = decode([P1, len(P2), P3, P1])
    assert got == [
        (1, "Publish", 0),
        (2, "gap", len(P1)),
        (3, "Publish", len(P1) + len(P2)),
        (4, "Publish", len(P1) + len(P2) + len(P3)),
    ]


def test_gap_swallowing_a_header_skips_to_a_provable_boundary() -> None:
    # The gap takes the end of P1 and the start of P2; the next record holds the rest of P2 (not a
    # boundary: no packet may be invented from it), then one that starts with P3.
    got = decode([P1[:5], len(P1) - 5 + 4, P2[4:], P3])
    assert ("3", "Publish") not in [(str(f), k) for f, k, _ in got]
    assert got[0] == (2, "gap", 5)
    assert got[1][1] == "skipped" and got[2] == (4, "Publish", len(P1) + len(P2))


def test_a_stream_whose_start_was_not_captured() -> None:
    # Starting inside P1: its tail is skipped, decoding starts at the record that begins with P2.
    got = decode([P1[3:], P2, P3], synced=False)
    assert got == [(1, "skipped", 0), (2, "Publish", len(P1) - 3), (3, "Publish", len(P1) - 3 + len(P2))]
    # Starting on a boundary: nothing is skipped.
    assert decode([P2, P3], synced=False) == [(1, "Publish", 0), (2, "Publish", len(P2))]


def test_a_chain_spanning_records_is_judged_when_it_ends() -> None:
    got = decode([P2[:7], P2[7:30], P2[30:] + P3], synced=False)
    assert got == [(3, "Publish", 0), (3, "Publish", len(P2))]


def test_broken_framing_is_reported_then_resynchronised() -> None:
    broken = b"\x30\xff\xff\xff\xff\x01"  # a remaining length of more than four bytes
    got = decode([P1 + broken + b"junk", b"more junk", P3])
    assert got[0] == (1, "Publish", 0)
    assert got[1] == (1, "error", len(P1))
    assert got[2][1] == "skipped"
    assert got[3] == (3, "Publish", len(P1) + len(broken) + 4 + 9)


def test_stream_cut_inside_a_packet() -> None:
    got = decode([P1, P2[:9]])
    assert got == [(1, "Publish", 0), (99, "truncated", len(P1))]


def test_version_learnt_from_connect_and_set_from_outside() -> None:
    decoder = DirectionDecoder()
    assert decoder.version is None
    decoder.data(encode(Connect("c", protocol_version=5), 5), 1, 1)
    assert decoder.version == 5
    other = DirectionDecoder()
    other.version = 5
    items = other.data(encode(PubAck(3, 0x10), 5), 1, 1)
    assert items[0][5] == PubAck(3, 0x10)
