"""Property-based tests of the codec: round trips, any chunking, prefixes, garbage in, packet size limits.

The packets come from `strategies.py` (valid packets only); the garbage from random bytes and from mutations of
valid encodings. Every test here is deadline-free and bounded in examples so that the file runs in seconds.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.errors import LocalProtocolError, PacketTooLarge, RemoteProtocolError
from mqtt_cli.core.packets import (
    PACKET_CLASSES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqtt_cli.core.properties import PROPERTY_TABLE, Properties, properties_from_items
from mqtt_cli.core.reader import PacketReader, decode
from mqtt_cli.core.wire import encode_vbi

from . import strategies as S

# MQTT_HYPOTHESIS_SCALE=20 multiplies every example count, for a long bug hunt.
SCALE = int(os.environ.get("MQTT_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> int:
    return n * SCALE


# Some examples hold 65 kB strings or 70 kB payloads: generating them is slower than hypothesis expects of a
# "small" example, and that is on purpose (big values are the point), hence the too_slow, data_too_large and
# large_base_example suppressions on the tests that draw whole packets.
FAST = settings(deadline=None, max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

PACKET_TYPES = tuple(PACKET_CLASSES.values())


# --- helpers -------------------------------------------------------------------------------------------------------


def check_error(err: BaseException) -> None:
    """An error the reader raised or returned: one of ours, with a 5.0 error reason code and a message."""
    assert isinstance(err, RemoteProtocolError), f"{type(err).__name__}: {err}"
    assert 0x80 <= err.reason_code <= 0xA2, f"reason code 0x{err.reason_code:02X} of {err!r}"
    assert isinstance(err.message, str) and err.message.strip(), f"empty message in {err!r}"
    assert err.packet is None or isinstance(err.packet, PACKET_TYPES), err.packet
    assert err.packet_type is None or 0 <= err.packet_type <= 15
    for violation in err.details.get("violations", ()):
        assert isinstance(violation, RemoteProtocolError)
        assert 0x80 <= violation.reason_code <= 0xA2 and violation.message.strip()


def outcome(item: Any) -> Any:
    """A comparable summary of a reader output: the packet itself, or the error's class, code, message, packet."""
    if isinstance(item, RemoteProtocolError):
        return (type(item).__name__, item.reason_code, item.message, item.packet, item.fatal)
    return item


def run_reader(reader: PacketReader, chunks: Iterable[bytes]) -> tuple[list[Any], RemoteProtocolError | None]:
    """Feeds every chunk, going on after non-fatal errors in strict mode as a tolerant caller would.

    Returns what came out, in order (packets, and errors wherever they were raised or returned), and the fatal
    error that ended the stream, if any. Anything but a RemoteProtocolError propagates and fails the test.
    """
    out: list[Any] = []
    chunks = [*chunks, b""]  # a last empty feed gives the strict reader a chance at what is left after an error
    for chunk in chunks:
        data = chunk
        for _ in range(10_000):  # each round consumes a packet or returns: bounded by the bytes fed
            try:
                items = reader.feed(data)
            except RemoteProtocolError as err:
                check_error(err)
                out.extend(err.packets)
                out.append(err)
                if err.fatal:
                    with pytest.raises(RemoteProtocolError) as again:
                        reader.feed(b"\x00")
                    assert again.value is err, "a fatal error must be raised again on every later feed"
                    return out, err
                assert reader.strict, "a tolerant reader raises only fatal errors"
                data = b""  # what followed the bad packet is buffered: look at it again
                continue
            for item in items:
                if isinstance(item, RemoteProtocolError):
                    assert not reader.strict, "a strict reader raises its errors"
                    assert not item.fatal, "fatal errors are raised, not returned"
                    check_error(item)
                else:
                    assert isinstance(item, PACKET_TYPES), item
            out.extend(items)
            break
        else:
            raise AssertionError("the reader keeps raising without consuming its input")
    return out, None


@st.composite
def chunkings(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """`data` cut into pieces: whole, one byte at a time (up to 20 kB), or at random places (empty pieces too)."""
    mode = draw(st.sampled_from(["whole", "bytes", "random"]))
    if mode == "whole":
        return [data]
    if mode == "bytes" and len(data) <= 20_000:
        return [data[i : i + 1] for i in range(len(data))]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=30)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def encode_all(packets: Sequence[Any], version: int) -> bytes:
    return b"".join(encode(p, version) for p in packets)


