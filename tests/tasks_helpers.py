"""Helpers for the task-family tests: drive the oracle, generate instances in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tasks
from tasks.base import Environment
from tasks.records import FinalAnswer, Step

REPO = Path(__file__).resolve().parents[1]


async def solve(env: Environment, steps: int = 200) -> list[Step]:
    """Run the family's oracle on an already reset env until it answers; return the history."""
    family = tasks.get(env.instance.family)
    history: list[Step] = []
    for _ in range(steps):
        action = family.oracle_action(env, history)
        if isinstance(action, FinalAnswer):
            await env.submit(action)
            return history
        history.append(Step(call=action, result=await env.call(action.name, action.arguments)))
    raise AssertionError("oracle did not finish")


def instances_in_fresh_process(family: str, indices: list[int]) -> list[dict]:
    code = (f"import json, tasks; fam = tasks.get({family!r}); "
            f"print(json.dumps([fam.generate(i).model_dump(mode='json') for i in {indices!r}]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=120)
    return json.loads(out.stdout)
