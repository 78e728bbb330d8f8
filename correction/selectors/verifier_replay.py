"""`verifier_replay` (the default, beyond the paper): replay the student's prefix, apply a candidate turn,
let the STUDENT continue under h* for `replays` samples (seeds 0..R-1), score each with the task verifier,
and pick the candidate with the best mean score (ties: the lowest index). Objective and on-policy: a
candidate the student cannot carry forward loses. With `require_success`, a best mean of 0 chooses nothing.
"""

from __future__ import annotations

from agents.prefix import prefix_of
from agents.records import ModelRole, Trajectory
from correction.records import Candidate
from correction.roles import continuation
from correction.runner import RolloutFn
from correction.selectors.base import Selection
from harness.program import Harness

REPLAY_TAG = "student-replay"


class VerifierReplaySelector:
    name = "verifier_replay"

    def __init__(self, student: ModelRole, replays: int = 2, extra_turns: int = 30,
                 require_success: bool = False) -> None:
        if replays < 1:
            raise ValueError(f"replays must be >= 1, got {replays}")
        self.student, self.replays, self.extra_turns = student, replays, extra_turns
        self.require_success = require_success

    async def select(self, view: Trajectory, harness: Harness, t_star: int, candidates: list[Candidate],
                     run: RolloutFn) -> Selection:
        view = view.require_view(self.name)
        if not candidates:
            return Selection(chosen=None, candidates=[], rationale="no candidates")
        base = prefix_of(view, t_star)
        jobs = [continuation(view, harness, self.student, base.then(c.message), seed, REPLAY_TAG, self.extra_turns)
                for c in candidates for seed in range(self.replays)]
        episodes = await run(jobs)
        scored = [c.model_copy(update={"replay_scores": [e.score for e in episodes[i * self.replays:(i + 1) * self.replays]]})
                  for i, c in enumerate(candidates)]
        means = [c.mean_score for c in scored]
        best = max(range(len(scored)), key=lambda i: (means[i], -i))
        shown = ", ".join(f"#{i}: {m:.2f}" for i, m in enumerate(means))
        if self.require_success and means[best] <= 0.0:
            return Selection(chosen=None, candidates=scored, rationale=f"no candidate scored above 0 ({shown})")
        return Selection(chosen=best, candidates=scored, episodes=episodes[best * self.replays:(best + 1) * self.replays],
                         rationale=f"best mean verifier score over {self.replays} student replay(s): {shown}")
