"""The error an edit raises (its own module so `harness/composite.py` and `harness/edits.py` both use it
without an import cycle through `harness/program.py`)."""

from __future__ import annotations


class EditError(ValueError):
    """An edit that cannot apply; `reason` is written for the proposer (a human or a reflection model)."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        super().__init__(reason if index is None else f"edit {index}: {reason}")
        self.reason = reason
        self.index = index