# --- round trips ---------------------------------------------------------------------------------------------------


@settings(FAST, max_examples=examples(400), suppress_health_check=SLOW_DATA)
@given(S.packets_and_versions())
def test_round_trip(vp: tuple[int, Any]) -> None:
    version, packet = vp
    data = encode(packet, version)
    decoded = decode(data, version)
    assert decoded == packet
    assert type(decoded) is type(packet)
    # The encoding we produce is the one we read back: encode(decode(b)) == b.
    assert encode(decoded, version) == data
    # A tolerant reader agrees on valid input, and decode() learns the level from a CONNECT on its own.
    assert PacketReader(version, strict=False).feed(data) == [packet]
    if isinstance(packet, Connect):
        assert decode(data) == packet


@settings(FAST, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(lambda v: st.tuples(st.just(v), S.publishes(v))))
def test_publish_round_trip_repeats(vp: tuple[int, Publish]) -> None:
    """The decoder remembers topics and property blocks it has seen: the second decoding must equal the first."""
    version, packet = vp
    data = encode(packet, version)
    first = decode(data, version)
    second = PacketReader(version).feed(data + data)
    assert second == [packet, packet] and first == packet


# --- streams -------------------------------------------------------------------------------------------------------


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[Any], list[bytes]]:
    version = draw(S.versions)
    packets = draw(st.lists(S.packets(version), max_size=8))
    return version, packets, draw(chunkings(encode_all(packets, version)))


def deliver(chunks: list[bytes], how: str) -> Iterable[bytes]:
    """The chunks as a caller hands them over: bytes, bytearrays, or views of one reused receive buffer."""
    if how == "bytes":
        yield from chunks
    elif how == "bytearray":
        for chunk in chunks:
            yield bytearray(chunk)  # type: ignore[misc]
    else:
        # sock.recv_into(buf) style: the reader gets a view of a buffer that the next receive overwrites.
        buf = bytearray(max((len(c) for c in chunks), default=0))
        for chunk in chunks:
            buf[: len(chunk)] = chunk
            yield memoryview(buf)[: len(chunk)]  # type: ignore[misc]
            buf[:] = b"\xee" * len(buf)


