"""The `Selector` seam: the expert's candidates for t* in, the chosen one (and every candidate's score) out.

    selector = make_selector("verifier_replay", student=ModelRole(model="hosted_vllm/student", ...), replays=2)
    sel = await selector.select(view, harness, t_star, candidates, run)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from correction.records import Candidate
from correction.runner import RolloutFn
from harness.program import Harness
from harness.strategies import Registry, Strategy


class Selection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chosen: int | None = Field(description="Index of the chosen candidate; None when none qualifies.")
    candidates: list[Candidate] = Field(description="The candidates with this selector's scores or ranks filled.")
    rationale: str = Field(description="Why this one (scores compared), or why none.")
    episodes: list[Trajectory] = Field(default_factory=list, description="The chosen candidate's replays, when "
                                       "the selector ran any (prefix + candidate + the student's continuation).")


@runtime_checkable
class Selector(Protocol):
    """Chooses the candidate to train on.

    Contract:
    - `select(view, harness, t_star, candidates, run)` takes a view (never ground truth), the harness h* the
      rollout ran under, the turn and the expert's candidates for it; it returns a `Selection` whose
      `candidates` are the same candidates in the same order with its scores (`replay_scores`) or ranks
      (`judge_rank`) filled. `chosen` is None when no candidate qualifies (e.g. every replay scored 0 and
      `require_success` is set); it never raises for one candidate's trouble.
    - Deterministic given the runner's episodes: ties go to the lowest index.
    """

    name: str

    async def select(self, view: Trajectory, harness: Harness, t_star: int, candidates: list[Candidate],
                     run: RolloutFn) -> Selection: ...


SELECTORS = Registry("selector", (
    Strategy("verifier_replay", "correction.selectors.verifier_replay:VerifierReplaySelector",
             options="student= (required), replays=, extra_turns=, require_success="),
    Strategy("judge", "correction.selectors.judge:JudgeSelector", takes_model=True,
             options="completion=, role=, api_base=, max_tokens=, calls=; ignores the replay options"),
))


def parse_selector(spec: str) -> tuple[str, str | None]:
    """'verifier_replay' -> ('verifier_replay', None); 'judge:MODEL' -> ('judge', 'MODEL'); ValueError otherwise."""
    return SELECTORS.parse(spec)


def make_selector(spec: str, **options: Any) -> Selector:
    """Build a strategy by spec; `options` go to its constructor (verifier_replay needs `student=`; the
    judge takes `completion=`, `api_base=` and ignores the replay options)."""
    return SELECTORS.make(spec, **options)  # type: ignore[no-any-return]
