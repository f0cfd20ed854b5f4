"""`mqtt analyze` from the command line: what it says without pyspark or Java, usage errors before Spark starts,
and ingest then report end to end (each a process of its own, as users run them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import Run, cli_env
from .conftest import dump_records, needs_spark, sample_captures

BLOCK_PYSPARK = (
    "import sys; sys.modules['pyspark'] = None; sys.argv = ['mqtt', *sys.argv[1:]]\n"
    "from mqtt_cli.__main__ import main; main()"
)


def test_without_pyspark_it_says_what_to_install(run: Run, tmp_path: Path) -> None:
    result = run([sys.executable, "-c", BLOCK_PYSPARK, "analyze", "report", str(tmp_path)])
    assert result.returncode == 4
    assert (
        result.stderr
        == "mqtt: error: mqtt analyze needs pyspark (Apache Spark's Python API): pip install 'mqttkit[spark]'\n"
    )


def test_without_java_it_says_what_to_install(run: Run, tmp_path: Path) -> None:
    env = cli_env(JAVA_HOME=str(tmp_path / "no-java"))
    result = run([sys.executable, "-m", "mqtt_cli", "analyze", "report", str(tmp_path)], env=env)
    assert result.returncode == 4
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "apt-get install openjdk-17-jre-headless" in lines[0] and "JAVA_HOME" in lines[0]


def test_help_lists_the_subcommands(run: Run, mqtt_exe: Path) -> None:
    result = run([mqtt_exe, "analyze", "--help"])
    assert result.returncode == 0
    for name in ("ingest", "report", "record"):
        assert name in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "X", "-o", "OUT", "--conf", "nonsense"], "--conf 'nonsense': expected KEY=VALUE"),
        (["ingest", "X", "-o", "OUT", "--protocol-version", "7"], "--protocol-version '7'"),
        (["ingest", "X", "-o", "OUT", "--overwrite", "--append"], "choose one"),
        (["ingest", "X", "-o", "EXISTS"], "exists: add --overwrite"),
        (["ingest", "-", "-", "-o", "OUT"], "- (standard input) given more than once"),
        (["ingest", "-", "-o", "OUT", "--master", "spark://h:7077"], "needs a local master"),
        (["record", "--url", "http://x", "-t", "a", "-o", "OUT"], "--url"),
        (["record", "--url", "mqtt://x", "-t", "a/#/b", "-o", "OUT"], "--topic 'a/#/b'"),
        (["record", "--url", "mqtt://x", "-t", "a", "-o", "OUT", "--persistent"], "--persistent needs --client-id"),
        (["report", "NOWHERE"], "no such directory"),
    ],
)
def test_usage_errors_exit_2_before_spark_starts(
    run: Run, mqtt_exe: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "X").write_bytes(b"")
    (tmp_path / "EXISTS").mkdir()
    (tmp_path / "EXISTS" / "part-0.parquet").write_bytes(b"")
    args = [str(tmp_path / a) if a in ("X", "OUT", "EXISTS", "NOWHERE") else a for a in args]
    result = run([mqtt_exe, "analyze", *args])
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


@needs_spark
def test_unwritable_output_and_a_directory_that_is_no_table_are_said_before_spark_starts(
    run: Run, mqtt_exe: Path, tmp_path: Path
) -> None:
    capture = next(iter(sample_captures()))
    result = run([mqtt_exe, "analyze", "ingest", capture, "--out", "/proc/newtable"], timeout=30)
    assert result.returncode == 1
    assert result.stderr == "mqtt: error: --out /proc/newtable: cannot write in /proc: No such file or directory\n"
    (tmp_path / "notes.txt").write_text("not a table\n")
    result = run([mqtt_exe, "analyze", "report", tmp_path], timeout=30)
    assert result.returncode == 2
    assert "not a Parquet table, it holds no .parquet file" in result.stderr
    assert len(result.stderr.splitlines()) == 1


@needs_spark
@pytest.mark.parametrize(
    ("name", "content"),
    [("part-0.parquet", b"junk\n"), ("notes.txt", b"a file left in the table"), ("part-1.parquet", b"PAR1")],
)
def test_a_file_that_is_not_parquet_is_named_before_spark_starts(
    run: Run, mqtt_exe: Path, tmp_path: Path, name: str, content: bytes
) -> None:
    """Spark reads every file of the table but those named _* or .*: one that is not Parquet is named at once,
    exit 1, instead of after Spark's start-up and a page of Java. An empty file is no error (Spark skips it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"seq": [1]}), tmp_path / "part-9.parquet")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / ".part-9.parquet.crc").write_bytes(b"crc")
    (tmp_path / "empty.parquet").write_bytes(b"")
    (tmp_path / name).write_bytes(content)
    result = run([mqtt_exe, "analyze", "report", "--master", "local[1]", tmp_path], timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"mqtt: error: {tmp_path / name} is not a Parquet file, and Spark reads every file in {tmp_path}: "
        "move it out of the table"
    ]


