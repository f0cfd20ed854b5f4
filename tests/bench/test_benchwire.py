"""`mqtt bench`'s work per message (core/benchwire.py): the PUBLISH packets it builds are what the core codec reads,
and what arrives is counted the same whichever way the reads cut it."""

import random

import pytest

from mqtt_cli.core.benchstats import Histogram, make_payload
from mqtt_cli.core.benchwire import Acks, Closed, Latencies, Publishes, Receiver
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import Disconnect, PubAck, PubComp, Publish, PubRec, PubRel
from mqtt_cli.core.reader import PacketReader

T0 = 1_700_000_000_000_000_000  # a send time, ns


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize(("qos", "size"), [(0, 64), (1, 20), (2, 64), (1, 300), (0, 0)])
def test_publishes_are_what_the_codec_reads(version: int, qos: int, size: int) -> None:
    packets = Publishes(b"bench/7", qos, qos == 2, version, size, 7)
    data = packets.build(3, T0) + packets.build(1, T0 + 5)  # the buffer grows, then is reused
    got = PacketReader(version).feed(data)
    assert [p.payload for p in got] == [make_payload(size, T0, 7, s) for s in range(3)] + [
        make_payload(size, T0 + 5, 7, 3)
    ]
    assert {(p.topic, p.qos, p.retain) for p in got} == {("bench/7", qos, qos == 2)}
    assert [p.packet_id for p in got] == ([1, 2, 3, 4] if qos else [None] * 4)
    assert packets.seq == 4


def test_packet_identifiers_wrap_past_65535_to_1() -> None:
    packets = Publishes(b"t", 1, False, 4, 20, 1)
    packets.pid = 65534
    got = PacketReader(4).feed(packets.build(3, T0))
    assert [p.packet_id for p in got] == [65535, 1, 2]


def _stream(version: int, qos: int, seqs: list[tuple[int, int]], sent_ns: int = T0) -> tuple[bytes, list[int]]:
    """PUBLISH packets as a broker delivers them (publisher, seq each) and their packet identifiers."""
    out = b""
    pids = []
    for i, (publisher, seq) in enumerate(seqs):
        pid = 1000 + i if qos else None
        payload = make_payload(64, sent_ns, publisher, seq)
        out += encode(Publish(f"bench/{publisher}", payload, qos, packet_id=pid), version)
        if pid is not None:
            pids.append(pid)
    return out, pids


def _counts(r: Receiver) -> tuple[int, int, int, int, int, int]:
    return r.delivered, r.samples, r.foreign, r.distinct, r.dups, r.reordered


def test_receiver_counts_distinct_duplicates_reordered_per_publisher() -> None:
    seqs = [(1, s) for s in (0, 1, 2, 2, 5, 3, 4, 4, 9000)] + [(2, 0), (1, 9001), (2, 0)]
    data, _ = _stream(4, 0, seqs)
    r = Receiver(4, Latencies())
    assert r.feed(data, T0 + 150_000, True) == b""  # QoS 0: nothing to acknowledge
    # 2 and 4 twice and publisher 2's 0 twice: duplicates; 3 after 5: reordered (as mqttload counts).
    assert _counts(r) == (12, 12, 0, 9, 3, 1)
    assert r.kernel_samples == 12


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [1, 2])
def test_receiver_acknowledges_and_any_cut_gives_the_same(version: int, qos: int) -> None:
    seqs = [(3, s) for s in range(6)]
    data, pids = _stream(version, qos, seqs)
    data += encode(PubRel(77), version) + encode(Publish("other", b"short", qos, packet_id=9), version)
    ack = PubAck if qos == 1 else PubRec
    want_acks = [ack(p) for p in pids] + [PubComp(77), ack(9)]
    whole = Receiver(version, Latencies())
    acks = whole.feed(data, T0 + 80_000, False)
    assert PacketReader(version).feed(acks) == want_acks
    assert _counts(whole) == (7, 6, 1, 6, 0, 0) and whole.kernel_samples == 0
    rng = random.Random(1)
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 12)))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        r = Receiver(version, Latencies())
        acks = b"".join(r.feed(part, T0 + 80_000, False) for part in parts)
        assert PacketReader(version).feed(acks) == want_acks
        assert _counts(r) == _counts(whole) and r.rest == b""


