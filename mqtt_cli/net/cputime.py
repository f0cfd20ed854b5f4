"""A process's time on a CPU and waiting for one, summed over its threads: what `mqtt bench` reports for itself
and for the broker (--broker-pid), so that a reader can tell which side was the limit."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuTime:
    cpu_ns: int  # on a CPU
    wait_ns: int  # runnable, waiting for a CPU (Linux schedstat; 0 where unknown)

    def __sub__(self, other: CpuTime) -> CpuTime:
        return CpuTime(self.cpu_ns - other.cpu_ns, self.wait_ns - other.wait_ns)


def cpu_time(pid: int | None = None) -> CpuTime | None:
    """The process `pid`'s (default: this one's) CPU and wait time so far, from /proc/PID/task/*/schedstat (ns,
    as the scheduler accounts it); this process's getrusage() where there is no schedstat; None for another
    process that is gone or unreadable."""
    tasks = f"/proc/{pid or 'self'}/task"
    try:
        names = os.listdir(tasks)
    except OSError:
        names = []
    cpu = wait = 0
    read = False
    for name in names:
        try:
            with open(f"{tasks}/{name}/schedstat", "rb") as f:
                fields = f.read().split()
        except OSError:  # a thread that ended meanwhile, or no schedstat (kernel without CONFIG_SCHED_INFO)
            continue
        cpu += int(fields[0])
        wait += int(fields[1])
        read = True
    if read:
        return CpuTime(cpu, wait)
    if pid is not None and pid != os.getpid():
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return CpuTime(round((usage.ru_utime + usage.ru_stime) * 1e9), 0)
