"""`mqtt analyze ingest`: capture files -> a Parquet table, one row per MQTT packet (columns: schema.py).

    result = ingest(spark, ["a.pcap", "b.pcapng"], "table/", DissectOptions(ports=[1883]))

The stages, each parallel over Spark's executors:

1. plan (driver): every file is opened and sniffed as `mqtt dump` does; uncompressed files larger than the
   split size are cut into byte ranges (splits.py).
2. scan (one task per range): each range finds its first record and counts its packet records; the driver
   settles exact, record-aligned windows and the global frame number each one starts at.
3. frames (one task per window): records are read by the capture package's readers; frames holding a TCP
   segment come out with their connection key (dissect.window_frames).
4. shuffle: frames are partitioned by (file, connection key), hashed by Spark (Murmur3 on the JVM, the same in
   every process, unlike Python's salted `hash`), and sorted by frame number within each partition.
5. dissect (one task per partition): one stateful Dissector per file decodes each connection's frames in
   order, through the core codec, into exactly the records `mqtt dump --json` writes (dissect.dissect_rows).
6. number and write: connection numbers are made global per file (rank of the frame at which each connection
   was numbered), then the rows are written as Parquet. Local masters: the workers write the files with
   pyarrow as they decode and the driver ranks the connections (parts.py); other masters: Spark's writer, the
   rows cached and joined with the ranks.

Small inputs (SMALL_BYTES in all, a local master) skip two jobs whose start-up would cost more than their work:
the scan of step 2 and the final writing of step 6 run in the driver, with the same functions the tasks run.
Decoding (steps 3-5) stays a Spark job.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .dissect import FRAME_COLUMNS, ROW_COLUMNS, DissectOptions, damage_in, dissect_rows, window_frames
from .parts import (
    PART_COLUMNS,
    commit,
    dissect_to_parts,
    finish_parts,
    rank,
    staging_dir,
    windows_to_parts,
    write_empty,
)
from .schema import TABLE_COLUMNS, ddl
from .session import is_local
from .splits import FilePlan, Window, plan_file, scan, settle

__all__ = ["DEFAULT_SPLIT_BYTES", "IngestResult", "ingest", "plan_windows"]

DEFAULT_SPLIT_BYTES = 32 << 20
SMALL_BYTES = 8 << 20  # captures this small in all: scan and final write in the driver (module docstring)
_MODES = ("errorifexists", "overwrite", "append")
_SMALL_ROWS = 100_000  # staged rows the driver writes as the table itself (cheaper than a job's start-up)
_MIN_SPLIT = 1 << 20


@dataclass
class IngestResult:
    files: int = 0
    windows: int = 0
    frames: int = 0  # capture records (frames) in the files, up to any damage
    rows: int = 0  # MQTT packets (and MALFORMED records) written
    seconds: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # damaged captures: what and where (read up to there)


def _split_size(spark: Any, sizes: Sequence[int], requested: int | None) -> int:
    """The range size: as asked, else enough ranges for every core to have a few (big files), at most 32 MiB."""
    if requested:
        return max(512, requested)  # small ranges on purpose: the tests cut small captures into many
    cores = max(1, spark.sparkContext.defaultParallelism)
    total = sum(sizes)
    return max(_MIN_SPLIT, min(DEFAULT_SPLIT_BYTES, -(-total // (cores * 4))))


def _small(spark: Any, sizes: Sequence[int]) -> bool:
    return sum(sizes) <= SMALL_BYTES and is_local(spark.sparkContext.master)


def plan_windows(
    spark: Any, paths: Sequence[str], split_bytes: int | None = None
) -> tuple[list[Window], dict[int, int], dict[int, str]]:
    """Stages 1 and 2: (windows, packet records per file id, corruption message per damaged file id). Raises
    CaptureError for a file that cannot be opened or is not a capture, before anything runs."""
    sizes = [os.path.getsize(p) if os.path.isfile(p) else 0 for p in paths]
    target = _split_size(spark, sizes, split_bytes)
    plans: list[FilePlan] = [plan_file(path, file_id, target) for file_id, path in enumerate(paths)]
    splits = [split for plan in plans for split in plan.splits]
    if _small(spark, sizes):
        scans = [scan(split) for split in splits]
    else:
        scans = spark.sparkContext.parallelize(splits, max(1, len(splits))).map(scan).collect()
    windows: list[Window] = []
    errors: dict[int, str] = {}
    frames: dict[int, int] = {}
    at = 0
    for file_id, plan in enumerate(plans):
        mine = scans[at : at + len(plan.splits)]
        at += len(plan.splits)
        file_windows, packets, error = settle(plan, mine)
        windows += file_windows
        frames[file_id] = packets
        if error is not None:
            errors[file_id] = error
    return windows, frames, errors


def ingest(
    spark: Any,
    paths: Sequence[str],
    out: str,
    options: DissectOptions | None = None,
    *,
    mode: str = "errorifexists",
    split_bytes: int | None = None,
    on_stage: Callable[[str], None] | None = None,
    writer: str | None = None,
    labels: Sequence[str] | None = None,
) -> IngestResult:
    """Decodes `paths` into a Parquet table at `out` (see the module's docstring). `mode` is Spark's save mode
    (errorifexists, overwrite, append). `on_stage` is told the name of each stage as it begins. `writer`:
    "workers" or "spark" (stage 6); by default the workers under a local master, else Spark. `labels`: what
    the `capture_file` column says for each path (default: the path)."""
    if mode not in _MODES:
        raise ValueError(f"mode {mode!r}: use one of {', '.join(_MODES)}")
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} captures")
    options = options or DissectOptions()
    say = on_stage or (lambda _name: None)
    result = IngestResult(files=len(paths))
    clock = time.perf_counter()

    say("scanning")
    windows, per_file, errors = plan_windows(spark, paths, split_bytes)
    result.errors = [errors[f] for f in sorted(errors)]
    result.frames = sum(per_file.values())
    result.windows = len(windows)
    result.seconds["scan"] = time.perf_counter() - clock

    names = dict(enumerate(labels if labels is not None else paths))
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    if writer is None:
        writer = "workers" if is_local(spark.sparkContext.master) else "spark"
    write = _write_from_workers if writer == "workers" else _write_with_spark
    limits: dict[int, int] = {}  # file_id -> last frame to read: damage the scan did not see, found by a task
    # One shuffle partition would hold every frame, in (file, frame) order: the order in which the windows are
    # read one after another. A small input under the workers' writer is then read and decoded by one task.
    one_task = parts == 1 and writer == "workers" and _small(spark, [os.path.getsize(p) for p in paths])
    while True:
        say("decoding")
        clock = time.perf_counter()
        if one_task:
            ordered = spark.range(0, max(1, len(windows)), 1, 1)
            decode = partial(windows_to_parts, windows=windows, limits=dict(limits))
        else:
            frames = spark.range(0, max(1, len(windows)), 1, max(1, len(windows))).mapInArrow(
                partial(window_frames, windows=windows, limits=dict(limits)), ddl(FRAME_COLUMNS)
            )
            ordered = frames.repartition(parts, "file_id", "key").sortWithinPartitions("file_id", "frame")
            decode = None
        try:
            if decode is not None:
                _write_from_workers(spark, ordered, out, options, names, mode, result, clock, say, decode)
            else:
                write(spark, ordered, out, options, names, mode, result, clock, say)
            return result
        except Exception as exc:
            damage = damage_in(exc)
            # Tasks of one file run at once: the damage Spark reports first need not be the file's earliest, so
            # go on while it moves the file's end earlier (it ends: the limit only decreases).
            if damage is None or damage[1] >= limits.get(damage[0], per_file.get(damage[0], 0) + 1):
                raise
            # The same as mqtt dump: the file is read up to the damage, which is reported. Rare: read again.
            file_id, last, message = damage
            limits[file_id] = last
            errors[file_id] = message  # the earliest damage of the file is the one mqtt dump reports
            result.errors = [errors[f] for f in sorted(errors)]
            result.frames = sum(min(n, limits.get(f, n)) for f, n in per_file.items())


def _write_from_workers(
    spark: Any, ordered: Any, out: str, options: DissectOptions, names: dict[int, str], mode: str,
    result: IngestResult, clock: float, say: Callable[[str], None], decode: Callable[..., Any] = dissect_to_parts,
) -> None:  # fmt: skip
    """Local masters: the workers write the Parquet files (parts.py). `decode`: what the task runs on `ordered`
    (sorted frames, or window indexes for parts.windows_to_parts)."""
    if mode == "errorifexists" and os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise FileExistsError(f"{out} exists")
    job = uuid.uuid4().hex[:12]
    staging = staging_dir(out, job)
    final = staging / "final"
    final.mkdir(parents=True)
    try:
        staged = ordered.mapInArrow(
            partial(decode, options=options, names=names, staging=str(staging)), ddl(PART_COLUMNS)
        ).collect()
        files = sorted({(row["path"], row["rows"]) for row in staged})
        result.rows = sum(n for _, n in files)
        result.seconds["decode"] = time.perf_counter() - clock

        say("writing")
        clock = time.perf_counter()
        ranks = rank([(row["file_id"], row["_numbered"]) for row in staged])
        if files and sum(n for _, n in files) <= _SMALL_ROWS:  # a few files of few rows: in the driver
            import pyarrow as pa

            todo = pa.RecordBatch.from_pydict({"index": list(range(len(files))), "path": [p for p, _ in files]})
            for _ in finish_parts(iter([todo]), ranks=ranks, final=str(final), job=job):
                pass
        elif files:
            todo = spark.createDataFrame([(i, path) for i, (path, _) in enumerate(files)], "index int, path string")
            todo.repartition(len(files), "index").mapInArrow(
                partial(finish_parts, ranks=ranks, final=str(final), job=job), "path string"
            ).collect()
        else:
            write_empty(final, job)  # no packet at all: still a table Spark can read (as Spark's writer leaves)
        commit(final, out, mode)
        result.seconds["write"] = time.perf_counter() - clock
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_with_spark(
    spark: Any, ordered: Any, out: str, options: DissectOptions, names: dict[int, str], mode: str,
    result: IngestResult, clock: float, say: Callable[[str], None],
) -> None:  # fmt: skip
    """Other masters: Spark's writer (any path Spark can write: HDFS, S3, ...), the numbering by a join."""
    from pyspark import StorageLevel
    from pyspark.sql import Window as SqlWindow
    from pyspark.sql import functions as F

    rows = ordered.mapInArrow(partial(dissect_rows, options=options, names=names), ddl(ROW_COLUMNS)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        result.rows = rows.count()
        result.seconds["decode"] = time.perf_counter() - clock

        say("writing")
        clock = time.perf_counter()
        # mqtt dump's connection numbers: per file, in the order the connections were numbered.
        order = SqlWindow.partitionBy("file_id").orderBy("_numbered")
        conns = rows.select("file_id", "_numbered").distinct().withColumn("_stream", F.row_number().over(order) - 1)
        table = (
            rows.join(F.broadcast(conns), ["file_id", "_numbered"])
            .withColumn("stream", F.col("_stream").cast("int"))
            .withColumn("time", F.expr("timestamp_micros(ts_ns div 1000)"))
            .select(*[name for name, _ in TABLE_COLUMNS])
        )
        table.write.mode(mode).parquet(out)
        result.seconds["write"] = time.perf_counter() - clock
    finally:
        rows.unpersist()
