"""The `Locator` seam: one failing rollout (a view) in, one `Localization` out. Strategies by name.

    locator = make_locator("counterfactual", expert=ModelRole(model="oracle/{family}"))
    loc = await locator.locate(traj.view(), harness, run)        # run: correction.runner.RolloutFn
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agents.records import Trajectory
from correction.records import Localization
from correction.runner import RolloutFn
from harness.program import Harness
from harness.strategies import Registry, Strategy


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


LOCATORS = Registry("locator", (
    Strategy("counterfactual", "correction.locators.counterfactual:CounterfactualLocator",
             options="expert=, samples=, extra_turns=, search="),
    Strategy("divergence", "correction.locators.divergence:DivergenceLocator", options="expert=, samples=, extra_turns="),
    Strategy("mle_agent", "correction.locators.mle_agent:MleAgentLocator", takes_model=True,
             options="role=, api_base=, max_steps=, max_tokens=, client=, calls=; ignores the expert options"),
))


def parse_locator(spec: str) -> tuple[str, str | None]:
    """'counterfactual' -> ('counterfactual', None); 'mle_agent:MODEL' -> ('mle_agent', 'MODEL'); else ValueError."""
    return LOCATORS.parse(spec)


def make_locator(spec: str, **options: Any) -> Locator:
    """Build a strategy by spec; `options` go to its constructor (e.g. `expert=ModelRole(...)`; the mle_agent
    takes `api_base=`, `client=` and ignores the expert options)."""
    return LOCATORS.make(spec, **options)  # type: ignore[no-any-return]
