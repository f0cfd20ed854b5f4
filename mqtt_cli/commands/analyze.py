"""``mqtt analyze``: the Spark pipeline (mqtt_cli/pipeline): captures or live traffic -> Parquet -> a report.

Thin: flags are checked here; Spark work is mqtt_cli.pipeline, imported (with pyspark) inside the commands,
after checking that pyspark and Java are there. No `from __future__ import annotations` (see dump.py).
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqtt_cli.commands import fail, say
from mqtt_cli.exit_codes import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_MISSING_DEPENDENCY,
    EXIT_NOT_A_CAPTURE,
    EXIT_USAGE,
)

from ._capture import Detect, Ports, ProtocolVersion, TlsPorts, capture_ports, checked

if TYPE_CHECKING:
    from mqtt_cli.pipeline.session import InputSize


_SMALL_TABLE_BYTES = 64 << 20  # a table this small is reported with session.SMALL_INPUT_CONF
_TINY_TABLE_BYTES = 8 << 20  # and this small with session.TINY_INPUT_CONF


app = typer.Typer(
    name="analyze",
    help="Spark pipeline: decode captures (or record a broker) into Parquet, then report on it.",
    no_args_is_help=True,
)

Master = Annotated[
    str,
    typer.Option(
        "--master",
        help="Spark master: local[N] (this machine, N cores), local[*], spark://HOST:PORT, yarn, k8s://...",
    ),
]
Conf = Annotated[
    list[str] | None,
    typer.Option(
        "--conf", help="A Spark setting KEY=VALUE (repeatable), e.g. spark.executor.memory=4g.", show_default=False
    ),
]


def _confs(values: list[str] | None) -> dict[str, str]:
    out = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--conf {item!r}: expected KEY=VALUE", EXIT_USAGE)
        out[key.strip()] = value
    return out


@contextmanager
def _spark(
    master: str, conf: dict[str, str], cancel_jobs: bool = True, size: "InputSize | None" = None
) -> Iterator[tuple[Any, Any]]:
    """(session, CtrlC) for one command: requirements checked first; the session is stopped on the way out, Ctrl-C
    included (the first Ctrl-C cancels the running jobs, see session.CtrlC)."""
    _require_spark()
    from mqtt_cli.pipeline.session import CtrlC, InputSize, start_session, stop_session

    spark = None
    keep_log = False  # Spark's log (and its session's work directory) stays only when a failure names it
    try:
        try:
            spark = start_session(master, conf, size=size or InputSize.LARGE)
        except Exception as exc:  # no Java that Spark can use, a bad --conf value, ...
            _spark_failure(exc)
        with CtrlC(spark, cancel_jobs) as ctrl_c:
            try:
                yield spark, ctrl_c
            except typer.Exit:
                raise
            except Exception as exc:
                if ctrl_c.interrupted:
                    raise KeyboardInterrupt from None
                keep_log = _names_the_log(exc)
                _spark_failure(exc)
    except KeyboardInterrupt:
        say("mqtt: interrupted: Spark jobs cancelled")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if spark is not None:
            stop_session(spark, keep_log=keep_log)


def _require_spark() -> None:
    """Exit 4 with what to install when pyspark, pandas, pyarrow or Java is missing (cheap: no import of them)."""
    from mqtt_cli.pipeline.session import missing_requirement

    problem = missing_requirement()
    if problem is not None:
        fail(problem, EXIT_MISSING_DEPENDENCY)


def _names_the_log(exc: Exception) -> bool:
    """Does _spark_failure's line for `exc` name Spark's log (a failure of Spark's, not of our input)?"""
    from mqtt_cli.capture import CaptureError

    return not isinstance(exc, CaptureError | ValueError | OSError)


def _spark_failure(exc: Exception) -> None:
    """A failure from Spark or the pipeline as one line (Spark's messages run over many)."""
    from mqtt_cli.capture import NotACapture

    if isinstance(exc, NotACapture):
        fail(str(exc), EXIT_NOT_A_CAPTURE)
    if not _names_the_log(exc):
        fail(str(exc), EXIT_FAILURE)
    import re

    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), type(exc).__name__)
    # A failure in a Python worker or data source comes with its traceback: its last exception line says why.
    raised = [line for line in text if re.match(r"\s*[\w.]+(Error|Exception): ", line)]
    # A Java failure (Py4JJavaError: "An error occurred while calling o50.parquet.") has its cause further down:
    # the last "Caused by: ..." is the root, else the first exception line of the stack trace.
    causes = [line.split("Caused by:", 1)[1] for line in text if line.strip().startswith("Caused by:")]
    java = [m[1] for line in text if (m := re.match(r"\s*:?\s*((?:[a-z]\w*\.)+\w*(?:Error|Exception): .*)", line))]
    if raised and not java:
        first = raised[-1]
    elif causes:
        first = causes[-1]
    elif java:
        first = java[0]
    from mqtt_cli.pipeline import session

    where = f" (Spark's log: {session.spark_log})" if session.spark_log else ""
    fail(f"Spark: {first.strip()}{where}", EXIT_FAILURE)


