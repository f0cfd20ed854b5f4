"""mosquitto's persistence file (`mosquitto.db`, its `persistence_file`), read: bytes in, typed records out.

Sans-IO. The format is mosquitto's own (its src/persist*.c), versions 5 (mosquitto 1.6) and 6 (2.0): a 15-byte
magic, a CRC field mosquitto leaves 0, the version (big-endian), then chunks, each an 8-byte header (type, length;
big-endian) and its body. A body starts with a fixed C struct, written as it lies in memory: 16- and 32-bit
fields big-endian, 64-bit fields (store ids, times) in the writing machine's byte order, padding to the struct's
alignment; then its strings (no terminator) and, for messages, the payload and a property block as in a PUBLISH.
The byte order of the 64-bit fields is found from the CFG chunk's last store id (a counter from 1: the reading
that gives the smaller number is the right one); every Debian architecture that runs mosquitto 2.0 but s390x is
little-endian.

Anything this reader cannot make sense of raises `MosquittoDbError` naming the byte offset and what is wrong;
nothing else escapes `parse`. Chunk types it does not know are skipped, as mosquitto skips them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from .errors import RemoteProtocolError
from .properties import EMPTY_PROPERTIES, Properties, decode_properties
from .topics import topic_filter_error, topic_name_error

__all__ = [
    "MAGIC",
    "ChunkType",
    "ClientMessage",
    "ClientRecord",
    "Direction",
    "MessageState",
    "MosquittoDb",
    "MosquittoDbError",
    "StoredMessage",
    "SubscriptionRecord",
    "parse",
]

MAGIC = b"\x00\xb5\x00mosquitto db"
#: The versions read: 5 (mosquitto 1.6) and 6 (2.0; a client chunk adds its user name and listener port).
VERSIONS = (5, 6)
_PUBLISH = 3  # the packet type whose properties a message carries
_HEADER = struct.Struct(">II")
_MSG_FIELDS = struct.Struct(">IHHHHHBB")  # after a MSG_STORE's store id and expiry time
_CLIENT_MSG_FIELDS = struct.Struct(">HHBBBB")  # after a CLIENT_MSG's store id
_WIDE = {order: (struct.Struct(order + "Q"), struct.Struct(order + "q")) for order in "<>"}
_MAX_PAYLOAD = 268435455  # mosquitto refuses a stored payload over MQTT's largest


class ChunkType(IntEnum):
    CFG = 1
    MSG_STORE = 2
    CLIENT_MSG = 3
    RETAIN = 4
    SUB = 5
    CLIENT = 6


class MessageState(IntEnum):
    """mosquitto's `enum mosquitto_msg_state`: where a client message's flow stands."""

    INVALID = 0
    PUBLISH_QOS0 = 1
    PUBLISH_QOS1 = 2
    WAIT_FOR_PUBACK = 3
    PUBLISH_QOS2 = 4
    WAIT_FOR_PUBREC = 5
    RESEND_PUBREL = 6
    WAIT_FOR_PUBREL = 7
    RESEND_PUBCOMP = 8
    WAIT_FOR_PUBCOMP = 9
    SEND_PUBREC = 10
    QUEUED = 11


class Direction(IntEnum):
    IN = 0  # from the client (QoS 2 received, not yet released)
    OUT = 1  # to the client


class MosquittoDbError(Exception):
    """The file is not one this reader can take: `offset` is where, `what` is what is wrong there."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(f"at byte {offset}: {what}")
        self.offset = offset
        self.what = what


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """DB_CHUNK_MSG_STORE: one message, referred to by client messages and retained entries by `store_id`."""

    store_id: int
    expiry_time: int  # wall clock, seconds (0: does not expire)
    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Properties  # as in its PUBLISH, without message expiry (that is `expiry_time`)
    source_id: str | None  # the publisher's client id
    source_username: str | None
    source_mid: int
    source_port: int


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """DB_CHUNK_CLIENT: a persistent session."""

    client_id: str
    session_expiry_time: int  # wall clock, seconds, set when its client went away (0: not set)
    session_expiry_interval: int  # 0xFFFFFFFF: never (a 3.x persistent session)
    last_mid: int
    username: str | None  # version 6
    listener_port: int  # version 6 (0: unknown)


