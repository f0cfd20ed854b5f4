"""The `mqtt` Spark data source and `record`, against real brokers: ours (`mqtt serve`) and Debian's mosquitto,
each a process on a free port of 127.0.0.1. Messages are published and checked with our trio client."""

from __future__ import annotations

import contextlib
import json
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from mqtt_cli.core import Properties, Subscription
from mqtt_cli.net.client import ClientSettings, open_client
from mqtt_cli.net.transports import Endpoint
from tests.broker.conftest import start_ours
from tests.brokers import Broker, start_mosquitto
from tests.scripted_brokers import queue_before_suback

pytestmark = pytest.mark.interop

DEADLINE = 30
# Rows from a streaming query: its first micro-batches come after Spark's start-up, which took over 30 s on the
# 2-core CI machine with the suite running beside it (the query active, no error, 4 rows or fewer).
STREAM_DEADLINE = 90
LIFETIME = 150  # a Publisher's, bounded by the test that stops it (a test with a Spark start-up under load)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_ours(tmp_path_factory.mktemp("ours"))
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mosq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosq"))
    yield broker
    broker.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def broker(request: pytest.FixtureRequest, ours: Broker, mosq: Broker) -> Broker:
    return ours if request.param == "ours" else mosq


def _settings(broker: Broker, client_id: str = "") -> ClientSettings:
    return ClientSettings(endpoint=Endpoint("mqtt", broker.host, broker.port), client_id=client_id)


class Publisher:
    """Publishes `topic/N` every `interval` seconds from a thread until stopped (or the deadline)."""

    def __init__(self, broker: Broker, topic: str, interval: float = 0.1) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._main, broker, topic, interval), daemon=True)

    async def _main(self, broker: Broker, topic: str, interval: float) -> None:
        with trio.fail_after(LIFETIME):
            async with open_client(_settings(broker)) as client:
                while not self._stop.is_set():
                    props = Properties(user_properties=[("n", str(self.sent))])
                    await client.publish(f"{topic}/{self.sent}", b"payload %d" % self.sent, 1, False, props)
                    self.sent += 1
                    await trio.sleep(interval)
                await client.wait_acknowledged()

    def __enter__(self) -> Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(DEADLINE)


def test_read_stream_from_a_broker(spark: Any, broker: Broker) -> None:
    from mqtt_cli.pipeline.datasource import register

    register(spark)
    name = f"mqtt_{broker.kind}"
    df = spark.readStream.format("mqtt").option("url", broker.url).option("topic", "ds/read/#").load()
    query = df.writeStream.format("memory").queryName(name).trigger(processingTime="0.5 seconds").start()
    try:
        with Publisher(broker, "ds/read", 0.05):
            deadline = time.monotonic() + STREAM_DEADLINE
            while spark.sql(f"SELECT count(*) AS n FROM {name}").first()["n"] < 5:
                assert query.isActive and time.monotonic() < deadline, query.exception()
                time.sleep(0.2)
    finally:
        query.stop()
    rows = spark.sql(f"SELECT * FROM {name}").collect()
    assert all(r["topic"].startswith("ds/read/") and r["qos"] == 1 and not r["retain"] for r in rows)
    assert all(r["payload"] == b"payload " + r["topic"].rsplit("/", 1)[1].encode() for r in rows)
    numbers = [int(r["topic"].rsplit("/", 1)[1]) for r in rows]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # in order, once each (at most once)
    # 5.0 (both brokers speak it): the properties come through as `mqtt sub --json` writes them.
    assert rows[0]["properties"] == f'{{"user_properties":[["n","{numbers[0]}"]]}}'
    assert rows[0]["timestamp"] is not None


def test_batch_write_publishes_every_row(spark: Any, mosq: Broker) -> None:
    from mqtt_cli.pipeline.datasource import register

    register(spark)
    rows = [(f"ds/write/{n}", b"w%d" % n, n % 3, n == 0, '[["content_type","text/plain"]]') for n in range(30)]
    df = spark.createDataFrame(rows, "topic string, payload binary, qos int, retain boolean, properties string")
    got: list[Any] = []
    ready = threading.Event()

    async def subscriber() -> None:
        with trio.fail_after(DEADLINE):
            async with open_client(_settings(mosq, "ds-writer-check")) as client:
                await client.subscribe([Subscription("ds/write/#", 2)])
                ready.set()
                async for msg in client.messages:
                    got.append(msg)
                    if len(got) == len(rows):
                        return

    thread = threading.Thread(target=trio.run, args=(subscriber,), daemon=True)
    thread.start()
    assert ready.wait(DEADLINE)
    df.repartition(3).write.format("mqtt").option("url", mosq.url).mode("append").save()
    thread.join(DEADLINE)
    assert sorted((m.topic, m.payload, m.qos) for m in got) == sorted((t, p, q) for t, p, q, _r, _x in rows)
    assert all(m.properties.content_type == "text/plain" for m in got)


