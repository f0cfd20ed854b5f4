"""`ingest` is exact: the table's rows are what `mqtt dump --json` writes for the same files, field for field,
connection numbers included, on every sample capture cut into many ranges, and on made-up captures with the
hard cases (a reused port pair, gaps, out-of-order segments, MQTT 5.0, several files, compression, damage)."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.core import ConnAck, Connect, PubAck, Publish, encode
from mqtt_cli.pipeline.dissect import DissectOptions
from mqtt_cli.pipeline.ingest import ingest
from mqtt_cli.pipeline.schema import DUMP_COLUMNS, JSON_COLUMNS, PROPERTY_COLUMNS, TABLE_COLUMNS
from tests.capture.helpers import session
from tests.capture.pcapwriter import Conversation, pcap, pcapng

from .conftest import dump_records, sample_captures


def table_rows(spark: Any, path: Path) -> list[dict[str, Any]]:
    return [row.asDict() for row in spark.read.parquet(str(path)).collect()]


def assert_same(dumped: list[dict[str, Any]], rows: list[dict[str, Any]], name: str) -> None:
    """Every record equal to its row, connection by connection, in `mqtt dump`'s order (`seq`). Keys the dump
    leaves out are null in the table (the format treats absent and null alike); JSON columns are compared parsed."""
    by_stream: dict[Any, list[dict[str, Any]]] = {}
    for rec in dumped:
        by_stream.setdefault(rec["stream"], []).append(rec)
    mine: dict[Any, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["seq"]):
        mine.setdefault(row["stream"], []).append(row)
    assert sorted(mine) == sorted(by_stream), name
    for stream, records in by_stream.items():
        assert len(mine[stream]) == len(records), f"{name} connection {stream}"
        for rec, row in zip(records, mine[stream], strict=True):
            got = {}
            for key, _ in DUMP_COLUMNS:
                value = row[key]
                if key in JSON_COLUMNS and value is not None:
                    value = json.loads(value)
                got[key] = value
            want = {key: rec.get(key) for key, _ in DUMP_COLUMNS}
            assert got == want, f"{name} connection {stream}"
            assert set(rec) <= set(got), f"{name}: a dump key without a column: {set(rec) - set(got)}"


def test_rows_equal_mqtt_dump_on_every_sample_capture(spark: Any, samples_table: tuple[Path, list[Path], Any]) -> None:
    out, captures, result = samples_table
    assert result.windows > 2 * len(captures)  # the files were cut into several ranges each
    assert result.errors == []
    rows = table_rows(spark, out)
    assert result.rows == len(rows)
    for capture in captures:
        mine = [r for r in rows if r["capture_file"] == str(capture)]
        assert_same(dump_records(capture), mine, capture.name)


def test_the_table_has_every_column_and_our_own(spark: Any, samples_table: tuple[Path, list[Path], Any]) -> None:
    out, _captures, _result = samples_table
    df = spark.read.parquet(str(out))
    assert df.columns == [name for name, _ in TABLE_COLUMNS]
    row = df.where("type = 'CONNECT' AND protocol_version = 5").orderBy("seq").first()
    assert row is not None
    assert row["direction"] == "to_broker"
    assert row["conn_key"] == f"{row['src']} -> {row['dst']}"
    assert row["ts_ns"] == int(row["ts"].replace(".", ""))
    assert row["time"].timestamp() == pytest.approx(row["ts_ns"] / 1e9, abs=1e-6)
    v5 = df.where("type = 'PUBLISH' AND properties <> '{}'").first()
    assert isinstance(json.loads(v5["properties"]), dict)  # the object `mqtt dump --json` writes


def test_property_columns_and_payloads_match_the_dump(
    spark: Any, samples_table: tuple[Path, list[Path], Any]
) -> None:
    """The typed property columns say what `properties` (the dump's JSON) says; PUBLISH payloads hash as the dump's
    payload_sha256; resolved_topic is the topic wherever no alias is used."""
    import hashlib

    out, _captures, _result = samples_table
    rows = spark.read.parquet(str(out)).where("properties IS NOT NULL AND properties <> '{}'").collect()
    assert rows
    seen = set()
    for row in rows:
        expected: dict[str, Any] = json.loads(row["properties"])
        if "correlation_data" in expected:
            expected["correlation_data"] = bytes.fromhex(expected["correlation_data"])
        for name, _kind in PROPERTY_COLUMNS:
            assert row[name] == expected.get(name), (name, row["properties"])
            if row[name] is not None:
                seen.add(name)
    assert {"user_properties", "content_type", "correlation_data", "response_topic"} <= seen
    publishes = spark.read.parquet(str(out)).where("type = 'PUBLISH'").collect()
    for row in publishes:
        if row["payload_sha256"] is not None and row["payload"] is not None:
            assert hashlib.sha256(row["payload"]).hexdigest() == row["payload_sha256"]
        if row["topic_alias"] is None:
            assert row["resolved_topic"] == row["topic"]
    assert sum(r["payload"] is not None for r in publishes) >= 0.9 * len(publishes)


def _hard_capture(tmp_path: Path) -> tuple[Path, Path]:
    """Many connections interleaved, a port pair used twice, a gap, segments out of order, 5.0; and a second file."""
    frames = []
    ts = 1_700_000_000_000_000_000
    for n in range(12):
        conv = Conversation(cport=41000 + n % 5, ts=ts + n * 10**7, isn_client=1000 + 7 * n)
        session(
            conv, version=5 if n % 3 == 0 else 4, client_id=f"dev-{n}", publishes=4 + n % 3, mss=7 if n % 4 else None
        )
        frames += conv.frames()
    lossy = Conversation(cport=42000, ts=ts + 10**9).handshake()
    lossy.send(encode(Connect("lossy")))
    lossy.send(encode(ConnAck()), False)
    for pid in range(1, 30):
        lossy.send(encode(Publish(f"l/{pid}", b"p" * pid, 1, packet_id=pid)), True, mss=9)
        lossy.send(encode(PubAck(pid)), False)
    segments = lossy.segments
    del segments[40]  # a gap
    segments[50], segments[51] = segments[51], segments[50]  # out of order
    frames += lossy.frames(segments=segments)
    frames.sort(key=lambda f: f[0])
    first = tmp_path / "hard.pcap"
    first.write_bytes(pcap(frames))
    second = tmp_path / "second.pcap.gz"
    conv = session(Conversation(cport=43000, ts=ts), client_id="other", publishes=20)
    second.write_bytes(gzip.compress(pcap(conv.frames())))
    return first, second


def test_hard_cases_and_several_files(spark: Any, tmp_path: Path) -> None:
    first, second = _hard_capture(tmp_path)
    out = tmp_path / "table"
    result = ingest(spark, [str(first), str(second)], str(out), split_bytes=1500)
    assert result.errors == []
    rows = table_rows(spark, out)
    for capture in (first, second):
        dumped = dump_records(capture, "-p", "1883")
        assert any(r["type"] == "MALFORMED" for r in dumped) or capture == second
        assert_same(dumped, [r for r in rows if r["capture_file"] == str(capture)], capture.name)


def test_a_damaged_capture_is_ingested_up_to_the_damage(spark: Any, tmp_path: Path) -> None:
    capture = sample_captures()[0]
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(capture.read_bytes()[:-25])
    out = tmp_path / "table"
    result = ingest(spark, [str(cut)], str(out), DissectOptions(ports=(18841, 18842)), split_bytes=2048)
    assert len(result.errors) == 1 and "truncated" in result.errors[0]
    assert_same(dump_records(cut), table_rows(spark, out), cut.name)


def test_append_adds_a_capture_to_a_table(spark: Any, tmp_path: Path) -> None:
    captures = sample_captures()[:2]
    out = tmp_path / "table"
    options = DissectOptions(ports=(18841, 18842))
    ingest(spark, [str(captures[0])], str(out), options)
    ingest(spark, [str(captures[1])], str(out), options, mode="append")
    rows = table_rows(spark, out)
    assert {r["capture_file"] for r in rows} == {str(c) for c in captures}
    assert len(rows) == sum(len(dump_records(c)) for c in captures)


def test_both_writers_write_the_same_table(spark: Any, tmp_path: Path) -> None:
    """Local masters: the workers write the Parquet files (pyarrow); others: Spark's writer. Same schema, same rows."""
    first, second = _hard_capture(tmp_path)
    tables = {}
    for writer in ("workers", "spark"):
        out = tmp_path / writer
        result = ingest(spark, [str(first), str(second)], str(out), split_bytes=1500, writer=writer)
        df = spark.read.parquet(str(out))
        assert result.rows == df.count()
        tables[writer] = (df.schema, [tuple(row) for row in df.orderBy("capture_file", "seq").collect()])
        assert (out / "_SUCCESS").exists()
    assert tables["workers"][0] == tables["spark"][0]
    assert tables["workers"][1] == tables["spark"][1]
    assert sorted(p.name for p in tmp_path.iterdir() if "staging" in p.name) == []


def test_the_workers_writer_keeps_spark_save_modes(spark: Any, tmp_path: Path) -> None:
    captures = sample_captures()[:2]
    options = DissectOptions(ports=(18841, 18842))
    out = tmp_path / "table"
    ingest(spark, [str(captures[0])], str(out), options, writer="workers")
    with pytest.raises(FileExistsError):
        ingest(spark, [str(captures[1])], str(out), options, writer="workers")
    assert {r["capture_file"] for r in table_rows(spark, out)} == {str(captures[0])}
    ingest(spark, [str(captures[1])], str(out), options, mode="overwrite", writer="workers")
    assert {r["capture_file"] for r in table_rows(spark, out)} == {str(captures[1])}
    assert len(table_rows(spark, out)) == len(dump_records(captures[1]))


def _bad_interface_capture(path: Path, damaged: tuple[int, ...]) -> tuple[list[Any], int]:
    """A pcapng whose enhanced packet blocks number `damaged` (from 1) name interface 7, never described: the
    records and the offset of the first damaged block."""
    records = []
    for n in range(6):
        conv = session(Conversation(cport=44000 + n, ts=1_700_000_000_000_000_000 + n * 10**8), publishes=6)
        records += conv.frames()
    records.sort(key=lambda r: r[0])
    data = bytearray(pcapng([(0, ts, frame) for ts, frame in records]))
    pos, seen, first = 0, 0, -1
    while pos < len(data):
        btype, length = struct.unpack_from("<II", data, pos)
        if btype == 6:
            seen += 1
            if seen in damaged:
                struct.pack_into("<I", data, pos + 8, 7)
                first = pos if first < 0 else first
        pos += length
    path.write_bytes(bytes(data))
    return records, first


def test_damage_only_a_reader_sees_ends_the_file_there_as_in_mqtt_dump(spark: Any, tmp_path: Path) -> None:
    """A pcapng packet block naming an interface that was never described: the scan hops over it (its lengths are
    sound), the reader of its range fails. The file is read again up to there, as `mqtt dump` reads it."""
    capture = tmp_path / "bad-interface.pcapng"
    records, damaged_at = _bad_interface_capture(capture, (60,))
    out = tmp_path / "table"
    result = ingest(spark, [str(capture)], str(out), split_bytes=2048)
    assert result.errors == [
        f"{capture} is corrupt: the packet block at byte {damaged_at} refers to interface 7 but 1 interface(s) are"
        " described before it"
    ]  # mqtt dump's words
    assert result.frames == 59
    dumped = dump_records(capture, "-p", "1883")
    assert len(dumped) < sum(1 for _ in records)
    assert_same(dumped, table_rows(spark, out), capture.name)


def test_damage_in_many_ranges_ends_the_file_at_the_first(spark: Any, tmp_path: Path) -> None:
    """Several ranges of one file fail at once, in any order: the file ends at its first damage all the same."""
    capture = tmp_path / "bad-interfaces.pcapng"
    _records, damaged_at = _bad_interface_capture(capture, tuple(range(40, 200, 25)))
    out = tmp_path / "table"
    result = ingest(spark, [str(capture)], str(out), split_bytes=1024)
    assert len(result.errors) == 1 and f"byte {damaged_at} " in result.errors[0], result.errors
    assert result.frames == 39
    assert_same(dump_records(capture, "-p", "1883"), table_rows(spark, out), capture.name)


@pytest.mark.parametrize("writer", ["workers", "spark"])
def test_a_capture_without_mqtt_gives_an_empty_table_spark_reads(spark: Any, tmp_path: Path, writer: str) -> None:
    capture = tmp_path / "empty.pcap"
    capture.write_bytes(pcap([]))
    out = tmp_path / "table"
    (out / "old").mkdir(parents=True)  # an overwrite replaces what was there
    result = ingest(spark, [str(capture)], str(out), mode="overwrite", writer=writer)
    assert result.rows == 0
    df = spark.read.parquet(str(out))
    assert df.count() == 0 and df.columns == [name for name, _ in TABLE_COLUMNS]
    assert not (out / "old").exists()


def test_a_small_input_in_one_task_gives_the_same_table(spark: Any, tmp_path: Path) -> None:
    """With one shuffle partition (the commands' setting for a small capture) the windows are read one after
    another and decoded by a single task, without the shuffle: one stage, and the same table as through the
    shuffle, damage included (the file read again up to its first damage, as mqtt dump reads it)."""
    damaged = tmp_path / "bad-interfaces.pcapng"
    _bad_interface_capture(damaged, (40, 90))
    captures = [*sample_captures(), *_hard_capture(tmp_path), damaged]
    options = DissectOptions(ports=(18841, 18842, 1883))
    tables = {}
    for parts in ("4", "1"):
        spark.conf.set("spark.sql.shuffle.partitions", parts)
        group = f"one-task-{parts}-{tmp_path.name}"
        spark.sparkContext.setJobGroup(group, "ingest")
        try:
            out = tmp_path / f"parts-{parts}"
            result = ingest(spark, [str(p) for p in captures], str(out), options, split_bytes=2048)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
            spark.conf.set("spark.sql.shuffle.partitions", "4")
        tracker = spark.sparkContext.statusTracker()
        stages = [len(tracker.getJobInfo(job).stageIds) for job in tracker.getJobIdsForGroup(group)]
        df = spark.read.parquet(str(out))
        tables[parts] = (df.schema, sorted(tuple(row) for row in df.collect()), result.errors, result.frames, stages)
    assert max(tables["1"][4]) == 1  # each attempt (one more per damage found): one stage
    assert max(tables["4"][4]) == 2  # frames, shuffle, rows
    assert tables["1"][:4] == tables["4"][:4]
    assert len(tables["1"][2]) == 1 and tables["1"][1]
