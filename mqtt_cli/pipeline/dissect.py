"""What Spark's Python workers run for `ingest`: windows to frames, and frames of connections to table rows.

Both are `mapInArrow` functions (Arrow batches in, Arrow batches out), so rows cross between the JVM and Python
in columns, not one pickled object at a time.

1. `window_frames`: each input row is the index of a `splits.Window`; its records are read by the capture
   package's readers and every frame holding a TCP segment (`capture.frames.decode_frame`) comes out with its
   connection key: the smaller of the two directions' flow keys (addresses and ports as bytes), the same for
   both directions, deterministic in every process (Spark hashes it on the JVM side to shuffle).
2. `dissect_rows`: a partition's frames, sorted by (file, frame number), go through one `capture.Dissector`
   per capture file, exactly as `mqtt dump` feeds its own: a Dissector keeps its state per connection, so
   frames of other connections (in other partitions) change nothing in what it writes for these. Only the
   connection numbers (`stream`) are per partition: each connection also carries the number of the frame at
   which the Dissector numbered it (`_numbered`, told by its `on_numbered` hook), and `ingest` ranks those per
   file to give `mqtt dump`'s numbers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mqtt_cli.capture import Dissector
from mqtt_cli.capture.aliases import TopicAliases
from mqtt_cli.capture.errors import CaptureError
from mqtt_cli.capture.frames import decode_frame, reverse_flow
from mqtt_cli.capture.records import format_ts
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import properties_json

from .schema import DUMP_COLUMNS, END_SEQ, JSON_COLUMNS, PROPERTY_COLUMNS, SEQ_SHIFT, arrow_schema
from .splits import Window, read_window

__all__ = [
    "DAMAGE_MARK",
    "FRAME_COLUMNS",
    "ROW_COLUMNS",
    "DissectOptions",
    "damage_in",
    "dissect_rows",
    "window_frames",
]

FRAME_COLUMNS: tuple[tuple[str, str], ...] = (
    ("file_id", "int"),
    ("frame", "bigint"),
    ("ts", "bigint"),
    ("linktype", "int"),
    ("data", "binary"),
    ("key", "binary"),
)
# What dissect_rows writes: the dump's keys, then ours (`time` is derived in Spark), the ranking helpers, then
# the properties' columns.
ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    *DUMP_COLUMNS,
    ("capture_file", "string"),
    ("conn_key", "string"),
    ("direction", "string"),
    ("protocol_version", "int"),
    ("ts_ns", "bigint"),
    ("seq", "bigint"),
    ("file_id", "int"),
    ("_numbered", "bigint"),
    ("resolved_topic", "string"),
    ("payload", "binary"),
    *PROPERTY_COLUMNS,
)
_BATCH = 8192
_DIRECTION = {True: "to_broker", False: "to_client", None: None}
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


class DissectOptions:
    """The `mqtt dump` options that decide what is decoded (picklable: shipped to the workers)."""

    def __init__(
        self, ports: Iterable[int] = (1883,), tls_ports: Iterable[int] = (8883,), detect: bool = True,
        version: int | None = None,
    ) -> None:  # fmt: skip
        self.ports = tuple(ports)
        self.tls_ports = tuple(tls_ports)
        self.detect = detect
        self.version = version

    def dissector(self, on_numbered: Callable[[int], None] | None = None) -> Dissector:
        # keep_objects: the PUBLISH payloads go into the table (`payload`), which the dump's records do not hold.
        return Dissector(
            self.ports, self.tls_ports, detect=self.detect, version=self.version, on_numbered=on_numbered,
            keep_objects=True,
        )  # fmt: skip


# --- 1. windows -> frames ----------------------------------------------------------------------------------------


# A capture reader's error in a task: what the driver needs to read the file again up to there (ingest.py).
DAMAGE_MARK = "mqtt-cli capture damage:"
_DAMAGE = re.compile(re.escape(DAMAGE_MARK) + r"(\d+):(-?\d+):(.*?):end-of-damage")


def damage_in(error: BaseException) -> tuple[int, int, str] | None:
    """(file_id, last frame read before the damage, message) when `error` is a Spark job failure caused by
    window_frames meeting damage that the scan did not see (e.g. a pcapng packet block naming no interface)."""
    found = _DAMAGE.search(str(error))
    return None if found is None else (int(found[1]), int(found[2]), found[3])


# The table holds timestamps as signed 64-bit nanoseconds (`ts_ns`, Spark's TIMESTAMP): years 1677 to 2262.
_TS_MIN, _TS_MAX = -(1 << 63), (1 << 63) - 1


def _records(window: Window, limit: int | None) -> Iterator[tuple[int | None, int, bytes, int]]:
    last = window.first_frame
    if limit is not None and last >= limit:
        return  # the window starts after the damage
    try:
        for record in read_window(window):
            ts = record[0]
            if ts is not None and not _TS_MIN <= ts <= _TS_MAX:
                # Damage for the table, not for mqtt dump (which writes any timestamp): ingest stops there.
                raise CaptureError(
                    f"{window.path}: frame {record[3]} has the timestamp {format_ts(ts)}, outside what the table "
                    "holds (nanoseconds since 1970 in 64 bits: the years 1677 to 2262)"
                )
            last = record[3]
            yield record
            if last == limit:
                return  # the next record is the damaged one: do not read it
    except CaptureError as exc:
        # Fails the job; the driver reads the file again up to `last` and reports the damage as mqtt dump does,
        # at the offset in the file (the reader counted from the start of the window's prefix).
        message = str(exc)
        offset = getattr(exc, "offset", None)
        if window.kind != "stream" and offset is not None and offset >= len(window.prefix):
            message = message.replace(f"byte {offset}", f"byte {offset - len(window.prefix) + window.start}", 1)
        raise RuntimeError(f"{DAMAGE_MARK}{window.file_id}:{last}:{message}:end-of-damage") from None


def window_frames(batches: Iterator[Any], windows: list[Window], limits: dict[int, int] | None = None) -> Iterator[Any]:
    """`limits`: file_id -> the last frame to read (damage found by an earlier attempt)."""
    import pyarrow as pa

    schema = arrow_schema(FRAME_COLUMNS)
    for batch in batches:
        for index in batch.column(0).to_pylist():
            window = windows[index]
            cols: tuple[list[Any], ...] = ([], [], [], [], [], [])
            file_id, frames, stamps, links, datas, keys = cols
            for ts, linktype, data, number in _records(window, (limits or {}).get(window.file_id)):
                seg = decode_frame(linktype, data)
                if seg is None:
                    continue  # not TCP: nothing any Dissector would look at
                flow = seg[0]
                back = reverse_flow(flow)
                file_id.append(window.file_id)
                frames.append(number)
                stamps.append(ts)
                links.append(linktype)
                datas.append(data)
                keys.append(flow if flow < back else back)
                if len(frames) >= _BATCH:
                    yield pa.RecordBatch.from_arrays([pa.array(c) for c in cols], schema=schema)
                    for c in cols:
                        c.clear()
            if frames:
                yield pa.RecordBatch.from_arrays([pa.array(c) for c in cols], schema=schema)


# --- 2. frames -> rows -------------------------------------------------------------------------------------------


class _Rows:
    """Records and our own columns, turned into Arrow batches a column at a time (one comprehension per column
    costs far less than filling fifty lists record by record)."""

    def __init__(self) -> None:
        import pyarrow as pa

        self._pa = pa
        self.schema = arrow_schema(ROW_COLUMNS)
        self.recs: list[dict[str, Any]] = []
        self.own: tuple[list[Any], ...] = tuple([] for _ in _OWN_NAMES)

    @property
    def count(self) -> int:
        return len(self.recs)

    def batch(self) -> Any:
        pa = self._pa
        recs = self.recs
        present: set[str] = set()
        for keys in {tuple(rec) for rec in recs}:  # records of a kind share their keys: few distinct tuples
            present.update(keys)
        arrays = []
        for name, _kind in DUMP_COLUMNS:
            field = self.schema.field(name)
            if name not in present:
                arrays.append(pa.nulls(len(recs), field.type))
            elif name in JSON_COLUMNS:
                # The JSON object `mqtt dump --json` writes (Properties' attribute names), not the records' pairs.
                texts = [None if (v := r.get(name)) is None else _compact(_as_object(v)) for r in recs]
                arrays.append(pa.array(texts, field.type))
            else:
                arrays.append(pa.array([r.get(name) for r in recs], field.type))
        for name, values in zip(_OWN_NAMES, self.own, strict=True):
            arrays.append(pa.array(values, self.schema.field(name).type))
            values.clear()
        if "properties" in present:
            named = [None if (v := r.get("properties")) is None else _named_properties(v) for r in recs]
            for name, _kind in PROPERTY_COLUMNS:
                arrays.append(pa.array([p.get(name) if p else None for p in named], self.schema.field(name).type))
        else:
            arrays += [pa.nulls(len(recs), self.schema.field(name).type) for name, _kind in PROPERTY_COLUMNS]
        recs.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


_OWN_NAMES = (
    "capture_file", "conn_key", "direction", "protocol_version", "ts_ns", "seq", "file_id", "_numbered",
    "resolved_topic", "payload",
)  # fmt: skip
_REPEATED = {"user_property": "user_properties", "subscription_identifier": "subscription_identifiers"}


def _as_object(props: Any) -> Any:
    return properties_json(props) if isinstance(props, list) else props


def _named_properties(props: Any) -> dict[str, Any]:
    """A record's `properties` (`[[name, value], ...]` as mqtt dump writes them, or already by name) as the
    property columns' values: repeatable ones gathered into lists, binary ones (hex in the dump) as bytes."""
    out: dict[str, Any] = {}
    pairs = props.items() if isinstance(props, dict) else props
    for name, value in pairs:
        plural = _REPEATED.get(name)
        if plural is not None:
            out.setdefault(plural, []).append(value)
        elif name == "correlation_data" and isinstance(value, str):
            out[name] = bytes.fromhex(value)
        else:
            out[name] = value
    return out


