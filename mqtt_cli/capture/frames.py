"""From a captured frame to a TCP segment: link layers, IPv4/IPv6, TCP.

    segment = decode_frame(linktype, frame)   # None when the frame holds no TCP segment we can use
    flow, seq, ack, flags, payload, missing = segment

`flow` identifies the direction: source address, destination address, then source and destination ports,
as raw bytes (12 bytes for IPv4, 36 for IPv6), which is cheap to slice and to hash. `missing` counts payload
bytes the frame should hold but the capture cut off (a snap length): the TCP layer treats them as lost.
"""

from __future__ import annotations

import socket
import struct

__all__ = [
    "ACK",
    "FIN",
    "LINKTYPES",
    "RST",
    "SYN",
    "Segment",
    "decode_frame",
    "flow_endpoints",
    "linktype_name",
    "reverse_flow",
]

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

Segment = tuple[bytes, int, int, int, bytes, int]

# Link types (https://www.tcpdump.org/linktypes.html) we read, with a name for messages.
LINKTYPES = {
    0: "BSD loopback",
    1: "Ethernet",
    12: "raw IP",  # DLT_RAW on most BSDs, found in some files instead of 101
    14: "raw IP",  # DLT_RAW on OpenBSD
    101: "raw IP",
    108: "OpenBSD loopback",
    113: "Linux cooked v1",
    228: "raw IPv4",
    229: "raw IPv6",
    276: "Linux cooked v2",
}

# Link types we do not read, named in the message that says their frames were skipped.
OTHER_LINKTYPES = {
    6: "Token Ring",
    9: "PPP",
    10: "FDDI",
    50: "PPP over HDLC",
    104: "Cisco HDLC",
    105: "IEEE 802.11",
    119: "Prism 802.11",
    127: "802.11 radiotap",
    143: "DOCSIS",
    163: "AVS 802.11",
    192: "PPI",
    195: "IEEE 802.15.4",
    201: "Bluetooth HCI H4",
    220: "Linux USB",
    249: "USBPcap",
    253: "Linux netlink",
}


def linktype_name(linktype: int) -> str:
    """ "105 (IEEE 802.11)", or the bare number when we have no name for it."""
    name = LINKTYPES.get(linktype) or OTHER_LINKTYPES.get(linktype)
    return f"{linktype} ({name})" if name else str(linktype)


_IPV4, _IPV6 = 0x0800, 0x86DD
_VLAN_TAGS = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
# Address family values of BSD loopback headers: AF_INET is 2 everywhere, AF_INET6 differs between systems.
_AF_INET6 = frozenset({10, 23, 24, 28, 30})
_IP4 = struct.Struct("!BxHxxHxB")  # version/IHL, total length, flags/fragment offset, protocol
_TCP = struct.Struct("!IIBB")  # seq, ack, data offset, flags (after the ports)
# Ethernet + IPv4 without options + TCP, the common case, in one call: from the IPv4 total length (offset 16)
# to the TCP flags: total length, fragment field, protocol, seq, ack, data offset, flags.
_ETH_IP4_TCP = struct.Struct("!H2xHxB14xIIBB")
_IP4_TYPE = b"\x08\x00"
_IP6_EXTENSIONS = frozenset({0, 43, 60, 51, 44})


