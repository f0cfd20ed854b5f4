"""Writing the ingest table from the Python workers: what `ingest` does under a local master.

Spark's own Parquet writer runs on the JVM, a row at a time, after the rows came back from the Python workers as
Arrow batches and were cached for the connection numbering (a join). On a 2-core machine that JVM work took more
CPU than decoding itself, and it is what kept local[2] from scaling. Here the workers keep the rows in Arrow and
write Parquet with pyarrow (C++), which costs a fraction of that, and the numbering needs no join:

1. `dissect_to_parts` (one task per shuffle partition): the decoded batches go into an Arrow file of this job's
   staging directory (lz4), with `_numbered` (the frame at which each connection was numbered); the task returns the
   file's path, its row count and the distinct (file_id, _numbered) pairs in it.
2. the driver ranks the pairs per capture file: the rank is `mqtt dump`'s connection number (`stream`).
3. `finish_parts` (one task per staged file): `stream` and `time` are set (numpy, a column at a time), the
   columns put in the table's order, and the rows written as Parquet under their final name.
4. `commit`: the directory of final files, with `_SUCCESS`, becomes the table by one rename (an overwrite
   renames the old table aside first, and back if that fails; an append moves the files in). The staging
   directory goes. A job that fails leaves the table as it was.

The files are snappy Parquet with the schema Spark's writer gives them (timestamps as INT64 microseconds, which
the session also asks of Spark's writer: tests compare both writers' tables). Only a local path can be written
this way (every worker must see it), so other masters keep Spark's writer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .dissect import DissectOptions, dissect_rows, window_frames
from .schema import TABLE_COLUMNS, arrow_schema
from .splits import Window

__all__ = [
    "PART_COLUMNS",
    "commit",
    "dissect_to_parts",
    "finish_parts",
    "rank",
    "staging_dir",
    "windows_to_parts",
    "write_empty",
]

# What a dissect task returns: one row per distinct (file_id, _numbered) of its file, with the file and its size.
PART_COLUMNS: tuple[tuple[str, str], ...] = (
    ("file_id", "int"),
    ("_numbered", "bigint"),
    ("path", "string"),
    ("rows", "bigint"),
)
_COMPRESSION = "snappy"  # Spark's default for Parquet
_STAGED_COMPRESSION = "lz4"  # staged rows: Arrow IPC, cheap to write and map back; lz4 keeps them small on disk


def staging_dir(out: str, job: str) -> Path:
    """Beside the table, not in it: an overwrite replaces the table directory as a whole."""
    target = Path(out).resolve()
    return target.parent / f".{target.name}.staging-{job}"


def dissect_to_parts(
    batches: Iterator[Any], options: DissectOptions, names: dict[int, str], staging: str
) -> Iterator[Any]:
    """mapInArrow: sorted frames in (see dissect.dissect_rows), Parquet written, PART_COLUMNS out."""
    import pyarrow as pa

    path = os.path.join(staging, f"rows-{uuid.uuid4().hex}.arrow")
    writer = None
    rows = 0
    pairs: list[Any] = []
    try:
        for batch in dissect_rows(batches, options, names):
            if writer is None:
                staged = pa.ipc.IpcWriteOptions(compression=_STAGED_COMPRESSION)
                writer = pa.ipc.new_file(path, batch.schema, options=staged)
            writer.write_batch(batch)
            rows += batch.num_rows
            pairs.append(pa.Table.from_batches([batch.select(["file_id", "_numbered"])]).group_by(
                ["file_id", "_numbered"]).aggregate([]))  # fmt: skip
    finally:
        if writer is not None:
            writer.close()
    schema = arrow_schema(PART_COLUMNS)
    if not rows:
        return
    distinct = pa.concat_tables(pairs).group_by(["file_id", "_numbered"]).aggregate([])
    n = distinct.num_rows
    yield pa.RecordBatch.from_arrays(
        [
            distinct.column("file_id").combine_chunks(),
            distinct.column("_numbered").combine_chunks(),
            pa.array([path] * n, pa.string()),
            pa.array([rows] * n, pa.int64()),
        ],
        schema=schema,
    )


def windows_to_parts(
    batches: Iterator[Any], windows: list[Window], limits: dict[int, int], options: DissectOptions,
    names: dict[int, str], staging: str,
) -> Iterator[Any]:  # fmt: skip
    """mapInArrow, one task for a whole small input: window indexes in, in order (so frames come sorted by file
    and frame, as from a single shuffle partition), then as dissect_to_parts."""
    return dissect_to_parts(window_frames(batches, windows, limits), options, names, staging)


def rank(pairs: list[tuple[int, int]]) -> dict[int, list[int]]:
    """Per capture file, its connections' `_numbered` values in order: a value's index is its `stream`."""
    by_file: dict[int, set[int]] = {}
    for file_id, numbered in pairs:
        by_file.setdefault(file_id, set()).add(numbered)
    return {file_id: sorted(values) for file_id, values in by_file.items()}


def finish_parts(batches: Iterator[Any], ranks: dict[int, list[int]], final: str, job: str) -> Iterator[Any]:
    """mapInArrow: staged file paths in (with their task number), final Parquet files written, their paths out."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = arrow_schema(TABLE_COLUMNS)
    sorted_ranks = {fid: np.asarray(values, dtype=np.int64) for fid, values in ranks.items()}
    written = []
    for batch in batches:
        for index, path in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            with pa.memory_map(path) as source:
                table = pa.ipc.open_file(source).read_all()
            file_ids = table.column("file_id").to_numpy()
            numbered = table.column("_numbered").to_numpy()
            stream = np.empty(len(numbered), dtype=np.int32)
            for fid in np.unique(file_ids):
                mask = file_ids == fid
                stream[mask] = np.searchsorted(sorted_ranks[int(fid)], numbered[mask])
            # Spark's timestamp_micros(ts_ns div 1000): integer division towards zero, as Arrow's.
            time = pc.cast(pc.divide(table.column("ts_ns"), 1000), pa.timestamp("us", tz="UTC"))
            columns = {name: table.column(name) for name in table.column_names}
            columns["stream"] = pa.chunked_array([stream], pa.int32())
            columns["time"] = time
            out = pa.table([columns[name] for name in schema.names], schema=schema)
            target = os.path.join(final, f"part-{index:05d}-{job}-c000.snappy.parquet")
            pq.write_table(out, target, compression=_COMPRESSION)
            written.append(target)
    yield pa.RecordBatch.from_arrays([pa.array(written, pa.string())], names=["path"])


