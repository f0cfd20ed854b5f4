"""`mqtt analyze record`: Spark Structured Streaming from a live broker into the same kind of table as `ingest`.

    rows = record(spark, "mqtt://broker:1883", ["sensors/#"], "live/", duration=60)

The messages come through the `mqtt` data source (datasource.py) and are written as Parquet every trigger
interval, with a checkpoint in `DIR/_checkpoint`. Each message is a PUBLISH row as our client received it:
`ts`/`time` is its arrival, `src` the broker, `direction` "to_client", `capture_file` the broker URL (without
credentials); what only a capture can tell (frame, TCP offset, packet id, lengths on the wire) is null. The
report's queries run on it unchanged (topics, clients, rates over time, DUP re-sends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .schema import TABLE_COLUMNS

__all__ = ["record", "recorded_columns"]


def recorded_columns(broker: str, client_id: str | None) -> list[Any]:
    """The table's columns computed from the data source's (topic, payload, qos, retain, dup, properties,
    timestamp)."""
    from pyspark.sql import functions as F

    micros = F.expr("unix_micros(timestamp)")
    known: dict[str, Any] = {
        "ts": F.concat(
            (micros.cast("bigint") / 1_000_000).cast("bigint").cast("string"),
            F.lit("."),
            F.lpad((micros % 1_000_000).cast("string"), 6, "0"),
            F.lit("000"),
        ),
        "src": F.lit(broker),
        "type": F.lit("PUBLISH"),
        "stream": F.lit(0),
        "client": F.lit(client_id),
        "from_client": F.lit(False),
        "flags": (F.col("qos") * 2 + F.col("retain").cast("int") + F.col("dup").cast("int") * 8),
        "qos": F.col("qos"),
        "retain": F.col("retain"),
        "dup": F.col("dup"),
        "topic": F.col("topic"),
        "payload_len": F.length("payload").cast("bigint"),
        "payload_sha256": F.sha2(F.col("payload"), 256),
        "properties": F.col("properties"),
        "capture_file": F.lit(broker),
        "conn_key": F.lit(f"{client_id or 'mqtt analyze record'} -> {broker}"),
        "direction": F.lit("to_client"),
        "protocol_version": F.when(F.col("properties").isNotNull(), F.lit(5)),
        "ts_ns": micros * 1000,
        "time": F.col("timestamp"),
        "seq": micros,
    }
    return [(known[name] if name in known else F.lit(None)).cast(kind).alias(name) for name, kind in TABLE_COLUMNS]


def record(
    spark: Any,
    url: str,
    topics: Sequence[str],
    out: str,
    *,
    duration: float | None = None,
    options: dict[str, str] | None = None,
    count: int | None = None,
    trigger_seconds: float = 1.0,
    on_progress: Callable[[int], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Records until `duration` seconds have passed or `count` rows are written (neither: until
    KeyboardInterrupt, or `stop()` true); returns the rows written. The query is stopped on the way out in every
    case (Ctrl-C included); messages received after its last micro-batch are not written (at most once)."""
    from mqtt_cli.net.transports import parse_url

    from .datasource import register

    register(spark)
    opts = {"url": url, "topic": ",".join(topics), **(options or {})}
    broker = str(parse_url(url).endpoint)  # no user name or password in the table
    stream = spark.readStream.format("mqtt")
    for key, value in opts.items():
        stream = stream.option(key, value)
    table = stream.load().select(*recorded_columns(broker, opts.get("client_id")))
    query = (
        table.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", f"{out.rstrip('/')}/_checkpoint")
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )
    rows: dict[int, int] = {}
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while query.isActive:
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                break
            query.awaitTermination(left)  # raises the query's failure, if it failed
            for progress in query.recentProgress:
                rows[progress["batchId"]] = progress["numInputRows"]
            written = sum(rows.values())
            if on_progress is not None:
                on_progress(written)
            if (count is not None and written >= count) or (stop is not None and stop()):
                break
    finally:
        query.stop()
    for progress in query.recentProgress:
        rows[progress["batchId"]] = progress["numInputRows"]
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(rows.values())
