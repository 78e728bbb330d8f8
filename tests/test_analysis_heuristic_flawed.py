"""The heuristic's lost-item, literal-format and format-cue rules on real SIMULATED failures (flawed/<family>).

One fault kind forced per episode (`@none+<kind>=1+max_faults=1`, docs/flawed.md), run through the real
runtime and environment; the attributor sees the view only. Each pair contrasts two kinds whose failing
checks look alike, so the rule that separates them is what is tested: a request or file read and then lost
(long_context, forced to fire past 3,500 characters: the rule calls a loss in a shorter conversation a
skip) against one never opened (planning); a reply without its required literal (instruction
following); an exceptions file without a key the task names (instruction following).
"""

from __future__ import annotations

import pytest

import tasks
from agents.records import ModelRole, Trajectory
from agents.rollout import Limits, run_episode
from analysis.attribution.heuristic import HeuristicAttributor
from harness import baseline


async def run(model: str, family: str, index: int) -> Trajectory:
    env = tasks.make_env(tasks.get(family).generate(index))
    try:
        return await run_episode(ModelRole(model=model), baseline(family), env, seed=0, limits=Limits(max_turns=40))
    finally:
        env.close()


async def first_failing(family: str, profile: str, kind: str, indices: range) -> Trajectory:
    for i in indices:
        t = await run(f"flawed/{family}@{profile}", family, i)
        if not t.passed and [f.kind for f in t.injected_faults] == [kind]:
            return t
    raise AssertionError(f"no failing single-fault {kind} episode on {family} {list(indices)}")


@pytest.mark.parametrize(("family", "profile", "kind", "category", "rule"), [
    ("budget_approval", "none+forget_thread=1+max_faults=1+long_context_chars=3500", "forget_thread", "long_context",
     "lost_context"),
    ("budget_approval", "none+skip_thread=1+max_faults=1", "skip_thread", "planning", "check_hint"),
    ("budget_approval", "none+reply_without_total=1+max_faults=1", "reply_without_total", "instruction_following",
     "check_hint"),
    ("payroll_audit", "none+exceptions_key=1+max_faults=1", "exceptions_key", "instruction_following", "check_hint"),
    ("code_refactor", "none+forget_file=1+max_faults=1+long_context_chars=3500", "forget_file", "long_context",
     "lost_context"),
])
async def test_rule_separates_lookalike_failures(family: str, profile: str, kind: str, category: str, rule: str) -> None:
    t = await first_failing(family, profile, kind, range(40, 48))
    a = HeuristicAttributor().decide(t.view())
    assert (a.category, a.rationale.split("]")[0]) == (category, f"[{rule}"), a.rationale
