"""Suffix repair (mode `suffix`, beyond the paper): when one corrected turn is not enough for the student to
finish (loops, non-termination, a cascade of follow-up mistakes), the expert rewrites turns t*..t*+m until the
state is back on a path the student completes, and all of those turns are trained.

    found = await suffix_repair(view, harness, t_star, expert, student, run, max_m=4, replays=2)

1. One expert episode continues `prefix_of(view, t*)` to its end (seed 0, tag `expert-suffix`); if it fails,
   there is no suffix.
2. For m = 0, 1, ..., max_m (while the expert episode has turn t*+m and has not finished before it): the
   student continues `prefix_of(expert_episode, t*+m+1)` (the student's prefix, then the expert's turns
   t*..t*+m with their tool results) for `replays` samples; the first m whose mean verifier score is 1.0 wins
   (else the best mean seen, ties to the shorter suffix).
Returns the suffix turns as candidates (index i = turn t*+i, replay scores on the m's tried), the chosen m,
and the student replays of the chosen m (the rows are cut from them).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agents.prefix import prefix_of
from agents.records import ModelRole, Trajectory
from correction.records import Candidate
from correction.roles import continuation, describe
from correction.runner import RolloutFn
from harness.program import Harness

SUFFIX_TAG = "expert-suffix"
SUFFIX_REPLAY_TAG = "student-suffix-replay"


class Suffix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: list[Candidate]
    chosen_m: int | None
    episodes: list[Trajectory]
    rationale: str


async def suffix_repair(view: Trajectory, harness: Harness, t_star: int, expert: ModelRole, student: ModelRole,
                        run: RolloutFn, max_m: int = 4, replays: int = 2, extra_turns: int = 30) -> Suffix:
    view = view.require_view("suffix_repair")
    [ep] = await run([continuation(view, harness, expert, prefix_of(view, t_star), 0, SUFFIX_TAG, extra_turns)])
    if not ep.passed or len(ep.turns) <= t_star:
        return Suffix(turns=[], chosen_m=None, episodes=[], rationale=f"the expert fails from turn {t_star} "
                                                                      f"({ep.stop_reason}, score {ep.score:.2f})")
    turns = [Candidate(message=t.assistant, rationale=f"Expert turn {t_star + i}: {describe(t.assistant)}.", seed=0)
             for i, t in enumerate(ep.turns[t_star:t_star + max_m + 1])]
    best: tuple[float, int, list[Trajectory]] = (-1.0, 0, [])
    for m in range(len(turns)):
        if not turns[m].message.get("tool_calls"):  # the expert's finish: the student has nothing left to do
            break
        jobs = [continuation(ep, harness, student, prefix_of(ep, t_star + m + 1), s, SUFFIX_REPLAY_TAG, extra_turns)
                for s in range(replays)]
        eps = await run(jobs)
        turns[m] = turns[m].model_copy(update={"replay_scores": [e.score for e in eps]})
        if turns[m].mean_score > best[0]:
            best = (turns[m].mean_score, m, eps)
        if turns[m].mean_score >= 1.0:
            break
    if best[0] < 0:
        return Suffix(turns=turns, chosen_m=None, episodes=[], rationale="the expert finished at t*: no suffix to try")
    score, m, eps = best
    return Suffix(turns=turns, chosen_m=m, episodes=eps,
                  rationale=f"expert turns {t_star}..{t_star + m}: the student then scores {score:.2f} on average "
                            f"over {replays} replay(s)")