@settings(FAST, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(streams(), st.booleans(), st.sampled_from(["bytes", "bytearray", "reused buffer"]))
def test_stream_in_any_chunking(stream: tuple[int, list[Any], list[bytes]], strict: bool, how: str) -> None:
    version, packets, chunks = stream
    reader = PacketReader(version, strict=strict)
    out: list[Any] = []
    for chunk in deliver(chunks, how):
        out.extend(reader.feed(chunk))
    assert out == packets
    assert all(type(p.payload) is bytes for p in out if isinstance(p, Publish))
    assert reader.buffered == 0
    assert reader.version == version


def test_a_strict_reader_goes_on_after_an_error() -> None:
    """After a non-fatal error, the packets that followed the bad one in the same chunk come out on the next
    feed, even when an incomplete packet had been buffered before (regression: a stale byte count held them)."""
    big = encode(Publish("t", b"x" * 100), 4)
    bad = b"\x40\x02\x00\x00"  # PUBACK with packet identifier 0
    reader = PacketReader(4)
    assert reader.feed(big[:10]) == []
    with pytest.raises(RemoteProtocolError) as exc:
        reader.feed(big[10:] + bad + encode(PubAck(5), 4))
    assert exc.value.packets == [Publish("t", b"x" * 100)] and not exc.value.fatal
    assert reader.feed(b"") == [PubAck(5)]
    assert reader.feed(encode(PubAck(6), 4)) == [PubAck(6)]


@st.composite
def sessions(draw: st.DrawFn) -> tuple[int | None, Connect, list[Any], list[bytes]]:
    version = draw(S.versions)
    connect = draw(S.connects(version))
    rest = draw(st.lists(S.packets(version), min_size=1, max_size=6))
    data = encode(connect, version) + encode_all(rest, version)
    initial = draw(st.sampled_from([None, 3, 4, 5]))
    return initial, connect, rest, draw(chunkings(data))


@settings(FAST, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(sessions())
def test_connect_switches_the_readers_version(session: tuple[int | None, Connect, list[Any], list[bytes]]) -> None:
    """A CONNECT tells the reader the level of what follows, even within the same `feed`."""
    initial, connect, rest, chunks = session
    reader = PacketReader(initial)
    out: list[Any] = []
    for chunk in chunks:
        out.extend(reader.feed(chunk))
    assert out == [connect, *rest]
    assert reader.version == connect.protocol_version


def test_connect_switches_the_version_within_one_feed() -> None:
    """The same bytes mean different packets at 3.1.1 and at 5.0: the CONNECT before them decides."""
    ack = PubAck(7, 0x10, Properties(reason_string="none"))
    tail = encode(ack, 5)
    with pytest.raises(RemoteProtocolError):
        PacketReader(4).feed(tail)  # 3.1.1 PUBACK has exactly two bytes after the header
    data = encode(Connect("c", protocol_version=5), 5) + tail
    reader = PacketReader(4)
    assert reader.feed(data) == [Connect("c", protocol_version=5), ack]
    assert reader.version == 5


# --- prefixes ------------------------------------------------------------------------------------------------------


def _prefix_lengths(n: int, rnd: random.Random) -> list[int]:
    if n <= 300:
        return list(range(n))
    # Big packets: the header region, the end, and a sample in between (all n prefixes would be quadratic).
    return sorted({*range(12), *range(n - 12, n), *rnd.sample(range(n), 40)})


@settings(FAST, max_examples=examples(200), suppress_health_check=SLOW_DATA)
@given(S.packets_and_versions(), st.randoms(use_true_random=False))
def test_every_prefix_waits_for_the_rest(vp: tuple[int, Any], rnd: random.Random) -> None:
    version, packet = vp
    data = encode(packet, version)
    for k in _prefix_lengths(len(data), rnd):
        for strict in (True, False):
            reader = PacketReader(version, strict=strict)
            assert reader.feed(data[:k]) == [], f"prefix of {k} of {len(data)} bytes"
            assert reader.buffered == k
            assert reader.feed(data[k:]) == [packet]
            assert reader.buffered == 0


# --- garbage in ----------------------------------------------------------------------------------------------------


@st.composite
def framed_garbage(draw: st.DrawFn) -> bytes:
    """A well-framed packet of any type and flags with a random body: gets past the framing to the decoders."""
    first = draw(st.integers(0, 255))
    body = draw(st.binary(max_size=80))
    return bytes((first,)) + encode_vbi(len(body)) + body


def _reframe(data: bytes) -> bytes:
    """Fixes the remaining length of a (mutated) packet whose header survived, so that its body gets decoded."""
    if len(data) < 2:
        return data
    # Skip the old remaining length (up to four bytes with the continuation bit).
    i = 1
    while i < len(data) and i < 5 and data[i] & 0x80:
        i += 1
    body = data[i + 1 :]
    return data[:1] + encode_vbi(len(body)) + body


@st.composite
def mutations(draw: st.DrawFn) -> tuple[int, bytes]:
    """A valid encoding with a few random edits: bit flips, byte changes, insertions, deletions, truncation."""
    version, packet = draw(S.packets_and_versions())
    data = bytearray(encode(packet, version))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "append"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0x23, 0x2B, 0xC0, 0xED]))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and data:
            del data[i : i + draw(st.integers(1, 4))]
        elif op == "truncate":
            del data[i:]
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=8))
    raw = bytes(data)
    return version, _reframe(raw) if draw(st.booleans()) else raw


garbage = st.one_of(
    st.tuples(st.sampled_from([None, 3, 4, 5]), st.binary(max_size=200)),
    st.tuples(st.sampled_from([None, 3, 4, 5]), st.lists(framed_garbage(), min_size=1, max_size=5).map(b"".join)),
    mutations(),
)


def _chunked(vd: tuple[int | None, bytes]) -> st.SearchStrategy[tuple[int | None, bytes, list[bytes]]]:
    return chunkings(vd[1]).map(lambda chunks: (vd[0], vd[1], chunks))


def _whole(version: int | None, raw: bytes) -> tuple[int | None, bytes, list[bytes]]:
    return version, raw, [raw]


