"""TCP reassembly of one direction: order, retransmissions, overlaps, wrap-around, gaps."""

from __future__ import annotations

import random

from mqtt_cli.capture.tcp import MAX_PENDING_SEGMENTS, HalfStream, Piece

SYN, FIN, RST, ACK = 0x02, 0x01, 0x04, 0x10


def bare(items: list[Piece]) -> list[bytes | int]:
    """The pieces without the records they came in."""
    return [piece for piece, _, _ in items]


def joined(items: list[Piece]) -> bytes:
    """The delivered bytes, a lost byte shown as '?'."""
    return b"".join(i if isinstance(i, bytes) else b"?" * i for i in bare(items))


def test_in_order_after_syn() -> None:
    half = HalfStream()
    assert bare(half.segment(99, SYN, b"")) == []
    assert half.start_seen
    assert bare(half.segment(100, ACK, b"abc")) == [b"abc"]
    assert bare(half.segment(103, ACK, b"de")) == [b"de"]
    assert half.offset == 5


def test_out_of_order_is_held_until_the_hole_fills() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    assert bare(half.segment(4, ACK, b"def")) == []
    assert bare(half.segment(7, ACK, b"gh")) == []
    assert bare(half.segment(1, ACK, b"abc")) == [b"abc", b"def", b"gh"]
    assert not half.pending


def test_retransmissions_and_overlaps_deliver_each_byte_once() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    out = half.segment(1, ACK, b"abcd")
    out += half.segment(1, ACK, b"abcd")  # retransmission
    out += half.segment(3, ACK, b"cdEF")  # overlaps the end of what was delivered
    out += half.segment(9, ACK, b"jk")  # ahead: held
    out += half.segment(8, ACK, b"XYZ")  # overlaps the held segment: first copy wins there
    out += half.segment(7, ACK, b"g")
    assert joined(out) == b"abcdEFgXjk"


def test_random_segmentation_order_and_duplicates() -> None:
    rng = random.Random(5)
    data = bytes(rng.randrange(256) for _ in range(5000))
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(data)), 60))
        pieces = [(a, data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        pieces += rng.sample(pieces, 15)  # retransmissions
        first = pieces[0]
        rest = pieces[1:]
        rng.shuffle(rest)
        half = HalfStream()
        half.segment(999, SYN, b"")
        out = half.segment(1000 + first[0], ACK, first[1])
        for at, piece in rest:
            out += half.segment(1000 + at, ACK, piece)
        assert joined(out) == data


def test_sequence_numbers_wrap_around() -> None:
    half = HalfStream()
    half.segment(0xFFFFFFF0, SYN, b"")
    out = half.segment(0xFFFFFFF1, ACK, b"x" * 20)
    out += half.segment(5, ACK, b"y")
    assert joined(out) == b"x" * 20 + b"y"
    assert half.offset == 21


def test_no_syn_starts_where_the_capture_starts() -> None:
    half = HalfStream()
    assert bare(half.segment(5000, ACK, b"mid")) == [b"mid"]
    assert not half.start_seen


def test_gap_is_declared_when_the_peer_acknowledged_the_missing_bytes() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    half.segment(1, ACK, b"aaaa")
    assert bare(half.segment(9, ACK, b"cccc")) == []  # bytes 5..8 were not captured
    assert bare(half.peer_ack(5)) == []  # acknowledges only what we have: no gap
    assert bare(half.peer_ack(13)) == []  # once: could be capture reordering
    assert bare(half.peer_ack(13)) == [4, b"cccc"]  # twice: the peer has them, the capture never will


def test_gap_is_declared_when_too_much_waits_behind_a_hole() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    out: list[Piece] = []
    for n in range(MAX_PENDING_SEGMENTS + 1):
        out += half.segment(11 + n, ACK, b"z")  # bytes 1..10 never come
    assert out[0][0] == 10
    assert joined(out[1:]) == b"z" * (MAX_PENDING_SEGMENTS + 1)


def test_flush_delivers_what_is_held_with_its_gaps() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    half.segment(1, ACK, b"ab")
    half.segment(6, ACK, b"fg")
    half.segment(10, ACK, b"j")
    assert bare(half.flush()) == [3, b"fg", 2, b"j"]


def test_snap_length_cut_is_a_gap_inside_the_segment() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    assert bare(half.segment(1, ACK, b"abc", missing=5)) == [b"abc", 5]
    assert bare(half.segment(9, ACK, b"ij")) == [b"ij"]


def test_fin_and_rst_end_the_direction() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"")
    half.segment(4, FIN | ACK, b"d")  # the FIN arrives before the bytes ahead of it
    assert not half.finished
    half.segment(1, ACK, b"abc")
    assert half.finished
    other = HalfStream()
    other.segment(7, ACK, b"x")
    other.segment(8, RST, b"")
    assert other.finished


def test_held_data_keeps_the_record_it_came_in() -> None:
    half = HalfStream()
    half.segment(0, SYN, b"", ts=10, frame=1)
    half.segment(1, ACK, b"ab", ts=20, frame=2)
    assert half.segment(6, ACK, b"fg", ts=30, frame=3) == []  # bytes 3..5 not there yet
    assert half.segment(9, ACK, b"j", ts=40, frame=4) == []
    # The late bytes fill the hole: each piece comes with its own record, not the one that released it.
    assert half.segment(3, ACK, b"cde", ts=50, frame=5) == [(b"cde", 50, 5), (b"fg", 30, 3)]
    assert half.peer_ack(12) == [] and half.peer_ack(12) == [(1, 40, 4), (b"j", 40, 4)]  # a gap: the record after it
