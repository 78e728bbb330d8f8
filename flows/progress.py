"""Progress of a long stage on the terminal: `done / total (pct), elapsed, ETA`, one log line every few seconds.

The dashboard has the stage's Prefect progress artifact; this is the same count for the person watching the
terminal (`make run`). The caller owns the logger (a Prefect run logger shows the line in both places).

    ticker = Progress("student rollouts", total=40, done=8, emit=log.info)
    ticker.update(9)   # logs when `every_s` has passed since the last line, and always at done == total
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """Counts toward `total` from `done` (work loaded from a store counts as done, not toward the rate)."""

    def __init__(self, label: str, total: int, done: int = 0, emit: Callable[[str], object] = print,
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.start_done, self.done = label, total, done, done
        self.emit, self.every_s, self.clock = emit, every_s, clock
        self.t0 = self.last = clock()

    def line(self) -> str:
        elapsed = self.clock() - self.t0
        pct = 100.0 * self.done / max(self.total, 1)
        text = f"{self.label}: {self.done}/{self.total} ({pct:.0f}%), {_duration(elapsed)}"
        ran = self.done - self.start_done
        if self.done >= self.total:
            return text + ", done"
        if ran > 0:
            return text + f", ETA {_duration(elapsed / ran * (self.total - self.done))}"
        return text + ", ETA unknown"

    def update(self, done: int) -> str | None:
        """Record `done`; emit and return the line when it is due (every `every_s` s, and at the end)."""
        self.done = done
        now = self.clock()
        if done < self.total and now - self.last < self.every_s:
            return None
        self.last = now
        text = self.line()
        self.emit(text)
        return text


def run_logger(fallback: logging.Logger) -> logging.Logger | logging.LoggerAdapter:
    """The Prefect run logger inside a flow or task (terminal and dashboard), else `fallback` (scripts and
    benchmarks that call a stage's code outside Prefect)."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return fallback


def run_emitter(fallback: logging.Logger) -> Callable[[str], object]:
    """Where progress lines go: `run_logger(fallback)`'s INFO."""
    return run_logger(fallback).info
