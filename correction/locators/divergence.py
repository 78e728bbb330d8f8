"""`divergence`: t* is the earliest turn where the student's action differs in effect from the expert's action
at the same state, and the expert, taking its own action there, succeeds.

One expert episode per probed k continues `prefix_of(trajectory, k)`: its turn k is the expert's action at
the student's state after k turns, and its verdict says whether the counterfactual with that action succeeds
(the same episodes the counterfactual locator's R(k) uses, so the two share a cache). Turns are scanned from
0; "differs in effect" compares the calls' (tool, arguments) ignoring call ids, or the final answer text.
If no turn qualifies, there is no t*. Cost: up to n+1 expert episodes (linear; the counterfactual's binary
search is cheaper).
"""

from __future__ import annotations

from agents.records import ModelRole, Trajectory
from correction.locators.counterfactual import ExpertProbe, category_of, is_monotone
from correction.records import Localization
from correction.roles import describe, effect
from correction.runner import RolloutFn
from harness.program import Harness


class DivergenceLocator:
    name = "divergence"

    def __init__(self, expert: ModelRole | None = None, samples: int = 1, extra_turns: int = 30) -> None:
        self.expert = expert or ModelRole(model="oracle/{family}")
        self.samples, self.extra_turns = samples, extra_turns

    async def locate(self, trajectory: Trajectory, harness: Harness, run: RolloutFn) -> Localization:
        view = trajectory.require_view(self.name)
        probe = ExpertProbe(view, harness, run, self.expert, self.samples, self.extra_turns)
        for k in range(len(view.turns)):
            eps = await probe.episodes_at(k)
            wins = [e for e in eps if e.passed and len(e.turns) > k]
            if not wins:
                continue
            theirs = wins[0].turns[k]
            if effect(theirs) != effect(view.turns[k]):
                vals = probe.values()
                return Localization(
                    t_star=k, category=category_of(view), locator=self.name, probes=vals, monotone=is_monotone(vals),
                    rationale=f"turn {k}: the student did {describe(view.turns[k].assistant)}, the expert at the same "
                              f"state did {describe(theirs.assistant)} and succeeded from there")
        vals = probe.values()
        return Localization(t_star=None, category="unattributed", locator=self.name, probes=vals,
                            monotone=is_monotone(vals),
                            rationale="no turn where the expert acts differently and succeeds from the student's state")
