"""mosquitto's `$SYS/broker/load/...` figures: per-minute rates smoothed over 1, 5 and 15 minutes.

As mosquitto 2.0 (src/sys_tree.c, calc_load): at each $SYS update, the rate since the last update (per minute)
pulls each average towards it by exp(-elapsed / window). Sans-IO: the caller gives the counters and the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LOAD_WINDOWS", "LoadAverages"]

#: The windows, by the last part of their topic name, in seconds.
LOAD_WINDOWS = {"1min": 60.0, "5min": 300.0, "15min": 900.0}


@dataclass(slots=True)
class LoadAverages:
    """Smoothed rates of named counters. `update` takes the counters' values now; `topics` what to publish."""

    last: float  # when the counters were last given (at first: the start, every counter at 0)
    values: dict[str, int] = field(default_factory=dict)
    current: dict[tuple[str, str], float] = field(default_factory=dict)

    def update(self, counters: dict[str, int], now: float) -> None:
        if now <= self.last:
            return
        elapsed = now - self.last
        for name, value in counters.items():
            rate = (value - self.values.get(name, 0)) * 60.0 / elapsed
            for window, seconds in LOAD_WINDOWS.items():
                exponent = math.exp(-elapsed / seconds)
                key = (name, window)
                self.current[key] = rate + exponent * (self.current.get(key, 0.0) - rate)
        self.values = dict(counters)
        self.last = now

    def topics(self) -> dict[str, str]:
        """`$SYS/broker/load/NAME/WINDOW` -> the value as mosquitto prints it (two decimals)."""
        return {f"$SYS/broker/load/{name}/{window}": f"{value:.2f}" for (name, window), value in self.current.items()}