@settings(FAST, max_examples=examples(600), suppress_health_check=SLOW_DATA)
@example(_whole(5, b"\xf0\x01\x18"))  # AUTH "continue authentication" without an authentication method
@example(_whole(4, b"\x30\x03\x00\x01\xff"))  # topic name with invalid UTF-8
@example(_whole(5, b"\x30\x05\x00\x01a\x02\x01"))  # property block longer than the packet
@example(_whole(None, b"\x10\xff\xff\xff\xff\x7f"))  # remaining length of five bytes
@example(_whole(5, b"\x82\x07\x00\x01\x00\x00\x02$s"))  # SUBSCRIBE without the options byte
@example(_whole(4, b"\x40\x02\x00\x00\x40\x02\x00\x05"))  # packet id 0, then a good PUBACK
@given(garbage.flatmap(_chunked))
def test_garbage_raises_only_protocol_errors(case: tuple[int | None, bytes, list[bytes]]) -> None:
    """Random and mutated bytes: only RemoteProtocolError subclasses, strict or tolerant, in any chunking.

    A tolerant reader returns packets and errors in line and goes on until a fatal error. Strict readers that
    go on after each error see exactly what the tolerant one returns; and the chunking changes nothing.
    """
    version, raw, chunks = case
    tolerant, tolerant_fatal = run_reader(PacketReader(version, strict=False), chunks)
    strict, strict_fatal = run_reader(PacketReader(version, strict=True), chunks)
    whole, whole_fatal = run_reader(PacketReader(version, strict=False), [raw])
    # The tolerant reader may recover a packet the strict one could not read (texts with U+FFFD, unknown
    # properties kept); it never loses one the strict reader had.
    assert len(strict) == len(tolerant)
    for s_item, t_item in zip(strict, tolerant, strict=True):
        if isinstance(s_item, RemoteProtocolError) and s_item.packet is None:
            assert isinstance(t_item, RemoteProtocolError)  # perhaps with more of the packet recovered
            continue
        assert outcome(s_item) == outcome(t_item)
    assert [outcome(x) for x in whole] == [outcome(x) for x in tolerant]
    assert outcome(tolerant_fatal) == outcome(strict_fatal) == outcome(whole_fatal)


@settings(FAST, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(lambda v: st.tuples(st.just(v), st.lists(S.packets(v), min_size=2, max_size=6))), st.data())
def test_an_error_does_not_desynchronise_the_stream(vps: tuple[int, list[Any]], data: st.DataObject) -> None:
    """A packet with a broken body (framing intact) gives one error; the packets after it come out unchanged."""
    version, packets = vps
    bad_index = data.draw(st.integers(0, len(packets) - 1), label="bad_index")
    encoded = [encode(p, version) for p in packets]
    victim = bytearray(encoded[bad_index])
    body_start = _header_len(bytes(victim))
    assume(len(victim) > body_start)
    i = data.draw(st.integers(body_start, len(victim) - 1), label="byte")
    victim[i] = data.draw(st.integers(0, 255).filter(lambda b: b != victim[i]), label="value")
    encoded[bad_index] = bytes(victim)
    out, fatal = run_reader(PacketReader(version, strict=False), [b"".join(encoded)])
    assert fatal is None  # the framing was not touched
    assert len(out) == len(packets)
    assert out[:bad_index] == packets[:bad_index]
    damaged = out[bad_index]
    assume(not isinstance(damaged, Connect) and not isinstance(getattr(damaged, "packet", None), Connect))
    assert out[bad_index + 1 :] == packets[bad_index + 1 :]


def _header_len(data: bytes) -> int:
    i = 1
    while data[i] & 0x80:
        i += 1
    return i + 1


