"""BrokerCore.receive with a batch: a read's packets handled in parts, the output of each part available before
the next (net/server.py sends it in between), and the same bytes in the same order as without batches."""

from __future__ import annotations

import random

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import Connect, Disconnect, PingReq, PubAck, Publish, PubRec, PubRel, Subscribe, Subscription
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.core.server import ServerConnection


def _connected(broker: BrokerCore, client_id: str, version: int = 4) -> ServerConnection:
    conn = broker.open(f"127.0.0.1:{len(broker.connections) + 1}", 0.0)
    broker.receive(conn, encode(Connect(client_id, protocol_version=version), version), 0.0)
    conn.out.clear()
    return conn


def _pair(version: int = 4, max_inflight: int = 0) -> tuple[BrokerCore, ServerConnection, ServerConnection]:
    """A broker with a publisher and a subscriber of `t/#` at QoS 2 (its window: `max_inflight`, 0 unlimited)."""
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=max_inflight, max_queued_messages=0)))
    pub = _connected(broker, "pub", version)
    sub = _connected(broker, "sub", version)
    broker.receive(sub, encode(Subscribe(1, (Subscription("t/#", 2),)), version), 0.0)
    sub.out.clear()
    return broker, pub, sub


def _publishes(n: int, qos: int, first_id: int = 1) -> bytes:
    return b"".join(
        encode(Publish(f"t/{i}", b"m%d" % i, qos, packet_id=first_id + i if qos else None), 4) for i in range(n)
    )


def _taken(conn: ServerConnection) -> list[object]:
    data = bytes(conn.out)
    conn.out.clear()
    return PacketReader(4).feed(data)


def test_a_read_of_qos1_publishes_is_handled_in_batches_of_answered_packets() -> None:
    broker, pub, sub = _pair()
    broker.receive(pub, _publishes(70, 1), 0.0, 32)
    assert _taken(pub) == [PubAck(i) for i in range(1, 33)]
    assert [p.topic for p in _taken(sub)] == [f"t/{i}" for i in range(32)]
    assert pub.backlog is not None
    broker.receive_rest(pub, 0.0, 32)
    assert _taken(pub) == [PubAck(i) for i in range(33, 65)]
    assert len(_taken(sub)) == 32
    broker.receive_rest(pub, 0.0, 32)
    assert _taken(pub) == [PubAck(i) for i in range(65, 71)]
    assert [p.topic for p in _taken(sub)] == [f"t/{i}" for i in range(64, 70)]
    assert pub.backlog is None


def test_qos0_publishes_do_not_count_towards_a_batch() -> None:
    broker, pub, sub = _pair()
    broker.receive(pub, _publishes(100, 0) + _publishes(40, 1), 0.0, 32)
    assert len(_taken(sub)) == 132  # the 100 QoS 0 and the first 32 QoS 1
    assert len(_taken(pub)) == 32
    broker.receive_rest(pub, 0.0, 32)
    assert len(_taken(pub)) == 8
    assert pub.backlog is None


def test_a_batch_that_ends_with_the_read_leaves_no_backlog() -> None:
    broker, pub, _ = _pair()
    broker.receive(pub, _publishes(32, 1), 0.0, 32)
    assert pub.backlog is None
    assert len(_taken(pub)) == 32


def test_a_read_while_a_backlog_is_left_handles_the_backlog_first() -> None:
    broker, pub, _ = _pair()
    broker.receive(pub, _publishes(40, 1), 0.0, 32)
    broker.receive(pub, _publishes(1, 1, first_id=100), 0.0, 32)
    assert _taken(pub) == [PubAck(i) for i in range(1, 41)] + [PubAck(100)]
    assert pub.backlog is None


def test_a_disconnect_in_a_batch_drops_what_follows_it() -> None:
    broker, pub, sub = _pair()
    broker.receive(pub, _publishes(10, 1) + encode(Disconnect(), 4) + _publishes(40, 1, first_id=50), 0.0, 32)
    assert pub.closed and pub.backlog is None
    assert len(_taken(sub)) == 10


def test_a_connection_lost_with_a_backlog_drops_it() -> None:
    broker, pub, sub = _pair()
    broker.receive(pub, _publishes(50, 1), 0.0, 32)
    assert pub.backlog is not None
    broker.connection_lost(pub, 0.0)
    assert pub.backlog is None
    broker.receive_rest(pub, 0.0, 32)
    assert len(_taken(sub)) == 32


@pytest.mark.parametrize("seed", range(12))
def test_batches_give_the_same_bytes_as_one_pass(seed: int) -> None:
    """A random mix of QoS 0/1/2 PUBLISH, PUBREL, PINGREQ from a publisher and PUBACK/PUBREC from a subscriber,
    in random reads, handled with random batch sizes: every connection gets exactly what one pass gives it. With a
    window of 20 towards the subscriber, its acknowledgements send what was queued."""
    rng = random.Random(seed)
    version = rng.choice((4, 5))
    window = rng.choice((0, 20))
    reads: list[tuple[str, bytes]] = []
    unreleased: list[int] = []
    next_id = 1
    for _ in range(rng.randint(5, 15)):
        parts = []
        for _ in range(rng.randint(1, 120)):
            kind = rng.random()
            if kind < 0.2:
                parts.append(encode(Publish("t/x", b"zero", 0), version))
            elif kind < 0.85:
                qos = rng.choice((1, 2))
                parts.append(encode(Publish(f"t/{next_id % 7}", b"p%d" % next_id, qos, packet_id=next_id), version))
                if qos == 2:
                    unreleased.append(next_id)
                next_id += 1
            elif kind < 0.95 and unreleased:
                parts.append(encode(PubRel(unreleased.pop(0)), version))
            else:
                parts.append(encode(PingReq(), version))
        reads.append(("pub", b"".join(parts)))
        reads.append(("sub", b""))  # the subscriber's answers to what it got so far (filled in below)
    outputs = []
    for batch in (0, rng.randint(1, 40)):
        broker, pub, sub = _pair(version, window)
        got: dict[str, bytearray] = {"pub": bytearray(), "sub": bytearray()}
        sub_reader = PacketReader(version)
        answers: list[bytes] = []

        def take(sub: ServerConnection = sub, got: dict[str, bytearray] = got, reader: PacketReader = sub_reader,
                 answers: list[bytes] = answers, pub: ServerConnection = pub) -> None:  # fmt: skip
            """What both got so far; the subscriber's answers to it (PUBACK for QoS 1, PUBREC for QoS 2) queued."""
            for packet in reader.feed(bytes(sub.out)):
                if isinstance(packet, Publish) and packet.qos:
                    ack = PubAck if packet.qos == 1 else PubRec
                    answers.append(encode(ack(packet.packet_id or 0), version))
            got["sub"] += sub.out
            got["pub"] += pub.out
            sub.out.clear()
            pub.out.clear()

        for who, data in reads:
            conn = pub if who == "pub" else sub
            if who == "sub":
                take()
                data = b"".join(answers)
                answers.clear()
                if not data:
                    continue
            broker.receive(conn, data, 1.0, batch)
            while conn.backlog is not None:
                take()
                broker.receive_rest(conn, 1.0, batch)
        take()
        outputs.append(got)
    assert outputs[0] == outputs[1]
    assert outputs[0]["pub"] and outputs[0]["sub"]
