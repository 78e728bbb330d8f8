"""What the harness search is given: an evaluator on the Ray rollout pool and a completion function on the
model client (the search itself, in harness/evolution/, knows neither Ray nor LiteLLM).

- `PoolEvaluator`: one parallel batch of rollout jobs per call; each trajectory is stored in the run store
  (`trajectories/<stage>/<cache key>.parquet`) as it finishes, then turned into a `RolloutResult` and handed
  to `on_result` (which persists it in the search's result cache).
- `ModelCompletion`: a `CompletionFn` for a reflector role; asks for structured output where the provider
  takes a JSON schema (vLLM, OpenAI), and reports the call's cost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

from agents.client import ModelClient
from agents.jobs import Limits, RolloutJob
from agents.pool.driver import RolloutPool
from agents.records import ModelRole, ToolChoice, Trajectory
from flows.plan import model_signature
from flows.store import RunStore, content_key
from harness.context import content_chars
from harness.evolution.protocols import Completion, OnResult, Request
from harness.evolution.records import CallSummary, EvalItem, RolloutResult, TriggerEvent, cache_key
from harness.evolution.transcript import clip, render_transcript
from harness.hooks import BLOCKED_PREFIX
from harness.program import Harness

EVOLVE_TAG = "evolve"
STRUCTURED_PROVIDERS = ("hosted_vllm", "openai")


def search_stage(family: str) -> str:
    """Where a round's harness search for `family` stores its rollouts (one trajectory per `search_key`)."""
    return f"evolve/{family}"


def search_signature(role: ModelRole, limits: Limits, tool_choice: ToolChoice | None, tag: str = EVOLVE_TAG) -> str:
    """What about an evaluator changes its rollouts: the tag, the model and its sampling, the limits, the tool choice."""
    return content_key(tag, model_signature(role), limits.model_dump(), tool_choice)


def search_key(job: RolloutJob) -> str:
    """The key under which the search's evaluator stores `job`'s rollout, had the search run that job."""
    return cache_key(job.harness.id, job.instance.id, job.seed, search_signature(job.model, job.limits, job.tool_choice))


def result_from_trajectory(traj: Trajectory, key: str) -> RolloutResult:
    """The evidence a reflector reads, from one trajectory (its view without simulation ground truth)."""
    t = traj.view()
    calls = []
    for turn in t.turns:
        for call, res in zip(turn.tool_calls, turn.tool_results, strict=False):
            calls.append(CallSummary(turn=turn.index, name=call.name, arguments=clip(call.arguments_json(), 400),
                                     is_error=res.is_error, blocked=res.content.startswith(BLOCKED_PREFIX),
                                     result_chars=len(res.content), result_head=clip(res.content, 200)))
    triggers = [TriggerEvent(component=tr.component_id, turn=tr.turn, kind=tr.kind, detail=clip(tr.detail, 200))
                for turn in t.turns for tr in turn.triggers][:200]
    return RolloutResult(
        key=key, harness_id=t.harness_id, instance_id=t.instance.id, seed=t.seed, score=t.verdict.score,
        passed=t.verdict.passed, instruction=clip(t.instance.instruction, 2000), failed_checks=t.verdict.failed_checks,
        feedback=clip(t.verdict.feedback, 2000), stop_reason=t.stop_reason, error=clip(t.error, 500),
        n_turns=len(t.turns), calls=calls[:300], triggers=triggers, context_chars=content_chars(t.messages),
        transcript=render_transcript(t.messages), trajectory_id=t.id, wall_s=t.wall_s)


class PoolEvaluator:
    """`harness.evolution.Evaluator` on a `RolloutPool`; see the module docstring."""

    def __init__(self, pool: RolloutPool, role: ModelRole, limits: Limits, store: RunStore, stage: str,
                 tool_choice: ToolChoice | None = None, tag: str = EVOLVE_TAG) -> None:
        self.pool, self.role, self.limits, self.store, self.stage = pool, role, limits, store, stage
        self.tool_choice, self.tag = tool_choice, tag
        self.rollouts = 0
        self._signature = search_signature(role, limits, tool_choice, tag)

    @property
    def signature(self) -> str:
        return self._signature

    def __call__(self, harness: Harness, items: Sequence[EvalItem], on_result: OnResult | None = None) -> list[RolloutResult]:
        return self.evaluate_many([(harness, items)], on_result)[0]

    def evaluate_many(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[list[RolloutResult]]:
        """Every (harness, items) request as one stream of jobs on the pool (one parallel batch)."""
        plans = []
        for harness, items in requests:
            jobs = [RolloutJob(instance=i.instance, harness=harness, model=self.role, seed=i.seed, limits=self.limits,
                               tag=self.tag, tool_choice=self.tool_choice) for i in items]
            plans.append(jobs)
        keys = {j.key: cache_key(j.harness.id, j.instance.id, j.seed, self.signature) for jobs in plans for j in jobs}
        harnesses = {h.id: h for h, _ in requests}
        done: dict[str, RolloutResult] = {}
        for traj in self.pool.stream([j for jobs in plans for j in jobs]):
            key = keys[traj.id]
            self.store.write_trajectories(self.stage, key, [traj], harnesses=[harnesses[traj.harness_id]])
            result = result_from_trajectory(traj, key)
            done[traj.id] = result
            self.rollouts += 1
            if on_result is not None:
                on_result(result)
        return [[done[j.key] for j in jobs] for jobs in plans]


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, also when the calling thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as ex:
        return ex.submit(asyncio.run, coro).result()


class ModelCompletion:
    """`harness.evolution.CompletionFn` over `ModelClient` (retries and cost accounting are the client's)."""

    def __init__(self, role: ModelRole, structured: bool = True, seed: int | None = 0) -> None:
        self.role = role
        self.structured = structured
        self.seed = seed
        self.calls = 0

    def _role_for(self, json_schema: dict[str, Any] | None) -> ModelRole:
        if json_schema is None or not self.structured or self.role.provider not in STRUCTURED_PROVIDERS:
            return self.role
        fmt = {"type": "json_schema", "json_schema": {"name": "harness_edits", "schema": json_schema}}
        return self.role.model_copy(update={"extra_body": {**self.role.extra_body, "response_format": fmt}})

    def __call__(self, messages: list[dict[str, Any]], json_schema: dict[str, Any] | None = None) -> Completion:
        client = ModelClient(self._role_for(json_schema))
        self.calls += 1
        resp = run_sync(client.complete(messages, seed=self.seed))
        return Completion(text=resp.content, cost_usd=resp.cost_usd)