class _File:
    """One capture file's Dissector in this partition, and what its rows share."""

    def __init__(self, file_id: int, name: str, options: DissectOptions) -> None:
        self.file_id = file_id
        self.name = name
        self.now = 0  # the frame being dissected
        self.numbered: dict[int, int] = {}  # local connection number -> the frame at which it was numbered
        self.dissector = options.dissector(self._on_numbered)
        self.default_version = options.version or 4
        self.versions: dict[int, int] = {}  # local connection number -> protocol version from its CONNECT
        self.keys: dict[tuple[Any, Any, Any], str] = {}
        self.aliases = TopicAliases()

    def _on_numbered(self, index: int) -> None:
        self.numbered[index] = self.now

    def emit(self, rows: _Rows, recs: list[dict[str, Any]], seq_base: int) -> None:
        numbered = self.numbered
        versions = self.versions
        for pos, rec in enumerate(recs):
            stream = rec.get("stream")
            if rec["type"] == "CONNECT" and rec.get("proto_version") is not None:
                level = rec["proto_version"] & 0x7F
                if level in (3, 4, 5):  # a level nobody knows: the connection is read as 3.1.1 (as dump does)
                    versions[stream] = level
            from_client = rec.get("from_client")
            src, dst = rec.get("src"), rec.get("dst")
            ident = (src, dst, from_client)
            key = self.keys.get(ident)
            if key is None:
                if from_client is None:
                    a, b = sorted((src or "", dst or ""))
                    key = f"{a} <-> {b}"
                else:
                    key = f"{src} -> {dst}" if from_client else f"{dst} -> {src}"
                self.keys[ident] = key
            ts = rec.get("ts")
            own = rows.own
            own[0].append(self.name)
            own[1].append(key)
            own[2].append(_DIRECTION[from_client])
            own[3].append(versions.get(stream, self.default_version))
            own[4].append(None if ts is None else _ts_ns(ts))
            own[5].append(seq_base + pos)
            own[6].append(self.file_id)
            own[7].append(numbered.get(stream, -1))
            if rec["type"] == "PUBLISH":
                own[8].append(self.aliases.topic(rec))
                packet = getattr(rec.get("_obj"), "packet", rec.get("_obj"))
                own[9].append(packet.payload if isinstance(packet, Publish) else None)
            else:
                own[8].append(None)
                own[9].append(None)
            rows.recs.append(rec)


