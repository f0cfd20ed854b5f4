"""A progress display for Spark jobs on a terminal: the stage being run and its tasks done, from the status
tracker, redrawn by a thread of its own (the driver's main thread is blocked in the job)."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

__all__ = ["SparkProgress"]


class SparkProgress:
    """`with SparkProgress(spark) as progress: progress.stage("decoding"); ...` shows, on standard error,
    the current step, the running Spark stage and its tasks. Does nothing when `enabled` is false."""

    def __init__(self, spark: Any, enabled: bool) -> None:
        self._spark = spark
        self._enabled = enabled
        self._label = "starting"
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def stage(self, label: str) -> None:
        self._label = label

    def __enter__(self) -> SparkProgress:
        if self._enabled:
            self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(2)

    def _run(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        tracker = self._spark.sparkContext.statusTracker()
        progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[tasks]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        with progress:
            task = progress.add_task(self._label, total=1, tasks="")
            while not self._done.wait(0.2):
                total = done = 0
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        total += info.numTasks
                        done += info.numCompletedTasks
                progress.update(
                    task,
                    description=self._label,
                    total=max(total, 1),
                    completed=done,
                    tasks=f"{done}/{total} tasks" if total else "",
                )