@app.command()
def ingest(
    captures: Annotated[
        list[Path],
        typer.Argument(
            help="Capture files: pcap or pcapng, compressed too; - for standard input (read to its end first).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory of the Parquet table to write.", show_default=False)
    ],
    master: Master = "local[*]",
    conf: Conf = None,
    port: Ports = None,
    tls_port: TlsPorts = None,
    detect: Detect = True,
    protocol_version: ProtocolVersion = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the table at --out.")] = False,
    append: Annotated[bool, typer.Option("--append", help="Add to the table at --out.")] = False,
    split_mb: Annotated[
        float | None,
        typer.Option(
            "--split-mb",
            help="Cut files into ranges of this many MiB (default: a few per core, <= 32).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Decode captures into a Parquet table: one row per MQTT packet, every field of `mqtt dump --json`.

    Large files are cut into record-aligned ranges read in parallel; each connection is decoded in order by one
    parser, exactly as `mqtt dump` decodes it.

    Exit codes: 0 done, 1 a Spark job failed or a capture is damaged (the table holds what was readable before
    the damage), 2 bad usage, 3 an input is not a capture, 4 pyspark or Java missing, 130 interrupted.
    """
    settings = _confs(conf)
    version = checked(protocol_version, port, tls_port)
    if overwrite and append:
        fail("--overwrite and --append together: choose one", EXIT_USAGE)
    occupied = any(out.iterdir()) if out.is_dir() else out.exists()
    if occupied and not (overwrite or append):
        fail(f"{out} exists: add --overwrite to replace it or --append to add to it", EXIT_USAGE)
    if master.startswith("local"):
        _require_spark()  # what is missing comes first (exit 4), as for every analyze command
        _check_writable(out)
    from_stdin = [path for path in captures if str(path) == "-"]
    if len(from_stdin) > 1:
        fail("- (standard input) given more than once", EXIT_USAGE)
    if from_stdin and not master.startswith("local"):
        fail(
            f"- (standard input) needs a local master, not {master}: copy the capture where the executors can read it",
            EXIT_USAGE,
        )
    if from_stdin and sys.stdin.isatty():
        fail("- reads a capture from standard input, which is a terminal: pipe one in (tcpdump -w - ...)", EXIT_USAGE)
    for path in captures:
        if str(path) != "-":
            _check_capture(str(path))
    with _stdin_spooled(bool(from_stdin)) as spooled:
        if spooled is not None:
            _check_capture(str(spooled), "standard input")
        _ingest(captures, spooled, out, master, settings, port, tls_port, detect, version, overwrite, append, split_mb)


def _check_capture(path: str, name: str | None = None) -> None:
    """Opens and sniffs a capture as `mqtt dump` does, before Spark starts: a file that is missing, unreadable or
    not a capture ends the command in one line (exit 1, or 3 for not a capture) instead of a Spark job."""
    from mqtt_cli.capture import CaptureError, CaptureSource, NotACapture

    def said(message: str) -> str:
        return message.replace(path, name) if name else message

    try:
        with CaptureSource(path):
            pass
    except NotACapture as exc:
        fail(said(str(exc)), EXIT_NOT_A_CAPTURE)
    except CaptureError as exc:  # e.g. a compressed file that cannot be decompressed
        fail(said(str(exc)), EXIT_FAILURE)
    except OSError as exc:
        fail(f"{name or path}: cannot read it: {exc.strerror or exc}", EXIT_FAILURE)


def _check_writable(out: Path) -> None:
    """The table goes through a staging directory beside `out` and is renamed into place (pipeline/parts.py): the
    nearest existing directory on the way to `out` must let us create one, found before Spark starts (exit 1)."""
    import tempfile

    if out.exists() and not out.is_dir():
        fail(f"--out {out}: not a directory", EXIT_FAILURE)
    place = out.absolute().parent
    while not place.exists():
        place = place.parent
    try:
        tempfile.TemporaryDirectory(dir=place, prefix=".mqtt-analyze-probe-").cleanup()
        if out.is_dir():  # --append moves the new files in
            tempfile.TemporaryDirectory(dir=out, prefix=".mqtt-analyze-probe-").cleanup()
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else str(place)
        where = str(Path(where).parent) if ".mqtt-analyze-probe-" in where else where
        fail(f"--out {out}: cannot write in {where}: {exc.strerror or exc}", EXIT_FAILURE)


def _check_html_target(html: Path) -> None:
    """--html is written after the queries: a place where it cannot go is said before Spark starts (exit 1)."""
    import os

    folder = html.absolute().parent
    if html.is_dir():
        fail(f"--html {html}: is a directory; give a file name", EXIT_FAILURE)
    if not folder.is_dir():
        fail(f"--html {html}: no directory {folder} to write it in", EXIT_FAILURE)
    if not os.access(folder, os.W_OK) or (html.exists() and not os.access(html, os.W_OK)):
        fail(f"--html {html}: cannot write there (permission denied)", EXIT_FAILURE)


@contextmanager
def _stdin_spooled(wanted: bool) -> Iterator[Path | None]:
    """Standard input copied to a temporary file (Spark's tasks read byte ranges of files), removed afterwards."""
    if not wanted:
        yield None
        return
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="mqtt-analyze-stdin-"))
    try:
        spooled = work / "stdin.capture"
        with spooled.open("wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f, 1 << 20)
        yield spooled
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ingest(
    captures: list[Path], spooled: Path | None, out: Path, master: str, settings: dict[str, str],
    port: list[int] | None, tls_port: list[int] | None, detect: bool, version: int | None, overwrite: bool,
    append: bool, split_mb: float | None,
) -> None:  # fmt: skip
    from mqtt_cli.capture import CaptureError
    from mqtt_cli.pipeline.dissect import DissectOptions
    from mqtt_cli.pipeline.ingest import SMALL_BYTES

    paths = [str(spooled) if str(p) == "-" and spooled is not None else str(p) for p in captures]
    labels = [str(p) for p in captures]  # the `capture_file` column: "-" for standard input
    readable = {str(spooled): "standard input"} if spooled is not None else {}  # as mqtt dump names it

    def said(message: str) -> str:
        for path, name in readable.items():
            message = message.replace(path, name)
        return message

    options = DissectOptions(*capture_ports(port, tls_port), detect, version)
    # The decoding is Python's: a capture small enough for one task leaves the JVM little to do (TINY).
    size = _input_size(sum(Path(p).stat().st_size for p in paths), SMALL_BYTES, 0)
    with _spark(master, settings, size=size) as (spark, ctrl_c):
        from mqtt_cli.pipeline.ingest import ingest as run_ingest
        from mqtt_cli.pipeline.progress import SparkProgress

        mode = "overwrite" if overwrite else "append" if append else "errorifexists"
        with SparkProgress(spark, sys.stderr.isatty()) as progress:

            def stage(name: str) -> None:
                if ctrl_c.interrupted:  # Ctrl-C between jobs: no job to cancel, stop here
                    raise KeyboardInterrupt
                progress.stage(name)

            try:
                result = run_ingest(
                    spark,
                    paths,
                    str(out),
                    options,
                    mode=mode,
                    split_bytes=int(split_mb * (1 << 20)) if split_mb else None,
                    on_stage=stage,
                    labels=labels,
                )
            except CaptureError as exc:
                raise type(exc)(said(str(exc))) from None
        seconds = sum(result.seconds.values())
        say(
            f"{result.rows:,} packets from {result.frames:,} frames of {result.files} capture(s)"
            f" ({result.windows} ranges) in {seconds:.1f} s -> {out}"
        )
        for error in result.errors:
            say(f"mqtt: error: {said(error)}; the packets before that point were ingested")
        if result.errors:
            raise typer.Exit(EXIT_FAILURE)


def _input_size(nbytes: int, tiny: int, small: int) -> "InputSize":
    """session.InputSize of an input of `nbytes`: TINY up to `tiny` bytes, SMALL up to `small`, else LARGE."""
    from mqtt_cli.pipeline.session import InputSize

    return InputSize.TINY if nbytes <= tiny else InputSize.SMALL if nbytes <= small else InputSize.LARGE


def _data_files(table: Path) -> list[Path]:
    """The files Spark reads as the table's data: every one in it, in folders too, but those whose names start
    with _ or . (Spark's own: _SUCCESS, _temporary, .crc files)."""
    import os

    found: list[Path] = []
    for root, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        found.extend(Path(root, f) for f in sorted(files) if not f.startswith(("_", ".")))
    return found


_PARQUET_MAGIC = (b"PAR1", b"PARE")  # plain, encrypted footer


def _not_parquet(files: list[Path]) -> Path | None:
    """The first non-empty file that does not begin and end with Parquet's mark, or None: said in a line before
    Spark starts (Spark would take seconds to start, then fail on it with a page of Java)."""
    for path in files:
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                if size == 0:
                    continue  # Spark skips an empty file
                f.seek(0)
                head = f.read(4)
                f.seek(max(0, size - 4))
                tail = f.read(4)
        except OSError:
            continue  # unreadable: Spark's own error names it
        # The smallest Parquet file is its mark, a footer's length (4 bytes) and its mark again.
        if size < 12 or head not in _PARQUET_MAGIC or tail not in _PARQUET_MAGIC:
            return path
    return None


@app.command()
def report(
    table: Annotated[
        Path, typer.Argument(help="Directory of a table written by ingest or record.", show_default=False)
    ],
    json_out: Annotated[
        bool, typer.Option("--json", "-j", help="The report as one JSON object, for machines.")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write a self-contained HTML page with charts.", show_default=False),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Rows in the per-topic, per-client and session lists.")] = 20,
    master: Master = "local[*]",
    conf: Conf = None,
) -> None:
    """Report on a table: traffic per topic and client over time, QoS 1/2 latencies (p50/p90/p99),
    unacknowledged messages, DUP re-sends, sessions, keepalive and pings, refused connections, malformed packets.

    Exit codes: 0 done, 1 the table cannot be read or a query failed, 2 bad usage, 4 pyspark or Java missing.
    """
    if not table.is_dir():
        fail(f"{table}: no such directory (write one with `mqtt analyze ingest`)", EXIT_USAGE)
    _require_spark()
    files = _data_files(table)
    if not any(f.suffix == ".parquet" for f in files):
        fail(
            f"{table}: not a Parquet table, it holds no .parquet file (write one with `mqtt analyze ingest`)",
            EXIT_USAGE,
        )
    if (stray := _not_parquet(files)) is not None:
        fail(
            f"{stray} is not a Parquet file, and Spark reads every file in {table}: move it out of the table",
            EXIT_FAILURE,
        )
    if top < 1:
        fail("--top must be at least 1", EXIT_USAGE)
    settings = _confs(conf)
    if html is not None:
        _check_html_target(html)
    size = _input_size(sum(f.stat().st_size for f in files), _TINY_TABLE_BYTES, _SMALL_TABLE_BYTES)
    with _spark(master, settings, size=size) as (spark, _ctrl_c):
        from mqtt_cli.pipeline.report import build_report

        result = build_report(spark, str(table), top)
    if html is not None:
        from mqtt_cli.pipeline.html import report_html

        try:
            html.write_text(report_html(result), encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {html}: {exc.strerror or exc}", EXIT_FAILURE)
    if json_out:
        import json

        print(json.dumps(result, default=str, ensure_ascii=False))
    else:
        from mqtt_cli.pipeline.tables import report_tables
        from mqtt_cli.render import print_whole

        print_whole(report_tables(result))


@app.command()
def record(
    url: Annotated[
        str, typer.Option("--url", "-L", help="Broker URL: mqtt[s]://[user:password@]host[:port].", show_default=False)
    ],
    topic: Annotated[
        list[str], typer.Option("--topic", "-t", help="Topic filter to subscribe to (repeatable).", show_default=False)
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory of the Parquet table to write.", show_default=False)
    ],
    duration: Annotated[
        float | None,
        typer.Option("--duration", help="Stop after this many seconds (default: at Ctrl-C).", show_default=False),
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", "-C", help="Stop once this many messages are written.", show_default=False)
    ] = None,
    qos: Annotated[int, typer.Option("--qos", "-q", help="QoS of the subscriptions.")] = 1,
    client_id: Annotated[
        str | None, typer.Option("--client-id", "-i", help="Client identifier (default: random).", show_default=False)
    ] = None,
    persistent: Annotated[
        bool, typer.Option("--persistent", help="Keep the session at the broker between runs (needs --client-id).")
    ] = False,
    trigger: Annotated[float, typer.Option("--trigger", help="Seconds between micro-batches written.")] = 1.0,
    master: Master = "local[*]",
    conf: Conf = None,
) -> None:
    """Record live traffic into the same kind of table as ingest (Spark Structured Streaming, at most once).

    Exit codes: 0 done, 1 the broker or a Spark job failed, 2 bad usage, 4 pyspark or Java missing, 130 interrupted
    (the micro-batches written so far are kept).
    """
    if qos not in (0, 1, 2):
        fail("--qos must be 0, 1 or 2", EXIT_USAGE)
    if persistent and not client_id:
        fail("--persistent needs --client-id: the broker finds the session by it", EXIT_USAGE)
    if duration is not None and duration <= 0:
        fail("--duration must be positive", EXIT_USAGE)
    if trigger <= 0:
        fail("--trigger must be positive", EXIT_USAGE)
    if count is not None and count < 1:
        fail("--count must be at least 1", EXIT_USAGE)
    from mqtt_cli.core.topics import topic_filter_error
    from mqtt_cli.net.transports import parse_url

    try:
        parse_url(url)
    except ValueError as exc:
        fail(f"--url {exc}", EXIT_USAGE)
    for item in topic:
        problem = topic_filter_error(item)
        if problem:
            fail(f"--topic {item!r}: {problem}", EXIT_USAGE)
    settings = _confs(conf)
    if master.startswith("local"):
        _require_spark()
        _check_writable(out)
    options = {"qos": str(qos)}
    if client_id:
        options["client_id"] = client_id
    if persistent:
        options["persistent"] = "true"
    show: Callable[[int], None] | None = None
    if sys.stderr.isatty():

        def show(rows: int) -> None:
            say(f"\r{rows:,} messages written to {out}", end="")

    # Ctrl-C stops the query between micro-batches (no job cancelled): what was written stays, consistent.
    with _spark(master, settings, cancel_jobs=False) as (spark, ctrl_c):
        from mqtt_cli.pipeline.record import record as run_record

        def started() -> None:
            from mqtt_cli.net.transports import parse_url

            until = f"for {duration:g} s" if duration is not None else "until Ctrl-C"
            until += f" or {count:,} messages" if count is not None else ""
            say(f"recording {', '.join(topic)} from {parse_url(url).endpoint} into {out} {until}")

        rows = run_record(
            spark, url, topic, str(out), duration=duration, options=options, count=count,
            trigger_seconds=trigger, on_progress=show, on_started=started, stop=lambda: ctrl_c.interrupted,
        )  # fmt: skip
        if show is not None:
            say("")
        say(f"{rows:,} messages written to {out}")
        if ctrl_c.interrupted:
            say(f"mqtt: interrupted: the micro-batches written to {out} are kept")
            raise typer.Exit(EXIT_INTERRUPTED)
