"""Capture files: pcap (µs/ns, either byte order), pcapng (byte orders, interfaces, block kinds), compression,
and what is not a capture or is cut short."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import struct

import pytest

from mqtt_cli.capture import CaptureSource, CorruptCapture, NotACapture

from .helpers import TS0, read_capture
from .pcapwriter import ETHERNET, RAW, SLL2, Interface, pcap, pcapng

FRAMES = [(TS0 + 123_456_789, b"\x01" * 60), (TS0 + 2_000_000_001, b"\x02" * 70), (TS0 + 3_999_999_999, b"\x03" * 80)]


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("nanos", [False, True], ids=["usec", "nsec"])
def test_pcap_byte_orders_and_resolutions(big_endian: bool, nanos: bool) -> None:
    fmt, records = read_capture(pcap(FRAMES, RAW, nanos=nanos, big_endian=big_endian))
    assert fmt == "pcap"
    assert [r[1] for r in records] == [RAW] * 3
    assert [r[2] for r in records] == [f for _, f in FRAMES]
    assert [r[3] for r in records] == [1, 2, 3]
    expected = [ts if nanos else ts // 1000 * 1000 for ts, _ in FRAMES]  # microseconds lose the last digits
    assert [r[0] for r in records] == expected


def test_modified_pcap_has_longer_record_headers() -> None:
    head = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, ETHERNET)
    body = b"".join(struct.pack("<IIII", 5, 6, len(f), len(f)) + b"\x00" * 8 + f for _, f in FRAMES)
    _, records = read_capture(head + body)
    assert [r[2] for r in records] == [f for _, f in FRAMES]
    assert records[0][0] == 5_000_006_000


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
def test_pcapng_interfaces_with_their_own_link_types_and_resolutions(big_endian: bool) -> None:
    interfaces = [Interface(ETHERNET), Interface(RAW, tsresol=9), Interface(SLL2, tsresol=0x80 | 20)]
    packets = [(0, FRAMES[0][0], FRAMES[0][1]), (1, FRAMES[1][0], FRAMES[1][1]), (2, FRAMES[2][0], FRAMES[2][1])]
    fmt, records = read_capture(pcapng(packets, interfaces, big_endian=big_endian))
    assert fmt == "pcapng"
    assert [(r[1], r[2], r[3]) for r in records] == [
        (ETHERNET, FRAMES[0][1], 1), (RAW, FRAMES[1][1], 2), (SLL2, FRAMES[2][1], 3)
    ]  # fmt: skip
    assert records[0][0] == FRAMES[0][0] // 1000 * 1000  # default resolution: microseconds
    assert records[1][0] == FRAMES[1][0]  # nanoseconds
    assert abs(records[2][0] - FRAMES[2][0]) < 1000  # 2^-20 s ticks: within a microsecond


def test_pcapng_simple_packet_blocks_have_no_timestamp() -> None:
    _, records = read_capture(pcapng([(0, 0, f) for _, f in FRAMES], [Interface(RAW)], simple=True))
    assert [(r[0], r[1], r[2]) for r in records] == [(None, RAW, f) for _, f in FRAMES]


def test_pcapng_several_sections_restart_interfaces() -> None:
    first = pcapng([(0, FRAMES[0][0], FRAMES[0][1])], [Interface(ETHERNET)])
    second = pcapng([(0, FRAMES[1][0], FRAMES[1][1])], [Interface(RAW)], big_endian=True)
    _, records = read_capture(first + second)
    assert [(r[1], r[3]) for r in records] == [(ETHERNET, 1), (RAW, 2)]


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bzip2", "xz"])
def test_compressed_captures_are_read_by_content(compress: object) -> None:
    data = compress(pcap(FRAMES, RAW))  # type: ignore[operator]
    fmt, records = read_capture(data, "capture.bin")
    assert fmt == "pcap"
    assert [r[2] for r in records] == [f for _, f in FRAMES]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "is empty"),
        (b"GET / HTTP/1.1\r\n", "not a capture file"),
        (gzip.compress(b"hello, not a capture"), "gzip-compressed content starts with 68 65 6c 6c"),
        (b"\x28\xb5\x2f\xfd" + b"\x00" * 20, "zstd-compressed"),
    ],
    ids=["empty", "text", "gzip-of-text", "zstd"],
)
def test_not_a_capture(data: bytes, message: str) -> None:
    with pytest.raises(NotACapture, match=message):
        read_capture(data)


def truncations() -> list[tuple[str, bytes, int]]:
    whole = pcap(FRAMES, RAW)
    ng = pcapng([(0, ts, f) for ts, f in FRAMES], [Interface(RAW)], extra_blocks=False)
    return [
        ("pcap file header", whole[:20], 0),
        ("pcap record header", whole[: 24 + 16 + 60 + 5], 1),
        ("pcap record data", whole[:-10], 2),
        ("pcapng block", ng[:-7], 2),
        ("gzip stream", gzip.compress(whole)[:-30], -1),
    ]


@pytest.mark.parametrize(("what", "data", "readable"), truncations(), ids=[t[0] for t in truncations()])
def test_truncated_captures_give_what_is_readable_then_fail(what: str, data: bytes, readable: int) -> None:
    got = []
    with pytest.raises(CorruptCapture, match=r"truncated|damaged"):
        # The same path as files, records pulled one by one.
        for record in CaptureSource(stream=io.BytesIO(data), name="cut.pcap").records():
            got.append(record)
    if readable >= 0:
        assert len(got) == readable


def test_corrupt_record_length_is_reported_not_waited_for() -> None:
    data = pcap(FRAMES, RAW)
    bad = data[:24] + struct.pack("<IIII", 1, 2, 0xFFFFFF00, 60) + data[40:]
    with pytest.raises(CorruptCapture, match=r"record 1 .* claims 4294967040 bytes"):
        read_capture(bad)


def test_pcapng_block_lengths_must_agree() -> None:
    ng = bytearray(pcapng([(0, ts, f) for ts, f in FRAMES], [Interface(RAW)], extra_blocks=False))
    ng[-4:] = struct.pack("<I", 999)
    with pytest.raises(CorruptCapture, match=r"says .* bytes at its start"):
        read_capture(bytes(ng))


def test_pcapng_packet_on_undescribed_interface() -> None:
    ng = pcapng([(0, TS0, b"\x45" + b"\x00" * 39)], [Interface(RAW)], extra_blocks=False)
    # the enhanced packet block follows the section header (28 + 8 bytes of options) and one interface block
    at = ng.index(struct.pack("<I", 6))
    patched = ng[: at + 8] + struct.pack("<I", 3) + ng[at + 12 :]
    with pytest.raises(CorruptCapture, match="interface 3"):
        read_capture(patched)