@dataclass(frozen=True, slots=True)
class ClientMessage:
    """DB_CHUNK_CLIENT_MSG: a message in a session's queue or in flight, either way."""

    client_id: str
    store_id: int
    mid: int
    qos: int
    state: MessageState
    retain: bool
    dup: bool
    direction: Direction
    properties: Properties  # this delivery's own (its subscription identifiers)


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """DB_CHUNK_SUB."""

    client_id: str
    topic: str
    qos: int
    identifier: int  # 0: none
    no_local: bool
    retain_as_published: bool


@dataclass(frozen=True, slots=True)
class MosquittoDb:
    version: int
    last_db_id: int
    shutdown: bool  # written at a clean stop (not by autosave)
    messages: tuple[StoredMessage, ...]
    clients: tuple[ClientRecord, ...]
    client_messages: tuple[ClientMessage, ...]  # in file order: each session's in order
    retained: tuple[int, ...]  # store ids
    subscriptions: tuple[SubscriptionRecord, ...]
    skipped_chunks: int  # of types this reader does not know


# The fixed structs (persist.h), padding included: their sizes are the C compiler's on every ABI mosquitto runs on.
_CFG = 16  # uint64 last_db_id, uint8 shutdown, uint8 dbid_size, 6 bytes padding
_MSG_STORE = 32  # uint64 store_id, int64 expiry_time, uint32 payloadlen, 5 x uint16, 2 x uint8
_CLIENT_V5 = 16  # int64 expiry time, uint32 interval, uint16 last_mid, uint16 id_len
_CLIENT_V6 = 24  # the v5 struct, uint16 listener_port, uint16 username_len, 4 bytes padding
_CLIENT_MSG = 16  # uint64 store_id, uint16 mid, uint16 id_len, 4 x uint8
_SUB = 12  # uint32 identifier, uint16 id_len, uint16 topic_len, 2 x uint8, 2 bytes padding
_RETAIN = 8  # uint64 store_id


def parse(data: bytes) -> MosquittoDb:
    """The records of a whole mosquitto.db file (MosquittoDbError if it cannot be read)."""
    return _Reader(data).read()


