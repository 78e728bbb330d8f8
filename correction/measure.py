"""Measurement only (SIMULATED ground truth): locators against the injected faults of `flawed/<family>`
single-fault rollouts. This is the one module of `correction/` that reads `Trajectory.injected_faults`;
locators get `trajectory.view()`.

The window of acceptable t* for a single-fault failing rollout is [injected turn, first unrecoverable turn]:
the injected turn is the simulator's label; the first unrecoverable turn u is measured exhaustively, by a
linear scan of R(k) (the pure oracle `oracle/<family>`, deterministic, continuing from the student's state
after k turns) for k = injected+1 .. n: u is the first turn after which the oracle can no longer succeed.
(With the same expert, the counterfactual locator's binary search agrees with this scan whenever R is
monotone above the injected turn; the exact-turn accuracy against the injected turn is the independent check.)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agents.records import ModelRole, Trajectory
from correction.locators.counterfactual import ExpertProbe
from correction.runner import RolloutFn
from harness.program import Harness


class Window(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    injected: int
    unrecoverable: int | None  # None: the oracle still succeeds after every student turn
    kind: str
    category: str


async def ground_truth_window(traj: Trajectory, harness: Harness, run: RolloutFn,
                              oracle: ModelRole | None = None, extra_turns: int = 30) -> Window:
    """The window of a single-fault failing rollout (`traj` WITH its injected faults)."""
    if len(traj.injected_faults) != 1:
        raise ValueError(f"{traj.id} has {len(traj.injected_faults)} injected faults; the window needs exactly one")
    fault = traj.injected_faults[0]
    probe = ExpertProbe(traj.view(), harness, run, oracle or ModelRole(model="oracle/{family}"), 1, extra_turns)
    unrecoverable = None
    for k in range(fault.turn + 1, len(traj.turns) + 1):
        if not await probe.holds(k):
            unrecoverable = k - 1
            break
    return Window(injected=fault.turn, unrecoverable=unrecoverable, kind=fault.kind, category=fault.category)


def inside(t_star: int | None, w: Window, n_turns: int) -> bool:
    """t* in [injected, unrecoverable] (the last turn stands in for a missing unrecoverable turn)."""
    hi = w.unrecoverable if w.unrecoverable is not None else n_turns - 1
    return t_star is not None and w.injected <= t_star <= hi
