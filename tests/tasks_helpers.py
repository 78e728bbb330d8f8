"""Helpers for the task-family tests: drive the oracle, generate instances in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

import tasks
from tasks.base import Environment
from tasks.records import FinalAnswer, Step, ToolCall

E = TypeVar("E", bound=Environment)

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


def reset_env(family: str, index: int, env_class: type[E]) -> E:
    """A fresh, reset environment for instance `index` of `family` (asserting its class)."""
    env = tasks.make_env(tasks.get(family).generate(index))
    env.reset()
    assert isinstance(env, env_class)
    return env


async def assert_replay_is_exact(family: str, index: int, env_class: type[E], extra: list[ToolCall]) -> None:
    """The oracle's history plus `extra` calls, replayed on the solved environment and on a fresh one: the
    same results and the same `state()`, and the fresh one verifies 1.0."""
    env = reset_env(family, index, env_class)
    again = reset_env(family, index, env_class)
    try:
        calls = [s.call for s in await solve(env)] + extra
        first = await env.replay(calls)
        state = env.state()  # type: ignore[attr-defined]
        second = await again.replay(calls)
        assert [s.result for s in first] == [s.result for s in second]
        assert state == again.state()  # type: ignore[attr-defined]
        assert again.verify().score == 1.0
    finally:
        env.close()
        again.close()