_STATES = {s.value: s for s in MessageState}
_DIRECTIONS = (Direction.IN, Direction.OUT)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self._wide(self.order)
        # Client ids and topics recur (a session's every message names its client): decoded and checked once each.
        self._texts: dict[bytes, str] = {}
        self._topics: dict[bytes, str] = {}

    order = "<"  # of the 64-bit fields, until the CFG chunk says otherwise

    def _wide(self, order: str) -> None:
        self.order = order
        u64, i64 = _WIDE[order]
        self._u64s, self._i64s = u64.unpack_from, i64.unpack_from

    def read(self) -> MosquittoDb:
        data = self.data
        if not data:  # mosquitto starts on an empty file as on none
            return MosquittoDb(0, 0, False, (), (), (), (), (), 0)
        if len(data) < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
            if data[:16] == b"SQLite format 3\x00":
                raise MosquittoDbError(0, "an SQLite file (this broker's own kind), not mosquitto's")
            raise MosquittoDbError(0, "not a mosquitto persistence file (no mosquitto db magic)")
        if len(data) < len(MAGIC) + 8:
            raise MosquittoDbError(len(data), "the file ends inside its header")
        version = int.from_bytes(data[19:23], "big")
        if version not in VERSIONS:
            raise MosquittoDbError(19, f"db format version {version}; this broker reads versions 5 and 6 "
                                       "(mosquitto 1.6 and 2.0)")  # fmt: skip
        pos = 23
        last_db_id = 0
        shutdown = False
        messages: list[StoredMessage] = []
        clients: list[ClientRecord] = []
        client_messages: list[ClientMessage] = []
        retained: list[int] = []
        subs: list[SubscriptionRecord] = []
        skipped = 0
        end = len(data)
        while pos < end:
            if pos + 8 > end:
                raise MosquittoDbError(pos, "the file ends inside a chunk header")
            kind, length = _HEADER.unpack_from(data, pos)
            body = pos + 8
            stop = body + length
            if stop > end:
                raise MosquittoDbError(pos, f"chunk {kind} of {length} bytes runs past the end of the file")
            if kind == ChunkType.CFG:
                self._fixed(body, stop, _CFG, "CFG", exact=True)
                if data[body + 9] != 8:
                    raise MosquittoDbError(body + 9, f"store ids of {data[body + 9]} bytes (mosquitto's are 8)")
                little = int.from_bytes(data[body : body + 8], "little")
                big = int.from_bytes(data[body : body + 8], "big")
                self._wide("<" if little <= big else ">")
                last_db_id = min(little, big)
                shutdown = bool(data[body + 8])
            elif kind == ChunkType.MSG_STORE:
                messages.append(self._message(body, stop))
            elif kind == ChunkType.CLIENT:
                clients.append(self._client(body, stop, version))
            elif kind == ChunkType.CLIENT_MSG:
                client_messages.append(self._client_message(body, stop))
            elif kind == ChunkType.RETAIN:
                self._fixed(body, stop, _RETAIN, "RETAIN", exact=True)
                retained.append(self._u64(body))
            elif kind == ChunkType.SUB:
                subs.append(self._subscription(body, stop))
            else:
                skipped += 1
            pos = stop
        return MosquittoDb(version, last_db_id, shutdown, tuple(messages), tuple(clients), tuple(client_messages),
                           tuple(retained), tuple(subs), skipped)  # fmt: skip

    def _fixed(self, body: int, stop: int, size: int, name: str, *, exact: bool = False) -> None:
        if stop - body < size or (exact and stop - body != size):
            raise MosquittoDbError(body - 8, f"{name} chunk of {stop - body} bytes (its fixed part is {size})")

    def _u64(self, pos: int) -> int:
        return int(self._u64s(self.data, pos)[0])

    def _i64(self, pos: int) -> int:
        return int(self._i64s(self.data, pos)[0])

    def _text(self, pos: int, n: int, stop: int, what: str) -> str:
        if pos + n > stop:
            raise MosquittoDbError(pos, f"{what} of {n} bytes runs past its chunk")
        raw = self.data[pos : pos + n]
        text = self._texts.get(raw)
        if text is None:
            try:
                text = self._texts[raw] = raw.decode()
            except UnicodeDecodeError as exc:
                raise MosquittoDbError(pos + exc.start, f"{what} is not UTF-8") from None
        return text

    def _topic(self, pos: int, n: int, stop: int) -> str:
        raw = self.data[pos : pos + n]
        topic = self._topics.get(raw)
        if topic is None:
            topic = self._text(pos, n, stop, "topic")
            if (why := topic_name_error(topic)) is not None:
                raise MosquittoDbError(pos, f"topic {topic!r}: {why}")
            self._topics[raw] = topic
        return topic

    def _properties(self, pos: int, stop: int, what: str) -> Properties:
        if pos == stop:
            return EMPTY_PROPERTIES
        errors: list[RemoteProtocolError] = []
        try:
            props, after = decode_properties(self.data, pos, stop, _PUBLISH, errors)
        except RemoteProtocolError as exc:
            raise MosquittoDbError(pos, f"{what}: {exc}") from None
        if errors:
            raise MosquittoDbError(pos, f"{what}: {errors[0]}")
        if after != stop:
            raise MosquittoDbError(after, f"{stop - after} bytes after {what}")
        return props

    def _message(self, body: int, stop: int) -> StoredMessage:
        self._fixed(body, stop, _MSG_STORE, "MSG_STORE")
        data = self.data
        store_id = self._u64(body)
        expiry = self._i64(body + 8)
        fields = _MSG_FIELDS.unpack_from(data, body + 16)
        payload_len, source_mid, id_len, user_len, topic_len, port, qos, retain = fields
        if payload_len > _MAX_PAYLOAD:
            raise MosquittoDbError(body + 16, f"a payload of {payload_len} bytes (MQTT's largest is {_MAX_PAYLOAD})")
        if qos > 2:
            raise MosquittoDbError(body + 30, f"message QoS {qos}")
        pos = body + _MSG_STORE
        source_id = self._text(pos, id_len, stop, "source client id") if id_len else None
        pos += id_len
        source_user = self._text(pos, user_len, stop, "source user name") if user_len else None
        pos += user_len
        topic = self._topic(pos, topic_len, stop)
        pos += topic_len
        if pos + payload_len > stop:
            raise MosquittoDbError(pos, f"payload of {payload_len} bytes runs past its chunk")
        payload = data[pos : pos + payload_len]
        pos += payload_len
        props = self._properties(pos, stop, "message properties")
        return StoredMessage(store_id, expiry, topic, payload, qos, bool(retain), props, source_id, source_user,
                             source_mid, port)  # fmt: skip

    def _client(self, body: int, stop: int, version: int) -> ClientRecord:
        size = _CLIENT_V6 if version == 6 else _CLIENT_V5
        self._fixed(body, stop, size, "CLIENT")
        expiry_time = self._i64(body)
        interval, last_mid, id_len = struct.unpack_from(">IHH", self.data, body + 8)
        port = user_len = 0
        if version == 6:
            port, user_len = struct.unpack_from(">HH", self.data, body + 16)
        pos = body + size
        if not id_len:
            raise MosquittoDbError(body + 14, "a client without a client id")
        client_id = self._text(pos, id_len, stop, "client id")
        pos += id_len
        username = self._text(pos, user_len, stop, "user name") if user_len else None
        pos += user_len
        if pos != stop:
            raise MosquittoDbError(pos, f"{stop - pos} bytes after client {client_id!r}")
        return ClientRecord(client_id, expiry_time, interval, last_mid, username, port)

    def _client_message(self, body: int, stop: int) -> ClientMessage:
        self._fixed(body, stop, _CLIENT_MSG, "CLIENT_MSG")
        store_id = self._u64(body)
        mid, id_len, qos, state, retain_dup, direction = _CLIENT_MSG_FIELDS.unpack_from(self.data, body + 8)
        if qos > 2:
            raise MosquittoDbError(body + 12, f"client message QoS {qos}")
        if state not in _STATES:
            raise MosquittoDbError(body + 13, f"client message state {state}")
        if direction > 1:
            raise MosquittoDbError(body + 15, f"client message direction {direction}")
        pos = body + _CLIENT_MSG
        if not id_len:
            raise MosquittoDbError(body + 10, "a client message without a client id")
        client_id = self._text(pos, id_len, stop, "client id")
        props = self._properties(pos + id_len, stop, "client message properties")
        return ClientMessage(client_id, store_id, mid, qos, _STATES[state], bool(retain_dup >> 4),
                             bool(retain_dup & 0x0F), _DIRECTIONS[direction], props)  # fmt: skip

    def _subscription(self, body: int, stop: int) -> SubscriptionRecord:
        self._fixed(body, stop, _SUB, "SUB")
        identifier, id_len, topic_len, qos, options = struct.unpack_from(">IHHBB", self.data, body)
        if qos > 2:
            raise MosquittoDbError(body + 8, f"subscription QoS {qos}")
        pos = body + _SUB
        if not id_len or not topic_len:
            raise MosquittoDbError(body + 4, "a subscription without a client id or a topic filter")
        client_id = self._text(pos, id_len, stop, "client id")
        pos += id_len
        topic = self._text(pos, topic_len, stop, "topic filter")
        if (why := topic_filter_error(topic)) is not None:
            raise MosquittoDbError(pos, f"topic filter {topic!r}: {why}")
        pos += topic_len
        if pos != stop:
            raise MosquittoDbError(pos, f"{stop - pos} bytes after subscription {topic!r}")
        return SubscriptionRecord(client_id, topic, qos, identifier, bool(options & 0x04), bool(options & 0x08))
