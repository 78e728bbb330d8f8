"""Scripted policies run straight against an environment (no model, no harness): the oracle and the
do-nothing baseline. `coevo tasks check` and the tests use these; model rollouts live in `agents/`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel

import tasks
from tasks.base import Environment
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall, Verdict

Policy = Callable[[Environment, Sequence[Step]], ToolCall | FinalAnswer]
MAX_POLICY_STEPS = 300


class PolicyRun(BaseModel):
    instance_id: str
    policy: str
    steps: int
    verdict: Verdict
    error: str = ""


def do_nothing(env: Environment, history: Sequence[Step]) -> FinalAnswer:
    return FinalAnswer(text="")


async def run_policy(inst: TaskInstance, policy: Policy | Literal["oracle", "do_nothing"]) -> PolicyRun:
    family = tasks.get(inst.family)
    name = policy if isinstance(policy, str) else getattr(policy, "__name__", "policy")
    fn: Policy = family.oracle_action if policy == "oracle" else do_nothing if policy == "do_nothing" else policy
    env = family.make_env(inst)
    history: list[Step] = []
    try:
        env.reset()
        for _ in range(MAX_POLICY_STEPS):
            action = fn(env, history)
            if isinstance(action, FinalAnswer):
                await env.submit(action)
                break
            result = await env.call(action.name, action.arguments)
            history.append(Step(call=action, result=result))
        return PolicyRun(instance_id=inst.id, policy=name, steps=len(history), verdict=env.verify())
    except Exception as e:  # a policy bug is a failed check, reported, not a crash of the whole check
        return PolicyRun(
            instance_id=inst.id, policy=name, steps=len(history),
            verdict=Verdict(score=0.0, failed_checks=["policy_crashed"], feedback=f"{type(e).__name__}: {e}"),
            error=f"{type(e).__name__}: {e}",
        )
    finally:
        env.close()