def test_reader_is_picklable_and_connects_lazily(ours: Broker) -> None:
    from mqtt_cli.pipeline.datasource import MqttStreamReader

    reader = MqttStreamReader({"url": ours.url, "topic": "ds/pickle/#"})
    assert reader._feed is None  # nothing opened by making it
    try:
        assert reader.latestOffset({"received": 7}, None) == {"received": 7}  # connects; counts on from `start`
        copy = pickle.loads(pickle.dumps(reader))  # Spark pickles readers: no socket or thread travels
        assert copy._feed is None and copy.options == reader.options
        assert copy.partitions({"received": 0}, {"received": 3}) == []  # a replay: MQTT cannot give it again
    finally:
        reader.stop()


def test_options_are_checked(spark: Any) -> None:
    from mqtt_cli.pipeline.datasource import MqttOptions

    with pytest.raises(ValueError, match="url"):
        MqttOptions({"topic": "a"})
    with pytest.raises(ValueError, match="client_id"):
        MqttOptions({"url": "mqtt://127.0.0.1", "persistent": "true"})
    with pytest.raises(ValueError, match="scheme"):
        MqttOptions({"url": "http://127.0.0.1"})


def test_a_session_queue_before_suback_is_read(spark: Any) -> None:
    """The source's connection reads what a resumed session sends before SUBACK (more than the client's message
    buffer holds); it waited for SUBACK behind it until the connection timed out."""
    from mqtt_cli.pipeline.datasource import MqttOptions, _Feed

    n = 3000
    port = queue_before_suback(n)
    opts = MqttOptions(
        {"url": f"mqtt://127.0.0.1:{port}", "topic": "q/#", "version": "3.1.1", "client_id": "s1",
         "persistent": "true", "connect_timeout": "2"}
    )  # fmt: skip
    feed = _Feed(opts, 0)
    try:
        deadline = time.monotonic() + 10
        while feed.received < n and time.monotonic() < deadline:
            time.sleep(0.02)
        feed.check()
        assert [row[1] for _, row in feed.buffer] == [b"%d" % i for i in range(n)]
    finally:
        feed.close()


def test_record_writes_a_table_the_report_reads(spark: Any, ours: Broker, tmp_path: Path) -> None:
    from mqtt_cli.pipeline.record import record
    from mqtt_cli.pipeline.report import build_report

    out = tmp_path / "live"
    with Publisher(ours, "rec/t", 0.05):
        rows = record(spark, ours.url, ["rec/#"], str(out), count=5, trigger_seconds=0.5, duration=DEADLINE)
    assert rows >= 5
    table = spark.read.parquet(str(out))
    assert table.count() == rows
    first = table.orderBy("seq").first()
    assert (first["type"], first["direction"], first["capture_file"]) == ("PUBLISH", "to_client", f"{ours.url}")
    assert first["payload_len"] == len(b"payload ") + len(first["topic"].rsplit("/", 1)[1])
    assert first["ts_ns"] // 1000 == int(first["time"].timestamp() * 1e6 + 0.5)
    report = build_report(spark, str(out))
    assert report["summary"]["publishes"] == rows


