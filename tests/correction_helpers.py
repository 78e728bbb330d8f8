"""Shared by the correction tests: single-fault failing rollouts of the SIMULATED flawed student."""

from __future__ import annotations

import tasks
from agents.records import ModelRole, Trajectory
from agents.rollout import Limits, run_episode
from harness import baseline

STUDENT = "flawed/{family}@uniform_single"
# (family, test-split index, seed): single-fault failing rollouts of flawed/<family>@uniform_single (by seed)
CASES = [("stock_alert", 40, 0), ("payroll_audit", 40, 0), ("budget_approval", 41, 2), ("anomaly_detection", 41, 0),
         ("budget_approval", 40, 0)]


async def student_rollout(family: str, index: int, seed: int) -> Trajectory:
    env = tasks.make_env(tasks.get(family).generate(index))
    try:
        return await run_episode(ModelRole(model=STUDENT.format(family=family)), baseline(family), env, seed=seed,
                                 limits=Limits(max_turns=40))
    finally:
        env.close()
