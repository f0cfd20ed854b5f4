"""The `mqtt` Spark data source (PySpark >= 4.0 Python data source API), built on our trio client.

    from mqtt_cli.pipeline.datasource import register
    register(spark)
    df = spark.readStream.format("mqtt").option("url", "mqtt://broker:1883").option("topic", "a/#").load()
    df.write.format("mqtt").option("url", "mqtt://broker:1883").save()          # columns: topic, payload, ...
    df.writeStream.format("mqtt").option("url", ...).option("checkpointLocation", ...).start()

Columns: `topic` string, `payload` binary (a string column is written as UTF-8), `qos` int, `retain` boolean,
`properties` string (5.0 properties as `mqtt sub --json` and `mqtt dump --json` write them: the JSON text of an
object named as Properties' attributes, `user_properties` a list of `[key, value]`; null on a 3.1.1 connection;
writing also takes the `[[name, value], ...]` list of earlier versions), and when reading also `dup` boolean
and `timestamp` (when the message arrived).

Options (names are case-insensitive):

| option | meaning |
|---|---|
| url | mqtt://, mqtts://, ws://, wss:// or unix:// broker URL (user:password@ allowed); required |
| topic | reading: topic filters, comma-separated (also a `topic` in the URL path); required |
| qos | reading: the subscription's QoS (default 1); writing: QoS of rows without one (default 0) |
| client_id | the client identifier (default: random); writers add the partition and attempt to it |
| persistent | reading: "true" keeps the session at the broker (clean start 0, session expiry): messages |
|   | published while the query is down are delivered when it comes back; needs client_id |
| session_expiry | seconds the broker keeps a persistent session (default 3600; 5.0) |
| version | 3.1.1 or 5 (default: 5, then 3.1.1 if the broker refuses it) |
| username, password, keepalive, connect_timeout | as for `mqtt sub` |
| max_buffered | reading: messages held between micro-batches before the source stops reading the socket |
|   | (default 100000): TCP then holds the broker back |
| status_dir | reading: a directory through which the query's owner follows and ends the subscription (the |
|   | reader runs in a Python process of Spark's own): the source writes `subscribed.json` there once the |
|   | broker has answered SUBSCRIBE; when a file `stop` appears, it sends DISCONNECT at its next offset |
|   | request and writes `stopped.json` ({"received": N, "base": B}: the offset holding every message it |
|   | took, and the one it started from) |

Delivery when reading is **at most once**: MQTT cannot replay, and the client acknowledges a message when it
arrives, before Spark has written it. A micro-batch that Spark replays after a failure comes back empty.
With `persistent`, messages sent while the query is stopped wait at the broker instead of being lost.

How it runs: the stream reader lives in a Python process on the driver (PySpark's streaming source runner,
started by the JVM, not the process that started the query; Spark calls `latestOffset`, `partitions`
and `commit` there). It connects on first use, from a thread of its own running trio, and buffers messages;
offsets count messages received. `partitions(start, end)` hands the messages themselves to the executors inside
the input partitions, so `read()` on an executor never connects: a second connection with the same client id
would take the session over. Readers and writers are pickled and instantiated several times: sockets and
threads are opened lazily and dropped when pickled. Writers connect once per task, publish every row, and wait
for the acknowledgements (QoS 1/2) before their task commits.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import secrets
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from mqtt_cli.core.properties import Properties, properties_from_json

__all__ = [
    "SOURCE_SCHEMA",
    "MqttDataSource",
    "MqttOptions",
    "properties_from_column",
    "properties_to_json",
    "register",
]

SOURCE_SCHEMA = (
    "topic string, payload binary, qos int, retain boolean, dup boolean, properties string, timestamp timestamp"
)
_PARTITION_ROWS = 50_000
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def register(spark: Any) -> None:
    """Makes `format("mqtt")` known to this session."""
    spark.dataSource.register(MqttDataSource)


def properties_to_json(props: Properties) -> str:
    return _compact(props.as_json())


def properties_from_column(text: str | None) -> Properties:
    """A row's `properties` (properties_to_json's text; null or empty: none) as a client may publish them: the
    connection's and the delivery's own are left out. Raises PropertiesJsonError (a ValueError)."""
    return properties_from_json(json.loads(text) if text else None, to_publish=True)


class MqttOptions:
    """The data source's options, checked once (on the driver, where errors reach the user)."""

    def __init__(self, options: dict[str, str]) -> None:
        from mqtt_cli.net.transports import parse_url

        opts = {k.lower(): v for k, v in options.items()}
        url = opts.get("url")
        if not url:
            raise ValueError("the mqtt data source needs option url (mqtt://host:port)")
        parsed = parse_url(url)
        self.url = url
        self.endpoint = parsed.endpoint
        self.username = opts.get("username", parsed.username)
        self.password = opts.get("password", parsed.password)
        topics = [t.strip() for t in opts.get("topic", "").split(",") if t.strip()]
        if parsed.topic:
            topics.append(parsed.topic)
        self.topics = topics
        self.qos = int(opts["qos"]) if "qos" in opts else None
        self.client_id = opts.get("client_id", "")
        self.persistent = opts.get("persistent", "false").lower() in ("1", "true", "yes")
        if self.persistent and not self.client_id:
            raise ValueError("option persistent needs option client_id: the broker finds the session by it")
        self.session_expiry = int(opts.get("session_expiry", "3600"))
        version = opts.get("version")
        self.version = {"3.1.1": 4, "311": 4, "4": 4, "5": 5, "5.0": 5}.get(version or "")
        if version and self.version is None:
            raise ValueError(f"option version {version!r}: use 3.1.1 or 5")
        self.keepalive = int(opts.get("keepalive", "60"))
        self.connect_timeout = float(opts.get("connect_timeout", "10"))
        self.max_buffered = int(opts.get("max_buffered", "100000"))
        self.status_dir = opts.get("status_dir") or None

    def settings(self, client_id: str, persistent: bool = False) -> Any:
        from mqtt_cli.net.client import ClientSettings

        return ClientSettings(
            endpoint=self.endpoint,
            ssl_context=_ssl_context() if self.endpoint.tls else None,
            client_id=client_id,
            version=self.version,
            keepalive=self.keepalive,
            clean_start=not persistent,
            session_expiry=self.session_expiry if persistent else None,
            username=self.username,
            password=self.password.encode() if self.password is not None else None,
            connect_timeout=self.connect_timeout,
        )


