"""The seams of the harness search: what `flows/` injects (an evaluator, a completion function) and what a
reflection strategy implements (a `Reflector`). Each docstring is the contract.

`harness/` never runs a rollout or calls a model itself: it is given these callables.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.evolution.records import EvalItem, Proposal, ProposalBudget, ReflectiveDataset, RolloutResult
from harness.program import Harness

OnResult = Callable[[RolloutResult], None]


@runtime_checkable
class Evaluator(Protocol):
    """Runs a harness on (instance, seed) items and reports one `RolloutResult` per item.

    Contract:
    - `signature` names everything about the evaluator that changes a result (student model and sampling
      options, episode limits, tool choice; never the server URL). It is part of every cache key, so two
      evaluators with the same signature must produce interchangeable results.
    - `__call__(harness, items, on_result)` returns exactly one result per item, in item order, each with
      `key = cache_key(harness.id, item.instance.id, item.seed, signature)`. The items of one call run as one
      parallel batch. `on_result` (when given) is called once per result as soon as it is final, before the
      call returns (the cache persists each result there, so a killed search loses only rollouts in flight).
    - Never raise for one rollout's failure: it is a result with its score (0) and `error`. Raise only for a
      systemic failure (no model server, a broken pool); the search then stops and can be resumed.
    - Do not mutate `harness` or the items.
    - Optionally `evaluate_many(requests, on_result)`: several `(harness, items)` requests as ONE parallel batch,
      one result list per request (same contract per request). `evaluate_many()` below falls back to one call
      per request for evaluators without it.
    """

    @property
    def signature(self) -> str: ...

    def __call__(self, harness: Harness, items: Sequence[EvalItem],
                 on_result: OnResult | None = None) -> list[RolloutResult]: ...


class Completion(BaseModel):
    """One model answer as a reflector sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    cost_usd: float = Field(default=0.0, ge=0.0)


@runtime_checkable
class CompletionFn(Protocol):
    """Calls the reflection model once.

    Contract: `__call__(messages, json_schema)` sends OpenAI-format `messages`; when `json_schema` is given the
    answer should follow it (structured output where the provider supports it; the reflector validates the
    answer either way, so a provider that ignores the schema is still correct). Returns the answer text and
    its cost in USD. Raises on a failed call (after the client's own retries); the reflector turns that into
    a failed proposal, never a crashed search.
    """

    def __call__(self, messages: list[dict[str, Any]], json_schema: dict[str, Any] | None = None) -> Completion: ...


@runtime_checkable
class Reflector(Protocol):
    """Proposes typed edits to a harness from the failing rollouts of a minibatch.

    Contract:
    - `propose(harness, dataset, budget, rng)` returns a `Proposal`: at most `budget.max_edits` edits, in the
      order they should apply, each with a rationale that cites the evidence; plus the answers or edits it
      rejected itself (with the validation error) and what it cost. It never mutates `harness`.
    - Edits are validated again by the search: an edit that does not apply to `harness` (or changes nothing)
      is rejected with its error, counted and never evaluated.
    - Deterministic given (harness, dataset, budget, rng state) for offline reflectors; randomness only
      through `rng` (the search seeds it per search seed and iteration, so a resumed search repeats itself).
    - Never raise for a bad proposal (return an empty one with the reason in `rejected`); raise only for a
      systemic failure.
    - `name` is the strategy flag it was made from (`library`, `llm:MODEL`).
    """

    @property
    def name(self) -> str: ...

    def propose(self, harness: Harness, dataset: ReflectiveDataset, budget: ProposalBudget,
                rng: random.Random) -> Proposal: ...


Request = tuple[Harness, Sequence[EvalItem]]


def evaluate_many(evaluator: Evaluator, requests: Sequence[Request],
                  on_result: OnResult | None = None) -> list[list[RolloutResult]]:
    """Every request through the evaluator, as one batch when it can (`evaluate_many`), else one by one."""
    many = getattr(evaluator, "evaluate_many", None)
    if many is not None:
        return many(requests, on_result)
    return [evaluator(h, items, on_result) for h, items in requests]


def items_for(instances: Sequence[Any], seeds: Sequence[int]) -> list[EvalItem]:
    """Every instance under every seed, instance-major (the order GEPA's ids follow)."""
    return [EvalItem(instance=i, seed=s) for i in instances for s in seeds]
