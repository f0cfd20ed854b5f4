"""The table `mqtt analyze ingest` writes: one row per MQTT packet, every key of `mqtt dump --json` under its own
name, and columns of our own.

Types follow the JSON: numbers are integers, `ts` stays the exact decimal string `mqtt dump` writes, lists of
strings and integers are arrays. `properties` and `will_properties` are kept as the compact JSON text of the
object `mqtt dump --json` writes (Properties' attribute names): Spark SQL reads them with `get_json_object`.

Columns of our own:

* `capture_file`: the capture's path as given (or the broker URL for `mqtt analyze record`).
* `conn_key`: the connection, "client address -> broker address" ("a <-> b" when neither side is known).
* `direction`: "to_broker", "to_client", or null when neither a CONNECT nor a port tells.
* `protocol_version`: 3 (3.1), 4 (3.1.1) or 5: the connection's, from its CONNECT (else --protocol-version, else 4).
* `ts_ns`: `ts` as integer nanoseconds; `time`: the same as a Spark TIMESTAMP (microseconds).
* `seq`: orders the rows as `mqtt dump` writes them (exactly within a connection): the number of the frame
  whose reading produced the record times 2**20, plus its place among that frame's records; records of the
  capture's end come last.
* `resolved_topic` (PUBLISH): the topic the message is about. `topic` is as on the wire, empty when a 5.0
  topic alias stands for it; `resolved_topic` is then the topic the alias was set to in that direction of that
  connection (null when it was set before the capture began). The report counts topics by it.
* `payload` (PUBLISH): the message's payload bytes (a payload cut short by a capture gap is not there: null).

Then the MQTT 5.0 properties of a packet as typed columns (PROPERTY_COLUMNS), named as the attributes of
`mqtt_cli.core.Properties` and as `mqtt sub --json` names them: `topic_alias`, `payload_format_indicator`,
`message_expiry_interval`, `content_type`, `response_topic`, `correlation_data` (bytes), `subscription_identifiers`
(a list, wire order), `user_properties` (a list of [key, value] pairs, wire order); null when absent.

(`error`, the first protocol rule a packet breaks or what is wrong with bytes that are no packet, is a key of
`mqtt dump` already.)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DUMP_COLUMNS",
    "END_SEQ",
    "JSON_COLUMNS",
    "OWN_COLUMNS",
    "PROPERTY_COLUMNS",
    "SEQ_SHIFT",
    "TABLE_COLUMNS",
    "arrow_schema",
    "ddl",
]

# (name, Spark SQL type) of each key `mqtt dump --json` can write, in a stable order.
DUMP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", "string"),
    ("frame", "bigint"),
    ("src", "string"),
    ("dst", "string"),
    ("type", "string"),
    ("offset", "bigint"),
    ("stream", "int"),
    ("client", "string"),
    ("from_client", "boolean"),
    ("remaining_length", "int"),
    ("flags", "int"),
    ("qos", "int"),
    ("retain", "boolean"),
    ("dup", "boolean"),
    ("packet_id", "int"),
    ("topic", "string"),
    ("payload_len", "bigint"),
    ("payload_sha256", "string"),
    ("properties", "string"),
    ("client_id", "string"),
    ("proto_name", "string"),
    ("proto_version", "int"),
    ("clean_session", "boolean"),
    ("keepalive", "int"),
    ("username", "string"),
    ("password_len", "int"),
    ("will_topic", "string"),
    ("will_qos", "int"),
    ("will_retain", "boolean"),
    ("will_payload_len", "bigint"),
    ("will_properties", "string"),
    ("session_present", "boolean"),
    ("reason_code", "int"),
    ("reason_codes", "array<int>"),
    ("topics", "array<string>"),
    ("sub_options", "array<int>"),
    ("error", "string"),
    ("errors", "array<string>"),
    ("packet_type", "string"),
    ("lost_bytes", "bigint"),
    ("skipped_bytes", "bigint"),
    ("encrypted", "boolean"),
)
JSON_COLUMNS = frozenset({"properties", "will_properties"})

OWN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_file", "string"),
    ("conn_key", "string"),
    ("direction", "string"),
    ("protocol_version", "int"),
    ("ts_ns", "bigint"),
    ("time", "timestamp"),
    ("seq", "bigint"),
    ("resolved_topic", "string"),
    ("payload", "binary"),
)
# Named as mqtt_cli.core.Properties' attributes (the repeatable ones in the plural, as lists).
PROPERTY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic_alias", "int"),
    ("payload_format_indicator", "int"),
    ("message_expiry_interval", "bigint"),
    ("content_type", "string"),
    ("response_topic", "string"),
    ("correlation_data", "binary"),
    ("subscription_identifiers", "array<int>"),
    ("user_properties", "array<array<string>>"),
)
TABLE_COLUMNS = (*DUMP_COLUMNS, *OWN_COLUMNS, *PROPERTY_COLUMNS)

SEQ_SHIFT = 20
END_SEQ = ((1 << 42) - 1) << SEQ_SHIFT  # frame part of `seq` for the records of a capture's end


def ddl(columns: tuple[tuple[str, str], ...] = TABLE_COLUMNS) -> str:
    """The columns as a Spark DDL string (what mapInArrow and the data source API take for a schema)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


def arrow_schema(columns: tuple[tuple[str, str], ...]) -> Any:
    """The columns as a pyarrow schema (for the batches Python workers hand to Spark)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "bigint": pa.int64(),
        "int": pa.int32(),
        "boolean": pa.bool_(),
        "binary": pa.binary(),
        "array<int>": pa.list_(pa.int32()),
        "array<string>": pa.list_(pa.string()),
        "array<array<string>>": pa.list_(pa.list_(pa.string())),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(name, types[kind]) for name, kind in columns])
