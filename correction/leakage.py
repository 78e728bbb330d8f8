"""The leakage guard: no training row may come from an instance the student is evaluated on.

    check_no_leakage(trajectories, what="imitation set")   # raises LeakageError, or returns them unchanged

Every builder of a training set (imitation, correction, the student's own successes, the round's
`arm_data` stage) calls it on the trajectories its rows come from. Allowed splits: `train` (instances
0-19) and `pretrain` (>= 1000). A row from `val` (harness selection) or `test` (the reported numbers)
would let the adapter memorise the instances it is scored on: the error names every offending trajectory
and instance, so nothing is built from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from tasks.records import TaskInstance

TRAINABLE_SPLITS: frozenset[str] = frozenset({"train", "pretrain"})


class HasInstance(Protocol):
    """A row source: a trajectory (or a record wrapping one) with its id and the instance it ran on."""

    @property
    def id(self) -> str: ...

    @property
    def instance(self) -> TaskInstance: ...


T = TypeVar("T", bound=HasInstance)


class LeakageError(ValueError):
    """A training set would hold rows from evaluation instances; `offending` lists (trajectory id, instance id, split)."""

    def __init__(self, what: str, offending: list[tuple[str, str, str]]) -> None:
        shown = "; ".join(f"trajectory {t} on instance {i} (split {s})" for t, i, s in offending[:10])
        more = f" and {len(offending) - 10} more" if len(offending) > 10 else ""
        super().__init__(f"{what}: {len(offending)} row(s) come from val/test instances, which must never be "
                         f"trained on: {shown}{more}. Build training sets from the train (or pretrain) split.")
        self.what = what
        self.offending = offending


def check_no_leakage(rows: Iterable[T], what: str = "training set") -> list[T]:
    """Return `rows` as a list when every one comes from a train or pretrain instance; else raise LeakageError."""
    out = list(rows)
    bad = [(r.id, r.instance.id, r.instance.split) for r in out if r.instance.split not in TRAINABLE_SPLITS]
    if bad:
        raise LeakageError(what, bad)
    return out