def _ssl_context() -> Any:
    import ssl

    return ssl.create_default_context()


class MqttDataSource(DataSource):
    """`format("mqtt")`: see the module's docstring."""

    @classmethod
    def name(cls) -> str:
        return "mqtt"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        raise ValueError("the mqtt data source reads a live broker: use spark.readStream.format('mqtt')")

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MqttStreamReader(self.options)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return MqttWriter(self.options)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return MqttStreamWriter(self.options)


# --- reading -----------------------------------------------------------------------------------------------------


class _MessagesPartition(InputPartition):
    """A micro-batch's messages, carried to the executor that turns them into rows."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(len(rows))
        self.rows = rows


class _Feed:
    """A connection to the broker in a thread running trio; messages buffered and numbered from `base`."""

    def __init__(self, options: MqttOptions, base: int) -> None:
        self.options = options
        self.base = base
        self.received = base
        self.buffer: deque[tuple[int, tuple[Any, ...]]] = deque()
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.connected = threading.Event()
        self._stop: Any = None  # set from trio: cancels the connection
        self._thread = threading.Thread(target=self._run, name="mqtt-source", daemon=True)
        self._thread.start()
        if not self.connected.wait(options.connect_timeout + 5) and self.error is None:
            self.error = TimeoutError(f"no connection to {options.url} after {options.connect_timeout} s")
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"mqtt data source: {self.error}") from self.error

    def _run(self) -> None:
        import trio

        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to Spark by the next latestOffset()
            self.error = exc
        finally:
            self.connected.set()

    async def _main(self) -> None:
        import trio

        from mqtt_cli.core.packets import Publish, Subscription
        from mqtt_cli.net.client import open_client

        opts = self.options
        client_id = opts.client_id or "mqtt-spark-" + secrets.token_hex(5)
        token = trio.lowlevel.current_trio_token()
        ending = trio.Event()
        reading = False

        def end() -> None:
            # Connected: DISCONNECT first (cancelling the connection outright would end it without one).
            ending.set()
            if not reading:
                scope.cancel()

        with trio.CancelScope() as scope:
            self._stop = lambda: token.run_sync_soon(end)
            async with open_client(opts.settings(client_id, opts.persistent)) as client:
                qos = 1 if opts.qos is None else opts.qos

                async def subscribe() -> None:
                    codes = await client.subscribe([Subscription(t, qos) for t in opts.topics])
                    refused = [t for t, code in zip(opts.topics, codes, strict=False) if code >= 0x80]
                    if refused:
                        raise RuntimeError(f"the broker refused the subscription to {', '.join(refused)}")
                    self.connected.set()
                    _tell(opts.status_dir, "subscribed.json", {"client_id": client_id, "version": client.version})

                v5 = client.version == 5
                # Read while SUBSCRIBE is answered: a resumed session's queue can come first, and a full message
                # buffer would hold SUBACK back behind it.
                async with trio.open_nursery() as nursery:

                    async def disconnect_when_asked() -> None:
                        await ending.wait()
                        await client.disconnect()
                        nursery.cancel_scope.cancel()

                    reading = True
                    if ending.is_set():
                        return
                    nursery.start_soon(disconnect_when_asked)
                    nursery.start_soon(subscribe)
                    async for msg in client.messages:
                        if not isinstance(msg, Publish):
                            continue
                        while len(self.buffer) >= opts.max_buffered:
                            await trio.sleep(0.05)  # Spark is behind: stop reading, TCP holds the broker back
                        now = datetime.datetime.now(datetime.UTC)
                        props = properties_to_json(msg.properties) if v5 else None
                        row = (msg.topic, msg.payload, msg.qos, msg.retain, msg.dup, props, now)
                        with self.lock:
                            self.received += 1
                            self.buffer.append((self.received, row))

    @property
    def closed(self) -> bool:
        return not self._thread.is_alive()

    def take(self, start: int, end: int) -> list[tuple[Any, ...]]:
        with self.lock:
            return [row for number, row in self.buffer if start < number <= end]

    def forget(self, end: int) -> None:
        with self.lock:
            while self.buffer and self.buffer[0][0] <= end:
                self.buffer.popleft()

    def close(self) -> None:
        if self._stop is not None:
            with contextlib.suppress(RuntimeError):  # trio already finished
                self._stop()
        self._thread.join(10)


def _tell(folder: str | None, name: str, content: dict[str, Any]) -> None:
    """Writes `folder/name` whole (a rename), for the query's owner that polls for it."""
    if folder is None:
        return
    import os

    part = os.path.join(folder, f".{name}.part")
    with open(part, "w", encoding="utf-8") as f:
        json.dump(content, f)
    os.replace(part, os.path.join(folder, name))


class MqttStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)
        self._opts = MqttOptions(self.options)  # errors in the options surface at start, on the driver
        if not self._opts.topics:
            raise ValueError("the mqtt data source needs option topic (filters, comma-separated) to read")
        self._feed: _Feed | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_feed"] = None  # a thread and a socket do not travel; a copy connects on its own if ever asked to
        return state

    def _ensure(self, base: int) -> _Feed:
        if self._feed is None:
            self._feed = _Feed(self._opts, base)
        self._feed.check()
        return self._feed

    def initialOffset(self) -> dict:
        return {"received": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        feed = self._ensure(int((start or {}).get("received", 0)))
        status = self._opts.status_dir
        if status is not None and not feed.closed:
            import os

            if os.path.exists(os.path.join(status, "stop")):
                # The owner is ending the query: DISCONNECT now; what arrived until then is in this offset, and
                # the owner lets the query run until a micro-batch has written it.
                feed.close()
                _tell(status, "stopped.json", {"received": feed.received, "base": feed.base})
        return {"received": feed.received}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        low, high = int(start.get("received", 0)), int(end["received"])
        if self._feed is None or high <= low:
            return []  # a batch from before this process started (a replay): MQTT cannot give it again
        rows = self._feed.take(low, high)
        return [_MessagesPartition(rows[i : i + _PARTITION_ROWS]) for i in range(0, len(rows), _PARTITION_ROWS)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _MessagesPartition)
        return iter(partition.rows)

    def commit(self, end: dict) -> None:
        if self._feed is not None:
            self._feed.forget(int(end["received"]))

    def stop(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None


# --- writing -----------------------------------------------------------------------------------------------------


class MqttCommit(WriterCommitMessage):
    def __init__(self, published: int) -> None:
        self.published = published


def _publish_rows(options: dict[str, str], rows: Iterator[Any]) -> int:
    """Publishes every row from this task's own connection; returns how many, once all are acknowledged."""
    import trio

    from mqtt_cli.net.client import open_client

    opts = MqttOptions(options)
    default_qos = 0 if opts.qos is None else opts.qos
    client_id = opts.client_id or "mqtt-spark-w-" + secrets.token_hex(5)
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and opts.client_id:
            client_id = f"{opts.client_id}-{ctx.partitionId()}-{ctx.attemptNumber()}"
    except ImportError:  # pragma: no cover
        pass

    async def main() -> int:
        count = 0
        async with open_client(opts.settings(client_id)) as client:
            for row in rows:
                rec = row.asDict() if hasattr(row, "asDict") else dict(row)
                topic = rec.get("topic")
                if not topic:
                    raise ValueError("a row to publish has no topic")
                payload = rec.get("payload")
                if payload is None:
                    payload = b""
                elif isinstance(payload, str):
                    payload = payload.encode()
                qos = rec.get("qos")
                props = properties_from_column(rec.get("properties")) if client.version == 5 else Properties()
                await client.publish(
                    topic, bytes(payload), default_qos if qos is None else int(qos), bool(rec.get("retain")), props
                )
                count += 1
            await client.wait_acknowledged()
            if client.refused:
                raise RuntimeError(f"the broker refused {len(client.refused)} of {count} messages")
        return count

    return trio.run(main)


class MqttWriter(DataSourceWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)
        MqttOptions(self.options)  # checked on the driver

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return MqttCommit(_publish_rows(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # what was published stays published: MQTT has no transactions


class MqttStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = dict(options)
        MqttOptions(self.options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return MqttCommit(_publish_rows(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