@needs_spark
@pytest.mark.slow
def test_timestamps_past_2262_stop_the_ingest_at_their_frame(run: Run, mqtt_exe: Path, tmp_path: Path) -> None:
    from mqtt_cli.capture.records import format_ts
    from tests.capture.helpers import session
    from tests.capture.pcapwriter import Conversation, Interface, pcapng

    frames = session(Conversation()).frames()
    late = [(ts if n < 5 else ts * 1000) for n, (ts, _) in enumerate(frames)]  # from frame 6: the year 55800
    capture = tmp_path / "future.pcapng"
    capture.write_bytes(pcapng([(0, ts, f) for ts, (_, f) in zip(late, frames, strict=True)], [Interface()]))
    assert len(dump_records(capture, "-p", "1883")) == 12  # mqtt dump writes any timestamp
    table = tmp_path / "table"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run(
        [mqtt_exe, "analyze", "ingest", "--master", "local[1]", "-o", table, capture],
        env=cli_env(TMPDIR=str(scratch)), timeout=180,
    )  # fmt: skip
    assert result.returncode == 1
    error = result.stderr.splitlines()[-1]
    assert f"frame 6 has the timestamp {format_ts(late[5])}" in error and "the years 1677 to 2262" in error, error
    assert "the packets before that point were ingested" in error
    assert not list(scratch.iterdir())  # the error names no log of Spark's: its session's directory is gone