def _ts_ns(text: str) -> int:
    """The inverse of capture.format_ts: "-1.500000000" -> -1500000000."""
    if text.startswith("-"):
        return -_ts_ns(text[1:])
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9] or 0)


def dissect_rows(batches: Iterator[Any], options: DissectOptions, names: dict[int, str]) -> Iterator[Any]:
    """Frames sorted by (file_id, frame) in, table rows out (see the module's docstring)."""
    rows = _Rows()
    current: _File | None = None
    for batch in batches:
        file_ids, frames, stamps, links, datas = (batch.column(i).to_pylist() for i in range(5))
        for fid, number, ts, linktype, data in zip(file_ids, frames, stamps, links, datas, strict=True):
            if current is None or fid != current.file_id:
                if current is not None:
                    _finish(current, rows)
                current = _File(fid, names[fid], options)
            current.now = number
            recs = current.dissector.frame(ts, linktype, data, number)
            if recs:
                current.emit(rows, recs, number << SEQ_SHIFT)
                if rows.count >= _BATCH:
                    yield rows.batch()
    if current is not None:
        _finish(current, rows)
    if rows.count:
        yield rows.batch()


def _finish(file: _File, rows: _Rows) -> None:
    recs = file.dissector.finish()
    if recs:
        file.emit(rows, recs, END_SEQ)
