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
from pathlib import Path
from typing import Any

from .schema import TABLE_COLUMNS

__all__ = ["record", "recorded_columns"]


def recorded_columns(broker: str, client_id: str | None) -> list[Any]:
    """The table's columns computed from the data source's (topic, payload, qos, retain, dup, properties,
    timestamp)."""
    from pyspark.sql import functions as F

    micros = F.expr("unix_micros(timestamp)")
    # The 5.0 properties (the data source's JSON object, named as Properties' attributes) as typed columns.
    fields = (
        "topic_alias:int,payload_format_indicator:int,message_expiry_interval:bigint,content_type:string,"
        "response_topic:string,correlation_data:string,subscription_identifiers:array<bigint>,"
        "user_properties:array<array<string>>"
    )

    def prop(name: str) -> Any:
        return F.expr(f"from_json(properties, 'struct<{fields}>').{name}")

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
        "resolved_topic": F.col("topic"),  # our client resolves the broker's topic aliases itself
        "payload": F.col("payload"),
        "topic_alias": prop("topic_alias"),
        "payload_format_indicator": prop("payload_format_indicator"),
        "message_expiry_interval": prop("message_expiry_interval"),
        "content_type": prop("content_type"),
        "response_topic": prop("response_topic"),
        "correlation_data": F.unhex(prop("correlation_data")),
        "subscription_identifiers": prop("subscription_identifiers"),
        "user_properties": prop("user_properties"),
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
    on_started: Callable[[], None] | None = None,
    stop: Callable[[], bool] | None = None,
    start_timeout: float = 120.0,
) -> int:
    """Records until `duration` seconds have passed since the subscription, or `count` rows are written (neither:
    until KeyboardInterrupt, or `stop()` true); returns the rows written. `on_started` is called once the broker
    has answered SUBSCRIBE: messages published from then on are recorded.

    Ending is a drain, not a cut: the source sends DISCONNECT, and the query runs until a micro-batch has written
    every message received before it (the client acknowledged them: cutting would lose them). A second
    KeyboardInterrupt, or the drain taking over a minute, stops the query at once."""
    import shutil
    import tempfile

    from mqtt_cli.net.transports import parse_url

    from .datasource import register

    register(spark)
    status = Path(tempfile.mkdtemp(prefix="mqtt-analyze-record-"))
    opts = {"url": url, "topic": ",".join(topics), **(options or {}), "status_dir": str(status)}
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

    def written() -> int:
        for progress in query.recentProgress:
            rows[progress["batchId"]] = progress["numInputRows"]
        return sum(rows.values())

    def stopping() -> bool:
        return stop is not None and stop()

    try:
        # The source connects at the query's first offset request, seconds after start(): wait for SUBACK.
        limit = time.monotonic() + start_timeout
        while not (status / "subscribed.json").exists():
            query.awaitTermination(0.2)  # raises the query's failure (no connection, subscription refused)
            if not query.isActive or stopping():
                return written()
            if time.monotonic() > limit:
                raise RuntimeError(f"no subscription at {broker} after {start_timeout:.0f} s")
        if on_started is not None:
            on_started()
        deadline = None if duration is None else time.monotonic() + duration
        while query.isActive:
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                break
            query.awaitTermination(left)
            done = written()
            if on_progress is not None:
                on_progress(done)
            if (count is not None and done >= count) or stopping():
                break
        _drain(query, status, trigger_seconds)
    finally:
        query.stop()
        shutil.rmtree(status, ignore_errors=True)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return written()


def _drain(query: Any, status: Path, trigger_seconds: float) -> None:
    """Asks the source to disconnect, then waits until a micro-batch has committed the offset holding everything
    it received (bounded: a minute and a few triggers)."""
    import json

    (status / "stop").touch()
    limit = time.monotonic() + 60 + 5 * trigger_seconds
    received = None
    while query.isActive and time.monotonic() < limit:
        if received is None and (status / "stopped.json").exists():
            said = json.loads((status / "stopped.json").read_text())
            received = said["received"]
            if received <= said["base"]:
                return  # nothing arrived in this run
        if received is not None and _committed(query) >= received:
            return
        query.awaitTermination(0.2)


def _committed(query: Any) -> int:
    """The highest offset a finished micro-batch of the query has read up to (-1: none yet)."""
    import json

    best = -1
    for progress in query.recentProgress:
        for source in progress.get("sources", ()):
            end = source.get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
            if isinstance(end, dict) and "received" in end:
                best = max(best, int(end["received"]))
    return best
