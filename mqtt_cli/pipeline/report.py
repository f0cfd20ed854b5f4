"""`mqtt analyze report`: Spark SQL over a table that `ingest` (or `record`) wrote; the answers as plain data.

    report = build_report(spark, "table/")      # a dict of sections, JSON-ready (report["seconds"]: per query)

Each section is one or two SQL queries over the view `packets`; the Python here only shapes their rows.
The table is read once: `packets` is the cached scan of the columns the queries use, and `flows` (below) a
cached query over it. The queries are independent, so they are submitted together, from threads: Spark runs
their jobs side by side on the cached data, instead of a dozen jobs one after another, each waiting for the
previous one's start-up (most of a report's time on a small table). The answers are the same either way
(`concurrent=False` runs them one at a time; the tests compare). Topics are counted by `resolved_topic` (the
topic a 5.0 topic alias stands for); a table written before that column existed is read with `topic`.

A message is a PUBLISH from a client to the broker (`direction` "to_broker"); each copy the broker sends on to a
subscriber is a delivery ("to_client"). They are counted apart everywhere: one message to three subscribers is
1 message and 3 deliveries, never 4 of anything. A PUBLISH whose direction the capture does not tell is in
`summary.publishes` (every PUBLISH packet) only. A table from `record` holds deliveries to the recorder.

Latencies pair a QoS 1/2 PUBLISH with what follows it in its flow: rows of the same connection, sender and
packet identifier, in `seq` order (the order `mqtt dump` writes them). A PUBLISH followed by a re-send (DUP) of
itself counts as re-sent, not unacknowledged; the latency is the re-send's.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mqtt_cli.core.reasons import reason_name

__all__ = ["LATENCY_LABELS", "QUERIES", "build_report", "series_label", "topic_label"]

_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400, 604800)
_POINTS = 120  # at most this many time buckets
_SERIES = 5  # topics and clients drawn over time

# The flows of QoS 1 and 2: each QoS 1/2 PUBLISH with the next three rows of its flow. Built once into the
# cached view `flows`, which three queries read.
_FLOWS = """
WITH f AS (
  SELECT capture_file, stream, packet_id, type, qos, dup, ts_ns, seq,
         CASE WHEN type IN ('PUBLISH', 'PUBREL') THEN src ELSE dst END AS sender
  FROM packets
  WHERE packet_id IS NOT NULL
    AND ((type = 'PUBLISH' AND qos IN (1, 2)) OR type IN ('PUBACK', 'PUBREC', 'PUBREL', 'PUBCOMP'))
), o AS (
  SELECT *,
    lead(type, 1) OVER w AS t1, lead(ts_ns, 1) OVER w AS ts1, lead(dup, 1) OVER w AS dup1,
    lead(type, 2) OVER w AS t2, lead(ts_ns, 2) OVER w AS ts2,
    lead(type, 3) OVER w AS t3, lead(ts_ns, 3) OVER w AS ts3
  FROM f
  WINDOW w AS (PARTITION BY capture_file, stream, sender, packet_id ORDER BY seq)
)
SELECT qos, ts_ns, t1, ts1, dup1, t2, ts2, t3, ts3 FROM o WHERE type = 'PUBLISH'
"""

#: What the report calls each latency step, in the terminal's tables and on the HTML page alike.
LATENCY_LABELS = {
    "qos1_puback": "QoS 1 PUBLISH → PUBACK",
    "qos2_pubrec": "QoS 2 PUBLISH → PUBREC",
    "qos2_pubrel": "QoS 2 PUBREC → PUBREL",
    "qos2_pubcomp": "QoS 2 PUBREL → PUBCOMP",
    "qos2_total": "QoS 2 PUBLISH → PUBCOMP",
}


def topic_label(topic: str | None) -> str:
    """A topic as the report shows it: None is a 5.0 topic alias set before the capture began."""
    return "(unknown topic alias)" if topic is None else topic or "(empty)"


def series_label(series: dict[str, Any]) -> str:
    """A line of the timeline: "topic NAME" or "client NAME"."""
    if series["kind"] == "topic":
        return f"topic {topic_label(series['name'])}"
    return f"client {series['name'] or '(unknown)'}"


_LATENCY_STEPS = {
    # name: (condition, latency in ms)
    "qos1_puback": ("qos = 1 AND t1 = 'PUBACK'", "(ts1 - ts_ns) / 1e6"),
    "qos2_pubrec": ("qos = 2 AND t1 = 'PUBREC'", "(ts1 - ts_ns) / 1e6"),
    "qos2_pubrel": ("qos = 2 AND t1 = 'PUBREC' AND t2 = 'PUBREL'", "(ts2 - ts1) / 1e6"),
    "qos2_pubcomp": ("qos = 2 AND t1 = 'PUBREC' AND t2 = 'PUBREL' AND t3 = 'PUBCOMP'", "(ts3 - ts2) / 1e6"),
    "qos2_total": ("qos = 2 AND t1 = 'PUBREC' AND t2 = 'PUBREL' AND t3 = 'PUBCOMP'", "(ts3 - ts_ns) / 1e6"),
}

# The properties' JSON text is an object (`mqtt dump --json`); tables written before 0.2 hold a [[name, value]] list.
_SERVER_KEEP_ALIVE = (
    "CAST(coalesce(get_json_object(properties, '$.server_keep_alive'), "
    "try_element_at(filter(from_json(properties, 'array<array<string>>'), x -> x[0] = 'server_keep_alive'), 1)[1])"
    " AS INT)"
)

QUERIES: dict[str, str] = {
    "summary": """
        SELECT count(*) AS packets, count(DISTINCT capture_file) AS captures,
               count(DISTINCT capture_file, stream) AS connections,
               count_if(type = 'PUBLISH') AS publishes,
               count_if(type = 'PUBLISH' AND direction = 'to_broker') AS messages,
               coalesce(sum(CASE WHEN type = 'PUBLISH' AND direction = 'to_broker' THEN payload_len END), 0)
                 AS message_bytes,
               count_if(type = 'PUBLISH' AND direction = 'to_client') AS deliveries,
               coalesce(sum(CASE WHEN type = 'PUBLISH' AND direction = 'to_client' THEN payload_len END), 0)
                 AS delivered_bytes,
               min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
               count_if(type = 'MALFORMED') AS malformed,
               count_if(error IS NOT NULL AND type <> 'MALFORMED') AS violations
        FROM packets""",
    "topics": """
        SELECT resolved_topic AS topic, count_if(direction = 'to_broker') AS messages,
               coalesce(sum(CASE WHEN direction = 'to_broker' THEN payload_len END), 0) AS payload_bytes,
               count(DISTINCT CASE WHEN direction = 'to_broker' THEN client END) AS publishers,
               count_if(direction = 'to_client') AS deliveries,
               count(DISTINCT CASE WHEN direction = 'to_client' THEN client END) AS receivers,
               min(ts_ns) AS first_ns, max(ts_ns) AS last_ns
        FROM packets WHERE type = 'PUBLISH'
        GROUP BY resolved_topic ORDER BY messages DESC, deliveries DESC, topic LIMIT {top}""",
    "clients": """
        SELECT coalesce(client, '') AS client, count(DISTINCT capture_file, stream) AS connections,
               count_if(type = 'PUBLISH' AND direction = 'to_broker') AS published,
               coalesce(sum(CASE WHEN type = 'PUBLISH' AND direction = 'to_broker' THEN payload_len END), 0)
                 AS published_bytes,
               count_if(type = 'PUBLISH' AND direction = 'to_client') AS received,
               coalesce(sum(CASE WHEN type = 'PUBLISH' AND direction = 'to_client' THEN payload_len END), 0)
                 AS received_bytes
        FROM packets
        GROUP BY coalesce(client, '') ORDER BY published + received DESC, client LIMIT {top}""",
    "timeline": """
        SELECT (ts_ns - {t0}) DIV {step} AS bucket, count_if(direction = 'to_broker') AS messages,
               coalesce(sum(CASE WHEN direction = 'to_broker' THEN payload_len END), 0) AS payload_bytes,
               count_if(direction = 'to_client') AS deliveries
        FROM packets WHERE type = 'PUBLISH' AND ts_ns IS NOT NULL
        GROUP BY 1 ORDER BY 1""",
    "timeline_series": """
        SELECT 'topic' AS kind, resolved_topic AS name, (ts_ns - {t0}) DIV {step} AS bucket, count(*) AS messages
        FROM packets WHERE type = 'PUBLISH' AND direction = 'to_broker' AND ts_ns IS NOT NULL
          AND resolved_topic IN ({topics})
        GROUP BY 1, 2, 3
        UNION ALL
        SELECT 'client', coalesce(client, ''), (ts_ns - {t0}) DIV {step}, count(*)
        FROM packets WHERE type = 'PUBLISH' AND direction = 'to_broker' AND ts_ns IS NOT NULL
          AND coalesce(client, '') IN ({clients})
        GROUP BY 1, 2, 3""",
    "flows": _FLOWS,
    "latency": "SELECT "
    + ", ".join(
        f"count_if({cond}) AS {name}_n, percentile_approx(CASE WHEN {cond} THEN {ms} END, array(0.5, 0.9, 0.99),"
        f" 10000) AS {name}_p, max(CASE WHEN {cond} THEN {ms} END) AS {name}_max"
        for name, (cond, ms) in _LATENCY_STEPS.items()
    )
    + " FROM flows",
    "latency_histogram": """
        WITH l AS (
          SELECT 'qos1_puback' AS step, (ts1 - ts_ns) / 1e6 AS ms FROM flows WHERE qos = 1 AND t1 = 'PUBACK'
          UNION ALL
          SELECT 'qos2_total', (ts3 - ts_ns) / 1e6 FROM flows
          WHERE qos = 2 AND t1 = 'PUBREC' AND t2 = 'PUBREL' AND t3 = 'PUBCOMP'
        )
        SELECT step, floor(log10(greatest(ms, 0.001)) * 4) AS bin, count(*) AS n FROM l GROUP BY 1, 2 ORDER BY 1, 2""",
    "unacknowledged": """
        SELECT qos, count_if(NOT coalesce(t1 = 'PUBLISH' AND dup1, false)
                             AND coalesce(t1, '') NOT IN ('PUBACK', 'PUBREC')) AS unacknowledged,
               count_if(qos = 2 AND t1 = 'PUBREC' AND NOT (coalesce(t2, '') = 'PUBREL'
                        AND coalesce(t3, '') = 'PUBCOMP')) AS incomplete,
               count_if(coalesce(t1 = 'PUBLISH' AND dup1, false)) AS resent
        FROM flows GROUP BY qos ORDER BY qos""",
    "dup": """
        SELECT coalesce(client, '') AS client, direction, count(*) AS resends
        FROM packets WHERE type = 'PUBLISH' AND dup
        GROUP BY 1, 2 ORDER BY resends DESC, client LIMIT {top}""",
    "sessions": """
        WITH c AS (
          SELECT capture_file, stream, max(client) AS client, max(protocol_version) AS version,
                 min(ts_ns) AS start_ns, max(ts_ns) AS end_ns, count(*) AS packets,
                 max(CASE WHEN type = 'CONNECT' THEN 1 ELSE 0 END) AS connected,
                 max(CASE WHEN type = 'DISCONNECT' THEN 1 ELSE 0 END) AS disconnected,
                 max(CASE WHEN type = 'CONNACK' AND reason_code <> 0 THEN 1 ELSE 0 END) AS refused
          FROM packets GROUP BY capture_file, stream
        )
        SELECT count(*) AS connections, count_if(connected = 1) AS with_connect,
               count_if(disconnected = 1) AS disconnected, count_if(refused = 1) AS refused,
               count_if(connected = 1 AND disconnected = 0 AND refused = 0) AS without_disconnect,
               percentile_approx((end_ns - start_ns) / 1e9, array(0.5, 0.9, 0.99), 10000) AS duration_p,
               max((end_ns - start_ns) / 1e9) AS duration_max
        FROM c""",
    "sessions_longest": """
        SELECT capture_file, stream, max(client) AS client, max(protocol_version) AS version,
               min(ts_ns) AS start_ns, (max(ts_ns) - min(ts_ns)) / 1e9 AS seconds, count(*) AS packets,
               max(CASE WHEN type = 'DISCONNECT' THEN 1 ELSE 0 END) AS disconnected
        FROM packets GROUP BY capture_file, stream ORDER BY seconds DESC, capture_file, stream LIMIT {top}""",
    "keepalive": f"""
        WITH k AS (
          SELECT capture_file, stream, client, type, direction, ts_ns, keepalive,
                 CASE WHEN type = 'CONNACK' THEN {_SERVER_KEEP_ALIVE} END AS server_keep_alive,
                 ts_ns - lag(CASE WHEN direction = 'to_broker' THEN ts_ns END)
                   IGNORE NULLS OVER (PARTITION BY capture_file, stream ORDER BY seq) AS gap
          FROM packets
        ), c AS (
          SELECT capture_file, stream, max(client) AS client,
                 coalesce(max(server_keep_alive), max(CASE WHEN type = 'CONNECT' THEN keepalive END)) AS keepalive,
                 max(CASE WHEN direction = 'to_broker' THEN gap END) / 1e9 AS max_gap,
                 count_if(type = 'PINGREQ') AS pings, count_if(type = 'PINGRESP') AS pongs
          FROM k GROUP BY capture_file, stream
        )
        SELECT capture_file, stream, client, keepalive, max_gap, pings, pongs,
               keepalive > 0 AND max_gap > 1.5 * keepalive AS overdue
        FROM c WHERE keepalive IS NOT NULL""",
    "refused": """
        SELECT protocol_version AS version, reason_code, count(*) AS refusals,
               slice(array_sort(collect_set(coalesce(client, ''))), 1, 10) AS clients
        FROM packets WHERE type = 'CONNACK' AND reason_code <> 0
        GROUP BY 1, 2 ORDER BY refusals DESC""",
    "malformed": """
        SELECT type, coalesce(packet_type, type) AS packet_type, error, count(*) AS packets,
               count(DISTINCT capture_file, stream) AS connections
        FROM packets WHERE error IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY packets DESC LIMIT {top}""",
}


# The columns the queries read: the cached scan holds these only.
_USED = (
    "capture_file", "stream", "client", "type", "qos", "dup", "packet_id", "src", "dst", "direction", "ts_ns",
    "seq", "payload_len", "resolved_topic", "protocol_version", "reason_code", "keepalive", "properties", "error",
    "packet_type",
)  # fmt: skip


class _Runner:
    """Runs named queries, timing each (`seconds`), together from threads or one after another."""

    def __init__(self, spark: Any, concurrent: bool) -> None:
        self.spark = spark
        self.concurrent = concurrent
        self.seconds: dict[str, float] = {}

    def one(self, name: str, **fmt: Any) -> list[dict[str, Any]]:
        clock = time.perf_counter()
        rows = [row.asDict(recursive=True) for row in self.spark.sql(QUERIES[name].format(**fmt)).collect()]
        self.seconds[name] = round(time.perf_counter() - clock, 3)
        return rows

    def many(self, jobs: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """{name: format arguments} -> {name: rows}."""
        if not self.concurrent or len(jobs) < 2:
            return {name: self.one(name, **fmt) for name, fmt in jobs.items()}
        with ThreadPoolExecutor(len(jobs), thread_name_prefix="report") as pool:
            futures = {name: pool.submit(self.one, name, **fmt) for name, fmt in jobs.items()}
            return {name: future.result() for name, future in futures.items()}


def _quote(values: list[str]) -> str:
    return ", ".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values) or "NULL"


def _percentiles(values: list[float] | None) -> dict[str, float | None]:
    values = values or [None, None, None]
    return {"p50": values[0], "p90": values[1], "p99": values[2]}


def build_report(spark: Any, path: str, top: int = 20, *, concurrent: bool = True) -> dict[str, Any]:
    """Every section of the report on the Parquet table at `path` (see the module's docstring)."""
    run = _Runner(spark, concurrent)
    seconds = run.seconds
    clock = time.perf_counter()
    table = spark.read.parquet(path)
    if "resolved_topic" not in table.columns:  # a table from before topic aliases were resolved
        table = table.withColumn("resolved_topic", table["topic"])
    packets = table.select(*_USED).cache()
    packets.createOrReplaceTempView("packets")
    flows = spark.sql(QUERIES["flows"]).cache()  # read by three queries
    flows.createOrReplaceTempView("flows")
    seconds["load"] = round(time.perf_counter() - clock, 3)
    try:
        with_top = ("topics", "clients", "dup", "sessions_longest", "malformed")
        plain = ("summary", "latency", "latency_histogram", "unacknowledged", "sessions", "keepalive", "refused")
        got = run.many({**{name: {"top": top} for name in with_top}, **{name: {} for name in plain}})
        summary = got["summary"][0]
        report: dict[str, Any] = {"table": path, "summary": summary, "topics": got["topics"], "clients": got["clients"]}
        report["timeline"] = _timeline(run, summary, report)
    finally:
        flows.unpersist()
        packets.unpersist()
    lat = got["latency"][0]
    report["latency"] = {
        name: {"count": lat[f"{name}_n"], **_percentiles(lat[f"{name}_p"]), "max": lat[f"{name}_max"]}
        for name in _LATENCY_STEPS
    }
    report["latency_histogram"] = {}
    for row in got["latency_histogram"]:
        # Bins of a quarter decade: bin b holds latencies in [10**(b/4), 10**((b+1)/4)) ms.
        report["latency_histogram"].setdefault(row["step"], []).append(
            {"from_ms": 10 ** (row["bin"] / 4), "to_ms": 10 ** ((row["bin"] + 1) / 4), "count": row["n"]}
        )
    report["unacknowledged"] = got["unacknowledged"]
    report["dup"] = got["dup"]

    sessions = got["sessions"][0]
    sessions["duration"] = {**_percentiles(sessions.pop("duration_p")), "max": sessions.pop("duration_max")}
    sessions["longest"] = got["sessions_longest"]
    report["sessions"] = sessions

    conns = got["keepalive"]
    report["keepalive"] = {
        "connections": len(conns),
        "without_keepalive": sum(1 for c in conns if c["keepalive"] == 0),
        "pings": sum(c["pings"] for c in conns),
        "pongs": sum(c["pongs"] for c in conns),
        "unanswered_pings": sum(max(c["pings"] - c["pongs"], 0) for c in conns),
        "overdue": [c for c in conns if c["overdue"]][:top],
        "overdue_count": sum(1 for c in conns if c["overdue"]),
    }
    refused = got["refused"]
    for row in refused:
        row["reason"] = reason_name(row["reason_code"], 2, row["version"] or 4)
    report["refused"] = refused
    report["malformed"] = got["malformed"]
    seconds["total"] = round(time.perf_counter() - clock, 3)
    report["seconds"] = seconds
    return report


def _timeline(run: _Runner, summary: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """Messages (and their payload bytes) and deliveries per time bucket; the messages of the busiest topics and
    publishers."""
    first, last = summary["first_ns"], summary["last_ns"]
    if first is None or not summary["publishes"]:
        return {"start_ns": first, "step_seconds": None, "points": [], "series": []}
    span = (last - first) / 1e9
    step = next((b for b in _BUCKETS if span / b <= _POINTS), _BUCKETS[-1])
    fmt = {"t0": first, "step": step * 1_000_000_000}
    count = int(span // step) + 1
    points = [{"t": i * step, "messages": 0, "payload_bytes": 0, "deliveries": 0} for i in range(count)]
    topics = [t["topic"] for t in report["topics"] if t["topic"] is not None and t["messages"]][:_SERIES]
    publishers = sorted((c for c in report["clients"] if c["published"]), key=lambda c: -c["published"])
    clients = [c["client"] for c in publishers[:_SERIES]]
    got = run.many({"timeline": fmt, "timeline_series": {"topics": _quote(topics), "clients": _quote(clients), **fmt}})
    for row in got["timeline"]:
        points[row["bucket"]].update(
            messages=row["messages"], payload_bytes=row["payload_bytes"], deliveries=row["deliveries"]
        )
    series: dict[tuple[str, str], list[int]] = {}
    for row in got["timeline_series"]:
        values = series.setdefault((row["kind"], row["name"]), [0] * count)
        values[row["bucket"]] = row["messages"]
    return {
        "start_ns": first,
        "step_seconds": step,
        "points": points,
        # The busiest first, topics then clients (as the lists above): the same order, and colours, every time.
        "series": [
            {"kind": kind, "name": name, "messages": series[(kind, name)]}
            for kind, names in (("topic", topics), ("client", clients))
            for name in names
            if (kind, name) in series
        ],
    }
