"""The `Attributor` seam: one failing rollout in, one `Attribution` out. Strategies are chosen by name.

    attributor = make_attributor("heuristic")                          # offline, the embedded default
    attributor = make_attributor("judge:hosted_vllm/judge", completion=fn)   # any LiteLLM model as judge
    records = await attribute_all(attributor, [t.view() for t in failing])
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agents.records import Trajectory
from analysis.attribution.records import Attribution
from harness.strategies import Registry, Strategy


@runtime_checkable
class Attributor(Protocol):
    """Says why a rollout failed, in the six-category ontology.

    Contract:
    - `name` is what the records carry as `attributor` ('heuristic', 'judge:<model>').
    - `attribute(trajectory)` takes a *view* (`Trajectory.view()`): it calls `trajectory.require_view(name)`
      first and so raises ValueError for a trajectory that still carries simulation ground truth
      (`injected_faults`); no attributor ever reads it. It also raises ValueError for a passing trajectory
      (attribution is for failures). Both are caller bugs.
    - For one trajectory's trouble (an unparseable model answer, no rule matching) it never raises: it
      returns an `Attribution` with category `unattributed`, confidence 0 and the reason as rationale.
    - `evidence_turns` are 0-based assistant turns of that trajectory; `confidence` is in [0, 1].
    - It never mutates the trajectory. It may be called concurrently on different trajectories.
    """

    name: str

    async def attribute(self, trajectory: Trajectory) -> Attribution: ...


ATTRIBUTORS = Registry("attributor", (
    Strategy("heuristic", "analysis.attribution.heuristic:HeuristicAttributor", options="config="),
    Strategy("judge", "analysis.attribution.judge:JudgeAttributor", takes_model=True,
             options="completion=, api_base=, api_key_env=, transcript=, max_tokens="),
))


def parse_spec(spec: str) -> tuple[str, str | None]:
    """'heuristic' -> ('heuristic', None); 'judge:MODEL' -> ('judge', 'MODEL'). Raises ValueError otherwise."""
    return ATTRIBUTORS.parse(spec)


def make_attributor(spec: str, **options: Any) -> Attributor:
    """Build a strategy by name; `options` go to its constructor (the judge needs `completion=`)."""
    return ATTRIBUTORS.make(spec, **options)  # type: ignore[no-any-return]


async def attribute_all(attributor: Attributor, trajectories: Sequence[Trajectory],
                        concurrency: int = 4) -> list[Attribution]:
    """Attribute each (failing, viewed) trajectory; results in input order. Views are checked before any call."""
    for t in trajectories:
        t.require_view(attributor.name)
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(t: Trajectory) -> Attribution:
        async with sem:
            return await attributor.attribute(t)

    return list(await asyncio.gather(*(one(t) for t in trajectories)))