@pytest.mark.slow
def test_record_command_stops_cleanly_on_ctrl_c(ours: Broker, tmp_path: Path, mqtt_exe: Path) -> None:
    """`mqtt analyze record` until Ctrl-C: the query stops between micro-batches, the session ends, exit 130,
    and what was written is a readable table."""
    import signal
    import subprocess

    import pyarrow.parquet as pq

    from ..conftest import cli_env

    out = tmp_path / "live"
    cmd = [
        str(mqtt_exe),
        "analyze",
        "record",
        "--master",
        "local[1]",
        "--url",
        ours.url,
        "-t",
        "rec2/#",
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        with Publisher(ours, "rec2/t", 0.05):
            deadline = time.monotonic() + 180  # Spark's start-up included, on a loaded machine
            while not _rows_written(out):  # a micro-batch with messages was written
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()  # reading its standard error before it ends would wait for ever
                    pytest.fail(f"no micro-batch written: {proc.communicate()[1][-2000:]}")
                time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            _stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    lines = stderr.splitlines()
    assert lines[-1] == f"mqtt: interrupted: the micro-batches written to {out} are kept"
    assert "Traceback" not in stderr
    rows = pq.read_table(out, columns=["type", "topic"]).to_pylist()
    assert rows and all(r["type"] == "PUBLISH" and r["topic"].startswith("rec2/t/") for r in rows)


def _rows_written(table: Path) -> int:
    import pyarrow.parquet as pq

    total = 0
    for part in table.glob("part-*.parquet"):
        with contextlib.suppress(OSError, ValueError):  # a file being written (pyarrow's ArrowInvalid)
            total += pq.read_metadata(part).num_rows
    return total


@pytest.mark.slow
def test_record_says_when_it_records_writes_every_message_then_disconnects(
    ours: Broker, tmp_path: Path, mqtt_exe: Path
) -> None:
    """A burst published just after `record` says it is recording, with micro-batches far apart (10 s) and a
    duration (3 s) that ends before the next one: every message is in the table, payload included (the query
    drains before it stops; it used to stop with the burst still buffered, acknowledged and lost), and the
    connection ends with DISCONNECT (captured by dumpcap)."""
    import subprocess

    import pyarrow.parquet as pq

    from tests.capture.loopback import dumpcap

    from ..conftest import cli_env

    out = tmp_path / "live"
    capture = tmp_path / "record.pcapng"
    cmd = [str(mqtt_exe), "analyze", "record", "--master", "local[1]", "--url", ours.url, "-t", "rec3/#", "-o",
           str(out), "--duration", "3", "--trigger", "10", "-i", "recorder"]  # fmt: skip
    payloads = [b"burst %d" % n for n in range(30)]

    async def burst() -> None:
        async with open_client(_settings(ours)) as client:
            for payload in payloads:
                await client.publish("rec3/burst", payload, 1)
            await client.wait_acknowledged()

    with dumpcap(ours.port, capture):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
        try:
            assert proc.stderr is not None
            first = proc.stderr.readline()  # blocks until the recorder says it has subscribed
            assert first.startswith(f"recording rec3/# from {ours.url} into {out} for 3 s"), first
            trio.run(burst)
            _stdout, stderr = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, stderr
    assert stderr.splitlines()[-1] == f"{len(payloads)} messages written to {out}"
    rows = pq.read_table(out, columns=["topic", "resolved_topic", "payload"]).to_pylist()
    assert sorted(r["payload"] for r in rows) == sorted(payloads)
    assert all(r["topic"] == r["resolved_topic"] == "rec3/burst" for r in rows)
    dumped = subprocess.run(
        [str(mqtt_exe), "dump", "--json", "-p", str(ours.port), "--client", "recorder", str(capture)],
        capture_output=True, text=True, timeout=60, env=cli_env(),
    ).stdout.splitlines()  # fmt: skip
    types = [json.loads(line)["type"] for line in dumped]
    assert types[0] == "CONNECT" and types[-1] == "DISCONNECT", types


def test_a_row_s_properties_are_what_a_client_may_publish() -> None:
    """The writer reads the `properties` column with core's one JSON reader, as `pub --json-lines` reads a line:
    a null is absent, a connection's topic alias and a delivery's subscription identifiers (in rows read from a
    subscription) are left out, and a property PUBLISH cannot carry is an error naming it."""
    from mqtt_cli.pipeline.datasource import properties_from_column, properties_to_json

    received = Properties(
        content_type="a", topic_alias=2, subscription_identifiers=[3, 4], user_properties=[("k", "v")]
    )
    assert properties_from_column(properties_to_json(received)) == Properties(
        content_type="a", user_properties=[("k", "v")]
    )
    assert properties_from_column(None) == Properties() == properties_from_column("")
    assert properties_from_column('{"content_type": null, "correlation_data": "00ff"}') == Properties(
        correlation_data=b"\x00\xff"
    )
    with pytest.raises(ValueError, match="property 'session_expiry_interval' cannot be published"):
        properties_from_column('{"session_expiry_interval": 1}')
