"""The INFO messages one of our loggers emits during a block (Prefect's logging setup keeps them from pytest's
root-logger capture, so `caplog` does not see them).

    with logged_lines("flows.round.correct") as lines:
        correct_run(...)
    assert lines[-1].endswith("done")
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def logged_lines(name: str) -> Iterator[list[str]]:
    """The logger `name` at INFO for the block, its messages appended to the yielded list; level and handlers
    restored after."""
    handler, logger = _Lines(), logging.getLogger(name)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