def decode_frame(linktype: int, frame: bytes) -> Segment | None:
    """The TCP segment in `frame`, or None (not IP, not TCP, an IP fragment, too short, unknown link type)."""
    try:
        if linktype == 1 and frame[14] == 0x45 and frame[12:14] == _IP4_TYPE:
            total, frag, proto, seq, ack, doff, flags = _ETH_IP4_TCP.unpack_from(frame, 16)
            if proto != 6 or frag & 0x3FFF:
                return None
            end = 14 + total
            size = len(frame)
            data = 34 + (doff >> 4) * 4
            if end <= 34 or end > size or data > end or doff < 0x50:
                pass  # unusual lengths: the general path below sorts them out
            else:
                return frame[26:38], seq, ack, flags, frame[data:end], 0
        if linktype == 1:
            etype = (frame[12] << 8) | frame[13]
            off = 14
            while etype in _VLAN_TAGS:  # 802.1Q / 802.1ad tags, possibly stacked
                etype = (frame[off + 2] << 8) | frame[off + 3]
                off += 4
        elif linktype == 113:
            etype = (frame[14] << 8) | frame[15]
            off = 16
        elif linktype == 276:
            etype = (frame[0] << 8) | frame[1]
            off = 20
        elif linktype == 0 or linktype == 108:
            family = int.from_bytes(frame[:4], "big" if linktype == 108 else "little")
            if family > 0xFFFF:  # written in the other byte order than the one we guessed
                family = int.from_bytes(frame[:4], "big")
            etype = _IPV4 if family == 2 else _IPV6 if family in _AF_INET6 else 0
            off = 4
        elif linktype in (101, 12, 14, 228, 229):
            version = frame[0] >> 4
            etype = _IPV4 if version == 4 else _IPV6 if version == 6 else 0
            off = 0
        else:
            return None
        while etype in _VLAN_TAGS:  # a tag after a cooked header
            etype = (frame[off + 2] << 8) | frame[off + 3]
            off += 4
        if etype == _IPV4:
            vihl, total, frag, proto = _IP4.unpack_from(frame, off)
            if vihl >> 4 != 4 or vihl & 15 < 5 or proto != 6 or frag & 0x3FFF:  # not v4/TCP, or a fragment
                return None
            addrs = frame[off + 12 : off + 20]
            tcp = off + (vihl & 15) * 4
            end = off + total
        elif etype == _IPV6:
            if frame[off] >> 4 != 6:
                return None
            nxt = frame[off + 6]
            addrs = frame[off + 8 : off + 40]
            tcp = off + 40
            plen = (frame[off + 4] << 8) | frame[off + 5]
            end = tcp + plen if plen else 0
            while nxt != 6:
                if nxt not in _IP6_EXTENSIONS:
                    return None
                if nxt == 44:  # fragment header: only an unfragmented "atomic fragment" is usable
                    if ((frame[tcp + 2] << 8) | frame[tcp + 3]) & 0xFFF9:
                        return None
                    size = 8
                elif nxt == 51:
                    size = (frame[tcp + 1] + 2) * 4
                else:
                    size = (frame[tcp + 1] + 1) * 8
                nxt = frame[tcp]
                tcp += size
        else:
            return None
        size = len(frame)
        missing = 0
        if end <= tcp:  # IPv4 total length 0 (TCP segmentation offload) or IPv6 jumbogram: to the frame's end
            end = size
        elif end > size:
            missing = end - size
            end = size
        seq, ack, doff, flags = _TCP.unpack_from(frame, tcp + 4)
        data = tcp + (doff >> 4) * 4
        if data > end or doff < 0x50:
            return None  # header cut by the snap length, or not a valid TCP header
        return addrs + frame[tcp : tcp + 4], seq, ack, flags, frame[data:end], missing
    except (IndexError, struct.error):
        return None  # a frame shorter than its headers


def reverse_flow(flow: bytes) -> bytes:
    """The flow key of the other direction."""
    half = (len(flow) - 4) // 2
    return flow[half : 2 * half] + flow[:half] + flow[-2:] + flow[-4:-2]


def flow_endpoints(flow: bytes) -> tuple[str, str, int, int]:
    """("1.2.3.4:5", "[::1]:1883", source port, destination port) of a flow key."""
    half = (len(flow) - 4) // 2
    sport = (flow[-4] << 8) | flow[-3]
    dport = (flow[-2] << 8) | flow[-1]
    if half == 4:
        src = f"{socket.inet_ntop(socket.AF_INET, flow[:4])}:{sport}"
        dst = f"{socket.inet_ntop(socket.AF_INET, flow[4:8])}:{dport}"
    else:
        src = f"[{socket.inet_ntop(socket.AF_INET6, flow[:16])}]:{sport}"
        dst = f"[{socket.inet_ntop(socket.AF_INET6, flow[16:32])}]:{dport}"
    return src, dst, sport, dport
