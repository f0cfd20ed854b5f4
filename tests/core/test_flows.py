"""QoS 1/2 flows: identifiers, transitions, receive maximum, re-sending, exactly-once on the receiving side."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqtt_cli.core.errors import LocalProtocolError, ProtocolError
from mqtt_cli.core.flows import FlowState, IncomingFlows, OutgoingFlows
from mqtt_cli.core.packets import PubAck, PubComp, Publish, PubRec, PubRel


def test_qos1_flow() -> None:
    flows = OutgoingFlows()
    sent = flows.send(Publish("a", b"1", 1), context="m1")
    assert sent == Publish("a", b"1", 1, packet_id=1)
    entry, pubrel = flows.acknowledge(PubAck(1))
    assert entry.context == "m1" and pubrel is None and len(flows) == 0


def test_qos2_flow_and_identifier_reuse() -> None:
    flows = OutgoingFlows()
    sent = flows.send(Publish("a", b"2", 2))
    _, pubrel = flows.acknowledge(PubRec(sent.packet_id))
    assert pubrel == PubRel(sent.packet_id)
    assert flows.get(sent.packet_id).state is FlowState.AWAIT_PUBCOMP  # type: ignore[union-attr]
    entry, again = flows.acknowledge(PubComp(sent.packet_id))
    assert again is None and entry.state is FlowState.AWAIT_PUBCOMP and len(flows) == 0


def test_pubrec_failure_ends_the_flow() -> None:
    flows = OutgoingFlows()
    sent = flows.send(Publish("a", b"2", 2))
    _, pubrel = flows.acknowledge(PubRec(sent.packet_id, 0x80))
    assert pubrel is None and len(flows) == 0


@pytest.mark.parametrize(
    ("qos", "acks", "reason"),
    [
        (1, [PubRec], 0x82),  # PUBREC for QoS 1
        (1, [PubComp], 0x82),
        (2, [PubAck], 0x82),  # PUBACK for QoS 2
        (2, [PubComp], 0x82),  # PUBCOMP before PUBREC
        (2, [PubRec, PubRec], 0x82),
        (1, [PubAck, PubAck], 0x82),  # unknown identifier by then
        (2, [PubRec, PubComp, PubComp], 0x92),
    ],
)
def test_illegal_pairs_raise_and_keep_state(qos: int, acks: list[type], reason: int) -> None:
    flows = OutgoingFlows()
    flows.send(Publish("a", b"x", qos))
    *good, bad = acks
    for ack in good:
        flows.acknowledge(ack(1))
    before = [(e.publish, e.state) for e in flows.entries()]
    with pytest.raises(ProtocolError) as info:
        flows.acknowledge(bad(1))
    assert info.value.reason_code == reason
    assert [(e.publish, e.state) for e in flows.entries()] == before


def test_receive_maximum_closes_the_window() -> None:
    flows = OutgoingFlows(receive_maximum=2)
    flows.send(Publish("a", b"", 1))
    flows.send(Publish("a", b"", 2))
    assert not flows.window_open
    with pytest.raises(LocalProtocolError):
        flows.send(Publish("a", b"", 1))
    flows.acknowledge(PubAck(1))
    assert flows.window_open


def test_unlimited_window() -> None:
    flows = OutgoingFlows(receive_maximum=0)
    for _ in range(70000 - 5000):
        flows.send(Publish("a", b"", 1))
    assert flows.window_open and len(flows) == 65000


def test_identifiers_wrap_and_skip_those_in_use() -> None:
    flows = OutgoingFlows(receive_maximum=None)
    first = flows.send(Publish("a", b"", 1))  # 1 stays in flight
    for _ in range(65534):
        sent = flows.send(Publish("a", b"", 1))
        flows.acknowledge(PubAck(sent.packet_id))
    again = flows.send(Publish("a", b"", 1))
    assert first.packet_id == 1 and again.packet_id == 2  # wrapped past 65535 and skipped 1


def test_resend_after_reconnect() -> None:
    flows = OutgoingFlows()
    flows.send(Publish("a", b"1", 1))
    flows.send(Publish("b", b"2", 2))
    flows.send(Publish("c", b"3", 2))
    flows.acknowledge(PubRec(3))
    assert flows.resend() == [
        Publish("a", b"1", 1, dup=True, packet_id=1),
        Publish("b", b"2", 2, dup=True, packet_id=2),
        PubRel(3),
    ]


def test_incoming_exactly_once() -> None:
    flows = IncomingFlows()
    p = Publish("a", b"x", 2, packet_id=7)
    assert flows.publish_received(p) is True
    assert flows.publish_received(Publish("a", b"x", 2, dup=True, packet_id=7)) is False
    assert flows.release(PubRel(7)) == PubComp(7)
    assert flows.release(PubRel(7)) == PubComp(7, 0x92)
    assert flows.release(PubRel(7), version=4) == PubComp(7)
    assert flows.publish_received(p) is True  # a new message may reuse the identifier


@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.booleans()), max_size=60))
def test_flows_against_a_model(ops: list[tuple[int, bool]]) -> None:
    """Random sends and in-order completions: identifiers are unique among those in flight, never 0."""
    flows = OutgoingFlows(receive_maximum=10)
    model: dict[int, int] = {}
    for qos, complete in ops:
        if flows.window_open:
            sent = flows.send(Publish("t", b"", qos))
            assert sent.packet_id not in model and 0 < sent.packet_id < 65536
            model[sent.packet_id] = qos
        if complete and model:
            pid, q = next(iter(model.items()))
            if q == 1:
                flows.acknowledge(PubAck(pid))
            else:
                flows.acknowledge(PubRec(pid))
                flows.acknowledge(PubComp(pid))
            del model[pid]
        assert len(flows) == len(model) <= 10