def write_empty(final: Path, job: str) -> None:
    """One Parquet file with the table's columns and no rows."""
    import pyarrow.parquet as pq

    schema = arrow_schema(TABLE_COLUMNS)
    pq.write_table(schema.empty_table(), final / f"part-00000-{job}-c000.snappy.parquet", compression=_COMPRESSION)


def commit(final: Path, out: str, mode: str) -> None:
    """Puts the finished files in place (see the module's docstring, step 4). A new table or an overwrite is one
    rename of the whole directory (the old table is renamed aside first and put back if that fails); an append
    moves the files in one by one."""
    target = Path(out)
    (final / "_SUCCESS").touch()
    occupied = target.exists() and (not target.is_dir() or any(target.iterdir()))
    if mode == "errorifexists" and occupied:
        raise FileExistsError(f"{out} exists")
    if mode == "append" and occupied:
        for part in sorted(final.iterdir()):
            if part.name != "_SUCCESS":
                os.replace(part, target / part.name)
        (target / "_SUCCESS").touch()
        return
    aside = None
    if target.is_dir() and not occupied:
        target.rmdir()
    elif target.exists():
        aside = final.parent / "replaced"
        os.rename(target, aside)
    try:
        os.rename(final, target)
    except OSError:
        if aside is not None:
            os.rename(aside, target)
        raise
