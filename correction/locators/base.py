"""The `Locator` seam: one failing rollout (a view) in, one `Localization` out. Strategies by name.

    locator = make_locator("counterfactual", expert=ModelRole(model="oracle/{family}"))
    loc = await locator.locate(traj.view(), harness, run)        # run: correction.runner.RolloutFn
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

from agents.records import Trajectory
from correction.records import Localization
from correction.runner import RolloutFn
from harness.program import Harness


@runtime_checkable
class Locator(Protocol):
    """Names the turn whose action made a failing rollout fail.

    Contract:
    - `name` is what the records carry as `locator`.
    - `locate(trajectory, harness, run)` takes a *view* (`Trajectory.view()`) and calls
      `trajectory.require_view(name)` first: a locator never reads simulation ground truth. `harness` is the
      harness the rollout ran under (continuations run under it); `run` runs episodes (never Ray here).
    - It returns `Localization(t_star=None, ...)` with the reason when no turn can be named (the expert fails
      from the start, a replay diverged); it raises only for caller bugs (ground truth attached).
    - `t_star` is a 0-based assistant turn of that trajectory, < len(trajectory.turns).
    """

    name: str

    async def locate(self, trajectory: Trajectory, harness: Harness, run: RolloutFn) -> Localization: ...


STRATEGIES: dict[str, str] = {
    "counterfactual": "correction.locators.counterfactual:CounterfactualLocator",
    "divergence": "correction.locators.divergence:DivergenceLocator",
}


def make_locator(name: str, **options: Any) -> Locator:
    """Build a strategy by name; `options` go to its constructor (e.g. `expert=ModelRole(...)`)."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown locator '{name}'; use one of: {', '.join(STRATEGIES)}")
    module, _, attr = STRATEGIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)(**options)