@needs_spark
@pytest.mark.slow
def test_ingest_from_standard_input_then_report(mqtt_exe: Path, run: Run, tmp_path: Path) -> None:
    """The commands end to end: `ingest -` reads the capture from standard input into a table (one line on
    standard error, no Spark chatter, no staging left), then `report` reads that table; neither leaves a
    directory in TMPDIR. One test, because each command is a Spark session of its own; a capture named on the
    command line is ingested in the tests above."""
    capture = next(p for p in sample_captures() if p.name == "12-v5-properties.pcap")
    table = tmp_path / "table"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with capture.open("rb") as stdin:
        ingest = subprocess.run(
            [str(mqtt_exe), "analyze", "ingest", "--master", "local[2]", "-p", "18841", "-o", str(table), "-"],
            stdin=stdin, capture_output=True, text=True, timeout=180, env=cli_env(TMPDIR=str(scratch)),
        )  # fmt: skip
    assert ingest.returncode == 0, ingest.stderr
    records = dump_records(capture)
    [summary] = ingest.stderr.splitlines()
    assert summary.startswith(f"{len(records)} packets from ")
    import pyarrow.parquet as pq

    rows = pq.read_table(table).to_pylist()
    assert len(rows) == len(records)
    assert {row["capture_file"] for row in rows} == {"-"}
    assert not list(tmp_path.glob(".*staging*"))
    assert sorted((r["seq"], r["type"]) for r in rows)[0][1] == records[0]["type"]
    assert not list(scratch.iterdir())
    page = tmp_path / "report.html"
    report = run(
        [mqtt_exe, "analyze", "report", "--master", "local[2]", "--json", "--html", page, table],
        env=cli_env(TMPDIR=str(scratch)), timeout=180,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert report.stderr == ""
    assert not list(scratch.iterdir())
    data = json.loads(report.stdout)
    assert data["summary"]["packets"] == len(records)
    assert data["summary"]["publishes"] == sum(r["type"] == "PUBLISH" for r in records)
    assert page.read_text().startswith("<!doctype html>")


@needs_spark
@pytest.mark.slow
def test_a_parquet_table_of_another_kind_fails_in_spark_and_keeps_its_log(
    run: Run, mqtt_exe: Path, tmp_path: Path
) -> None:
    """A failure of Spark's own is one line that names Spark's log, and that log is kept (a successful command
    removes its session's directory, see above)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "other"
    table.mkdir()
    pq.write_table(pa.table({"name": ["a"], "value": [1]}), table / "part-0.parquet")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run(
        [mqtt_exe, "analyze", "report", "--master", "local[1]", table], env=cli_env(TMPDIR=str(scratch)), timeout=180
    )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("mqtt: error: Spark: ") and "`topic` cannot be resolved" in line, line
    log = Path(line.rsplit("(Spark's log: ", 1)[1].rstrip(")"))
    assert log.is_file() and log.parent.parent == scratch


@needs_spark
@pytest.mark.slow
def test_the_cluster_path_ships_our_code(tmp_path: Path) -> None:
    """local-cluster: the executor is a JVM of its own with Python workers of their own; they import mqtt_cli
    from the zip the session shipped (addPyFile), and the ingest is as exact as locally. (One executor: a second
    JVM showed nothing more and cost the suite half a minute.)"""
    capture = next(p for p in sample_captures() if p.name == "02-v311-qos-matrix.pcapng")
    table = tmp_path / "table"
    script = f"""
import json, os
from mqtt_cli.pipeline.session import start_session, stop_session
from mqtt_cli.pipeline.ingest import ingest
from mqtt_cli.pipeline.dissect import DissectOptions
spark = start_session("local-cluster[1,1,1024]", {{"spark.sql.shuffle.partitions": "2"}})
where = spark.sparkContext.parallelize(range(4), 4).map(
    lambda _: (__import__("mqtt_cli").__file__, os.getpid())).collect()
result = ingest(spark, [{str(capture)!r}], {str(table)!r}, DissectOptions(ports=(18841,)), split_bytes=4096)
print(json.dumps({{"where": where, "driver": os.getpid(), "windows": result.windows}}))
stop_session(spark)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert all("mqtt_cli.zip" in path for path, _pid in out["where"]), out["where"]
    assert out["driver"] not in {pid for _path, pid in out["where"]}
    assert out["windows"] > 2
    import pyarrow.parquet as pq

    rows = pq.read_table(table).to_pylist()
    from .test_ingest import assert_same

    assert_same(dump_records(capture), rows, capture.name)


@needs_spark
def test_inputs_are_checked_before_spark_starts(run: Run, mqtt_exe: Path, tmp_path: Path) -> None:
    """Not a capture (exit 3), empty, a directory, missing (exit 1), a good capture beside a bad one, an --html or
    --out that cannot be written: one line, before Spark starts (SPARK_HOME points nowhere, so a Spark start-up
    would fail otherwise), no option suggested that the command does not have, nothing written."""
    from ..conftest import cli_env

    env = cli_env(SPARK_HOME=str(tmp_path / "no-spark"))
    conf = tmp_path / "mosquitto.conf"
    conf.write_text("listener 1883\nallow_anonymous true\n")
    (tmp_path / "empty.pcap").write_bytes(b"")
    good = next(iter(sample_captures()))
    out = tmp_path / "t"
    cases = [
        ([conf], 3, f"mqtt: error: {conf} is not a capture file: its content starts with 6c 69 73 74, not a pcap or"
                    " pcapng magic number"),
        ([tmp_path / "empty.pcap"], 3, f"mqtt: error: {tmp_path / 'empty.pcap'} is empty: expected a pcap or pcapng"),
        ([tmp_path], 1, f"mqtt: error: {tmp_path} is a directory, not a capture file"),
        ([tmp_path / "nothing.pcap"], 1, f"mqtt: error: cannot open {tmp_path / 'nothing.pcap'}: No such file"),
        ([good, conf], 3, f"mqtt: error: {conf} is not a capture file"),
    ]  # fmt: skip
    for inputs, code, message in cases:
        result = run([mqtt_exe, "analyze", "ingest", *inputs, "-o", out], env=env, timeout=60)
        assert result.returncode == code, result.stderr
        assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1, result.stderr
        assert "--raw" not in result.stderr and not out.exists()
    table = tmp_path / "table"
    table.mkdir()
    (table / "part-0.parquet").write_bytes(b"")
    result = run([mqtt_exe, "analyze", "report", table, "--html", tmp_path / "no" / "r.html"], env=env, timeout=60)
    assert result.returncode == 1
    where = tmp_path / "no"
    assert result.stderr == f"mqtt: error: --html {where / 'r.html'}: no directory {where} to write it in\n"
    result = run([mqtt_exe, "analyze", "record", "--url", "mqtt://127.0.0.1:1", "-t", "a", "-o", conf], env=env)
    assert result.returncode == 1 and result.stderr == f"mqtt: error: --out {conf}: not a directory\n"