def test_receiver_long_payloads_and_broken_streams() -> None:
    big = encode(Publish("t", make_payload(20_000, T0, 1, 0), 1, packet_id=5), 4)  # a 3-byte remaining length
    r = Receiver(4, Latencies())
    assert r.feed(big[:2], T0, True) == b"" and r.feed(big[2:3], T0, True) == b""
    assert r.feed(big[3:], T0 + 2_000_000, True) == encode(PubAck(5), 4)
    assert r.latencies.max_us == 2000
    with pytest.raises(Closed):
        Receiver(4, Latencies()).feed(encode(Disconnect(), 4), T0, True)
    with pytest.raises(Closed):
        Receiver(4, Latencies()).feed(b"\x30\xff\xff\xff\xff\x01", T0, True)


def test_latencies_add_up_to_the_histogram_of_every_sample() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(7, 2)) for _ in range(5_000)] + [0, 127, 128, 10**12]
    direct = Histogram()
    absorbed = Histogram()
    lat = Latencies()
    for i, v in enumerate(values):
        direct.record(v)
        lat.record(v)
        if i % 1000 == 999:  # the figures read now and then while measuring
            absorbed.absorb(lat)
    absorbed.absorb(lat)
    assert absorbed == direct
    assert lat.total == 0 and not any(lat.counts)


def test_receiver_samples_are_latencies() -> None:
    latencies_us = [0, 1, 127, 128, 1234, 99_999, 5_000_000, 3]
    now = T0 + 10**10
    data = b"".join(
        encode(Publish("t", make_payload(64, now - us * 1000 - 999, 1, seq)), 4) for seq, us in enumerate(latencies_us)
    )
    lat = Latencies()
    Receiver(4, lat).feed(data + encode(Publish("t", make_payload(64, now + 5000, 1, 99)), 4), now, True)
    got, want = Histogram(), Histogram()
    got.absorb(lat)
    for us in [*latencies_us, 0]:  # a send time after the arrival (clocks apart) counts as 0
        want.record(us)
    assert got == want


def test_acks_count_completions_and_answer_pubrec() -> None:
    data = b"".join(encode(p, 4) for p in (PubAck(1), PubRec(2), PubComp(3), PubAck(4)))
    acks = Acks()
    assert acks.feed(data[:5]) == 1 and acks.replies == b""
    assert acks.feed(data[5:]) == 2 and acks.replies == encode(PubRel(2), 4)
    with pytest.raises(Closed):
        acks.feed(encode(Disconnect(), 4))


@pytest.mark.parametrize(
    "payload",
    [
        b'{"temperature": 21.5, "unit": "C", "device": "kitchen"}',  # JSON: its first bytes as a time are absurd
        bytes(range(20)),  # exactly 20 bytes, not a time of this hour
        make_payload(20, T0, 1, 1) + b"x" * 30,  # a send time of now, but not the bench's padding
    ],
    ids=["json", "20-bytes", "not-padded"],
)
def test_another_publishers_payload_is_foreign_not_a_latency_sample(payload: bytes) -> None:
    data = encode(Publish("bench/1", payload, 0), 4) + _stream(4, 0, [(1, 0)])[0]
    latencies = Latencies()
    r = Receiver(4, latencies)
    r.feed(data, T0 + 90_000, True)
    assert _counts(r) == (2, 1, 1, 1, 0, 0)
    assert (latencies.total, latencies.min_us, latencies.max_us) == (1, 90, 90)


def test_a_send_time_slightly_after_the_receive_time_is_a_sample_of_zero() -> None:
    data, _ = _stream(4, 0, [(1, 0)], sent_ns=T0 + 5_000)  # the wall clock stepped back by 5 us
    latencies = Latencies()
    r = Receiver(4, latencies)
    r.feed(data, T0, True)
    assert (r.samples, r.foreign, latencies.max_us) == (1, 0, 0)
