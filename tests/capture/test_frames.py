"""Frames to TCP segments: every link layer, IPv4 and IPv6, and the frames that hold no usable segment."""

from __future__ import annotations

import struct

import pytest

from mqtt_cli.capture.frames import decode_frame, flow_endpoints, reverse_flow

from .pcapwriter import ACK, ETHERNET, LOOP, NULL, PSH, RAW, SLL, SLL2, ethernet, ip, ipv4, ipv6, null, sll, sll2, tcp

PAYLOAD = b"\x30\x05\x00\x01a\x68\x69"


def segment(src: str = "10.0.0.1", dst: str = "10.0.0.2") -> bytes:
    return ip(src, dst, tcp(51000, 1883, 1234, 99, PSH | ACK, PAYLOAD))


LINKS = [
    ("ethernet", ETHERNET, lambda p: ethernet(p)),
    ("vlan", ETHERNET, lambda p: ethernet(p, vlans=[42])),
    ("qinq", ETHERNET, lambda p: ethernet(p, vlans=[7, 42])),
    ("sll", SLL, sll),
    ("sll2", SLL2, sll2),
    ("null-le", NULL, null),
    ("null-be", NULL, lambda p: null(p, big_endian=True)),
    ("loop", LOOP, lambda p: null(p, big_endian=True, af_inet6=24)),
    ("raw", RAW, lambda p: p),
    ("raw-12", 12, lambda p: p),
    ("raw-14", 14, lambda p: p),
]


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize(("name", "linktype", "wrap"), LINKS, ids=[link[0] for link in LINKS])
def test_every_link_layer_and_ip_version(name: str, linktype: int, wrap: object, v6: bool) -> None:
    src, dst = ("2001:db8::1", "2001:db8::2") if v6 else ("10.0.0.1", "10.0.0.2")
    seg = decode_frame(linktype, wrap(segment(src, dst)))  # type: ignore[operator]
    assert seg is not None
    flow, seq, ack, flags, payload, missing = seg
    assert (seq, ack, flags, payload, missing) == (1234, 99, PSH | ACK, PAYLOAD, 0)
    s, d, sport, dport = flow_endpoints(flow)
    if v6:
        assert (s, d) == ("[2001:db8::1]:51000", "[2001:db8::2]:1883")
    else:
        assert (s, d) == ("10.0.0.1:51000", "10.0.0.2:1883")
    assert (sport, dport) == (51000, 1883)
    assert flow_endpoints(reverse_flow(flow))[:2] == (d, s)


@pytest.mark.parametrize("linktype", [228, 229])
def test_raw_ipv4_and_ipv6_link_types(linktype: int) -> None:
    packet = segment() if linktype == 228 else segment("::1", "::1")
    assert decode_frame(linktype, packet) is not None


def test_ipv6_extension_headers_are_walked() -> None:
    packet = ipv6("::1", "::2", tcp(1, 1883, 5, 6, ACK, PAYLOAD), hop_by_hop=True)
    seg = decode_frame(RAW, packet)
    assert seg is not None and seg[4] == PAYLOAD


def test_ethernet_padding_is_not_payload() -> None:
    frame = ethernet(ipv4("1.1.1.1", "2.2.2.2", tcp(1, 1883, 5, 6, ACK, b"\xe0")))
    assert len(frame) == 60  # padded to the Ethernet minimum
    seg = decode_frame(ETHERNET, frame)
    assert seg is not None and seg[4] == b"\xe0"


def test_snap_length_cut_reports_missing_bytes() -> None:
    frame = ethernet(segment())
    seg = decode_frame(ETHERNET, frame[:-3])
    assert seg is not None
    assert seg[4] == PAYLOAD[:-3] and seg[5] == 3


def test_ipv4_with_options() -> None:
    raw = bytearray(ipv4("1.1.1.1", "2.2.2.2", tcp(1, 1883, 5, 6, ACK, PAYLOAD)))
    options = b"\x01\x01\x01\x00"  # NOPs and end of options
    packet = bytes([0x46]) + raw[1:2] + struct.pack("!H", len(raw) + 4) + raw[4:20] + options + raw[20:]
    for frame in (ethernet(packet), packet):
        seg = decode_frame(ETHERNET if frame is not packet else RAW, frame)
        assert seg is not None and seg[4] == PAYLOAD


def test_tso_total_length_zero_means_to_the_end_of_the_frame() -> None:
    raw = bytearray(ipv4("1.1.1.1", "2.2.2.2", tcp(1, 1883, 5, 6, ACK, PAYLOAD)))
    raw[2:4] = b"\x00\x00"
    seg = decode_frame(ETHERNET, ethernet(bytes(raw)))
    assert seg is not None and seg[4].startswith(PAYLOAD)


@pytest.mark.parametrize(
    "frame",
    [
        ethernet(ipv4("1.1.1.1", "2.2.2.2", b"\x00" * 16, proto=17)),  # UDP
        ethernet(ipv4("1.1.1.1", "2.2.2.2", tcp(1, 2, 3, 4, ACK, PAYLOAD), frag=0x2000)),  # first fragment
        ethernet(ipv4("1.1.1.1", "2.2.2.2", tcp(1, 2, 3, 4, ACK, PAYLOAD), frag=0x0010)),  # later fragment
        ethernet(ipv4("1.1.1.1", "2.2.2.2", tcp(1, 2, 3, 4, ACK, PAYLOAD)))[:30],  # cut inside the IP header
        b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\x08\x06" + b"\x00" * 28,  # ARP
        b"",
    ],
    ids=["udp", "fragment-first", "fragment-later", "short", "arp", "empty"],
)
def test_frames_without_a_usable_segment(frame: bytes) -> None:
    assert decode_frame(ETHERNET, frame) is None


def test_unknown_link_type() -> None:
    assert decode_frame(147, segment()) is None
