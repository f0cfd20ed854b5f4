"""JSON lines of dump records (docs/dump-format.md): the output of `mqtt dump --json`, written in batches.

Apart from `mqtt_cli.render` on purpose: it needs no rich, so `mqtt dump --json` does not import it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import IO, Any

__all__ = ["JsonLines", "record_encoder"]


class JsonLines:
    """Records as JSON lines (UTF-8), written in batches: the fast path of `mqtt dump --json`."""

    def __init__(self, out: IO[bytes] | None = None, batch: int = 2048) -> None:
        self._out = out or sys.stdout.buffer
        self._encode = record_encoder()
        self._lines: list[str] = []
        self._batch = batch

    def write(self, rec: dict[str, Any] | str) -> None:
        """Writes a record: a dict, or its JSON text already (capture.records.RecordBuilder.build_texts)."""
        self._lines.append(rec if type(rec) is str else self._encode(rec))  # type: ignore[arg-type]
        if len(self._lines) >= self._batch:
            self.flush()

    def write_batches(self, batches: Iterable[list[dict[str, Any] | str]]) -> None:
        """Writes lists of records (capture.Dissector.batches): the hot loop of `mqtt dump --json`."""
        encode = self._encode
        lines = self._lines
        append = lines.append
        batch = self._batch
        for records in batches:
            for rec in records:
                append(rec if type(rec) is str else encode(rec))  # type: ignore[arg-type]
            if len(lines) >= batch:
                self.flush()
        self.flush()

    def flush(self) -> None:
        if self._lines:
            self._out.write(("\n".join(self._lines) + "\n").encode("utf-8", "surrogateescape"))
            self._lines.clear()
        self._out.flush()

    def close(self) -> None:
        self.flush()


def record_encoder() -> Callable[[dict[str, Any]], str]:
    """A compact, non-ASCII-escaping JSON encoder for one record.

    json.JSONEncoder.encode builds its C encoder anew on every call, which costs more than encoding a small
    record: it is built once here. And the PUBLISH records of the hot path (exactly the keys `build_packets`
    writes, in its order) are formatted directly, two to three times faster than through the encoder; tests
    check that both give the same text."""
    import json.encoder

    make = json.encoder.c_make_encoder
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
    string = json.encoder.encode_basestring
    encode = make(None, _not_json, string, None, ":", ",", False, False, True)
    join = "".join
    from mqtt_cli.capture.records import PUBLISH_KEYS_V4, PUBLISH_KEYS_V5
    from mqtt_cli.core.properties import properties_json

    plain, with_props = len(PUBLISH_KEYS_V4), len(PUBLISH_KEYS_V5)
    bools = {True: "true", False: "false", None: "null"}

    def encode_record(rec: dict[str, Any]) -> str:
        size = len(rec)
        if (
            rec.get("type") != "PUBLISH"
            or (size != plain and size != with_props)
            or "error" in rec
            or rec["src"] is None
        ):
            if "properties" in rec or "will_properties" in rec:
                rec = _json_properties(rec)
            return join(encode(rec, 0))
        ts = rec["ts"]
        pid = rec["packet_id"]
        client = rec["client"]
        text = (
            f'{{"ts":{"null" if ts is None else string(ts)},"frame":{rec["frame"]},"src":{string(rec["src"])},'
            f'"dst":{string(rec["dst"])},"type":"PUBLISH","offset":{rec["offset"]},"stream":{rec["stream"]},'
            f'"client":{"null" if client is None else string(client)},"from_client":{bools[rec["from_client"]]},'
            f'"remaining_length":{rec["remaining_length"]},"flags":{rec["flags"]},"qos":{rec["qos"]},'
            f'"retain":{bools[rec["retain"]]},"dup":{bools[rec["dup"]]},"packet_id":{"null" if pid is None else pid},'
            f'"topic":{string(rec["topic"])},"payload_len":{rec["payload_len"]},'
            f'"payload_sha256":"{rec["payload_sha256"]}"'
        )
        if size == with_props:
            props = rec["properties"]
            return f'{text},"properties":{join(encode(properties_json(props), 0)) if props else "{}"}}}'
        return text + "}"

    return encode_record


def _json_properties(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with its properties as the JSON object (a record's are `[name, value]` pairs, as the
    renderers and the Parquet table take them)."""
    from mqtt_cli.core.properties import properties_json

    out = dict(rec)
    for key in ("properties", "will_properties"):
        if out.get(key) is not None:
            out[key] = properties_json(out[key])
    return out


def _not_json(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