@settings(FAST, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(st.lists(garbage, min_size=2, max_size=6))
def test_decoding_does_not_depend_on_what_was_decoded_before(inputs: list[tuple[int | None, bytes]]) -> None:
    """The codec remembers topics and property blocks across readers: that must not change any outcome."""

    def outcomes(order: Iterable[tuple[int | None, bytes]]) -> dict[tuple[int | None, bytes], Any]:
        result = {}
        for version, raw in order:
            out, fatal = run_reader(PacketReader(version, strict=False), [raw])
            result[version, raw] = ([outcome(x) for x in out], outcome(fatal))
        return result

    assert outcomes(inputs) == outcomes(reversed(inputs))


# --- maximum packet size -------------------------------------------------------------------------------------------


@settings(FAST, max_examples=examples(200), suppress_health_check=SLOW_DATA)
@given(S.packets_and_versions(), st.booleans())
def test_max_packet_size_bounds_whole_packets(vp: tuple[int, Any], strict: bool) -> None:
    version, packet = vp
    data = encode(packet, version)
    size = len(data)
    assert PacketReader(version, max_packet_size=size, strict=strict).feed(data) == [packet]
    reader = PacketReader(version, max_packet_size=size - 1, strict=strict)
    header = data[: _header_len(data)]
    # Raised as soon as the fixed header tells the size, before the body is buffered.
    with pytest.raises(PacketTooLarge) as exc:
        reader.feed(header)
    err = exc.value
    check_error(err)
    assert err.fatal and err.reason_code == 0x95 and err.packet_type == packet.type
    with pytest.raises(PacketTooLarge) as again:
        reader.feed(data[len(header) :])
    assert again.value is err


@settings(FAST, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(streams(), st.integers(2, 400), st.booleans())
def test_max_packet_size_in_a_stream(stream: tuple[int, list[Any], list[bytes]], limit: int, strict: bool) -> None:
    version, packets, chunks = stream
    sizes = [len(encode(p, version)) for p in packets]
    too_big = next((i for i, n in enumerate(sizes) if n > limit), None)
    out, fatal = run_reader(PacketReader(version, max_packet_size=limit, strict=strict), chunks)
    if too_big is None:
        assert fatal is None and out == packets
    else:
        assert isinstance(fatal, PacketTooLarge) and fatal.packet_type == packets[too_big].type
        assert out == [*packets[:too_big], fatal]


# --- the encoder as a validator ------------------------------------------------------------------------------------

# Loosely typed field values: the valid ones, the edges just outside, and the wrong kinds.
_loose_text = st.one_of(
    S.utf8_text(big=False),
    st.text(max_size=6),  # surrogates and U+0000 included
    st.sampled_from(["", "+", "#", "a/+", "a/#", "#/a", "a+", "$share/g/x", "$share//x", "$share/g", "\ud800"]),
)
_loose_topic = st.one_of(S.topic_names(), S.topic_filters(5), _loose_text)
_loose_int = st.one_of(st.integers(-2, 300), st.sampled_from([65535, 65536, 2**31]))
_loose_props = st.lists(
    st.sampled_from(list(PROPERTY_TABLE.values())).flatmap(
        lambda spec: S.property_values(spec).map(lambda v: (spec.id, v))
    ),
    max_size=4,
).map(Properties)


@st.composite
def loose_packets(draw: st.DrawFn) -> tuple[int, Any]:
    """Packets built with any field values, valid or not, and any version."""
    version = draw(S.versions)
    b = st.booleans()
    kind = draw(st.sampled_from(PACKET_TYPES))
    if kind is Connect:
        will = draw(st.none() | st.builds(Will, _loose_topic, st.binary(max_size=8), _loose_int, b, _loose_props))
        packet = Connect(
            draw(_loose_text), draw(b), draw(st.integers(-1, 65536)), draw(st.none() | _loose_text),
            draw(st.none() | st.binary(max_size=8)), will, draw(_loose_props),
            draw(st.sampled_from([3, 4, 5, 6, 0])), draw(st.sampled_from(["", "MQTT", "MQIsdp"])), draw(b),
        )  # fmt: skip
    elif kind is Publish:
        packet = Publish(
            draw(_loose_topic), draw(st.binary(max_size=8)), draw(_loose_int), draw(b), draw(b),
            draw(st.none() | _loose_int), draw(_loose_props),
        )  # fmt: skip
    elif kind is Subscribe:
        subs = st.builds(Subscription, _loose_topic, _loose_int, b, b, st.integers(-1, 4))
        packet = Subscribe(draw(_loose_int), tuple(draw(st.lists(subs, max_size=3))), draw(_loose_props))
    elif kind is Unsubscribe:
        packet = Unsubscribe(draw(_loose_int), tuple(draw(st.lists(_loose_topic, max_size=3))), draw(_loose_props))
    elif kind in (SubAck, UnsubAck):
        codes = st.lists(st.integers(0, 255), max_size=3).map(tuple)
        packet = kind(draw(_loose_int), draw(codes), draw(_loose_props))
    elif kind is ConnAck:
        packet = ConnAck(draw(b), draw(st.integers(0, 255)), draw(_loose_props))
    elif kind in (Disconnect, Auth):
        packet = kind(draw(st.integers(0, 255)), draw(_loose_props))
    elif kind in S.ACK_CLASSES:
        packet = kind(draw(_loose_int), draw(st.integers(0, 255)), draw(_loose_props))
    else:
        packet = kind()
    return version, packet


@settings(FAST, max_examples=examples(600))
@given(loose_packets())
def test_what_encode_accepts_a_strict_reader_accepts_unchanged(vp: tuple[int, Any]) -> None:
    """`encode` either raises LocalProtocolError or produces bytes that decode, strictly, to the same packet."""
    version, packet = vp
    try:
        data = encode(packet, version)
    except LocalProtocolError:
        return
    level = packet.protocol_version if isinstance(packet, Connect) else version
    assert decode(data, level) == packet


# --- codec bugs found by the properties above, kept as regression tests ---------------------------------------------


def test_encode_refuses_auth_with_a_reason_code_and_no_authentication_method() -> None:
    # 5.0 3.15.2.2.2: it is a Protocol Error to omit the Authentication Method; our own reader says so too.
    packet = Auth(0x18)
    with pytest.raises(RemoteProtocolError):
        decode(b"\xf0\x01\x18", 5)
    with pytest.raises(LocalProtocolError):
        encode(packet, 5)


def test_encode_refuses_authentication_data_without_a_method() -> None:
    # 5.0 3.1.2.11.10 [MQTT-3.1.2-...]: "It is a Protocol Error to include Authentication Data if there is no
    # Authentication Method"; the reader raises ProtocolError on the bytes that encode() produces.
    packet = Connect("c", protocol_version=5, properties=Properties(authentication_data=b"x"))
    with pytest.raises(LocalProtocolError):
        encode(packet, 5)


@pytest.mark.parametrize("topic", ["a/#", "+", ""])
def test_encode_refuses_a_response_topic_that_is_not_a_topic_name(topic: str) -> None:
    # 5.0 3.3.2.3.5: the Response Topic is a topic name, no wildcards [MQTT-3.3.2-14]; the reader checks it.
    # Refused when the properties are built, and by encode for properties that were not checked when built.
    with pytest.raises(LocalProtocolError):
        Properties(response_topic=topic)
    with pytest.raises(LocalProtocolError):
        encode(Publish("a", properties=properties_from_items(((0x08, topic),))), 5)


def test_encode_raises_local_protocol_error_for_a_lone_surrogate_in_a_topic() -> None:
    # 1.5.4: UTF-8 strings must be well-formed (no U+D800..U+DFFF); encode() promises LocalProtocolError for a
    # packet the protocol forbids (as it does for a surrogate in any other string), not UnicodeEncodeError.
    with pytest.raises(LocalProtocolError):
        encode(Publish("a/\ud800"), 4)


def test_auth_with_properties_needs_an_authentication_method() -> None:
    # 5.0 3.15.2.2.2: "It is a Protocol Error to omit the Authentication Method"; only AUTH Success without any
    # property may leave the property block (and so the method) out. Both sides accept this one today.
    packet = Auth(0, Properties(reason_string="why"))
    with pytest.raises(LocalProtocolError):
        encode(packet, 5)
    with pytest.raises(RemoteProtocolError):
        decode(b"\xf0\x07\x00\x05\x1f\x00\x02no", 5)


def test_encode_refuses_session_present_in_a_3_1_connack() -> None:
    # MQTT 3.1 CONNACK variable header: byte 1 is "Reserved values. Not used." (the flag came with 3.1.1).
    with pytest.raises(LocalProtocolError):
        encode(ConnAck(session_present=True), 3)


def test_will_properties_are_read_at_level_five_only() -> None:
    will = Will("w", b"p", 1, True, Properties(will_delay_interval=5, user_properties=[("k", "v")]))
    packet = Connect("c", will=will, protocol_version=5)
    assert decode(encode(packet, 5)) == packet
    with pytest.raises(LocalProtocolError):
        encode(Connect("c", will=will, protocol_version=4), 4)
