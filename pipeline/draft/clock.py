"""The clock a draft's time budget is kept on: wall time, or this process's CPU time.

`--minutes` is wall time on the user's machine. On a shared machine the wall clock says little
about what a run costs (one CPU-minute took 6 wall minutes at load 10 on 2 cores), so experiments
budget on CPU time instead: the process's CPU seconds divided by its torch threads, i.e. the wall
time the same work takes on that many otherwise idle cores (spin-waiting threads count, so under
load it over-counts: a conservative stand-in).
"""

from __future__ import annotations

import enum
import time


class ClockKind(enum.StrEnum):
    wall = "wall"
    cpu = "cpu"


class Clock:
    """Seconds since the run began on `kind`'s clock, plus `offset` seconds an interrupted run spent."""

    def __init__(self, kind: ClockKind, threads: int = 1, offset: float = 0.0) -> None:
        self.kind = kind
        self.threads = max(1, threads)
        self._origin = self._raw()
        self.offset = offset

    def _raw(self) -> float:
        return time.monotonic() if self.kind is ClockKind.wall else time.process_time() / self.threads

    def __call__(self) -> float:
        return self._raw() - self._origin + self.offset
