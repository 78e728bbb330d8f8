"""GEPA strategies whose draws are a function of (search seed, iteration), so a resumed search repeats itself.

GEPA's own Pareto selector and epoch sampler draw from one `random.Random` made at start-up, which a
resumed run recreates from scratch: after a kill the search would take another path. These two draw from a
`random.Random` seeded by the search seed and GEPA's iteration counter (part of the saved state) instead,
and otherwise do exactly what GEPA's do (`select_program_candidate_from_pareto_front`; epoch-shuffled
minibatches padded with the least used ids).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from gepa.gepa_utils import select_program_candidate_from_pareto_front


def _rng(seed: int, what: str, *n: int) -> random.Random:
    return random.Random(f"{seed}:{what}:" + ":".join(map(str, n)))


class _PerIteration:
    """Counts calls within one GEPA iteration (multi-proposal sampling calls a strategy once per task)."""

    def __init__(self) -> None:
        self._iteration: int | None = None
        self._calls = 0

    def call_index(self, iteration: int) -> int:
        if iteration == self._iteration:
            self._calls += 1
        else:
            self._iteration, self._calls = iteration, 0
        return self._calls


class ParetoSelector:
    """Candidate selection from the instance-level Pareto front (GEPA's `pareto`), drawn per (iteration, call)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._calls = _PerIteration()

    def select_candidate_idx(self, state: Any) -> int:
        rng = _rng(self.seed, "select", state.i, self._calls.call_index(state.i))
        return select_program_candidate_from_pareto_front(
            state.get_pareto_front_mapping(), state.per_program_tracked_scores, rng)


class EpochSampler:
    """Minibatches of `size` train ids: each epoch a fresh shuffle (seeded by search seed and epoch), padded
    to a multiple of `size` with the least frequent ids, then consumed in order (GEPA's `epoch_shuffled`).
    With `per_iteration` tasks per iteration, call k of iteration i takes slot i * per_iteration + k."""

    def __init__(self, size: int, seed: int, per_iteration: int = 1) -> None:
        if size < 1 or per_iteration < 1:
            raise ValueError(f"minibatch size and tasks per iteration must be >= 1, got {size}, {per_iteration}")
        self.size = size
        self.seed = seed
        self.per_iteration = per_iteration
        self._calls = _PerIteration()

    def epoch_order(self, ids: list[Any], epoch: int) -> list[Any]:
        order = list(ids)
        _rng(self.seed, "epoch", epoch).shuffle(order)
        freq = Counter(order)
        while len(order) % self.size:
            pick = min(order, key=lambda i: (freq[i], order.index(i)))
            order.append(pick)
            freq[pick] += 1
        return order

    def next_minibatch_ids(self, loader: Any, state: Any) -> list[Any]:
        ids = list(loader.all_ids())
        if not ids:
            raise ValueError("cannot sample a minibatch from an empty train set")
        padded = len(ids) + (-len(ids)) % self.size
        slot = state.i * self.per_iteration + min(self._calls.call_index(state.i), self.per_iteration - 1)
        start = slot * self.size
        order = self.epoch_order(ids, start // padded)
        offset = start % padded
        return order[offset: offset + self.size]


# weights of a train instance by what the search has seen of it (InformativeSampler)
VARIED, UNSEEN, CONSTANT_FAIL, CONSTANT_PASS = 4.0, 2.0, 1.0, 0.5


def observed_scores(state: Any) -> dict[Any, list[float]]:
    """Every minibatch score this search recorded, by train id: GEPA's trace holds each task's minibatch ids
    with the parent's and the child's scores (part of the saved state, so a resumed search reads the same)."""
    seen: dict[Any, list[float]] = {}
    for entry in state.full_program_trace:
        for task in entry.get("tasks") or ():
            for key in ("subsample_scores", "new_subsample_scores"):
                for item_id, score in zip(task["subsample_ids"], task.get(key) or (), strict=False):
                    seen.setdefault(item_id, []).append(float(score))
    return seen


def instance_weight(scores: list[float]) -> float:
    """VARIED when two different scores were seen, UNSEEN below two observations, else CONSTANT_*."""
    if len(set(scores)) > 1:
        return VARIED
    if len(scores) < 2:
        return UNSEEN
    return CONSTANT_PASS if scores[0] >= 1.0 else CONSTANT_FAIL


class InformativeSampler:
    """Minibatches weighted toward the train instances whose score this search has seen move.

    An edit can only be accepted on items whose score it can change; a minibatch on which every rollout
    scores the same under every harness tried (the student always fails it, or always passes it) teaches the
    search little. Like DAPO's dynamic sampling (drop prompts whose sampled group is all right or all wrong),
    this sampler reads the scores the search has recorded so far (`observed_scores`) and weights each train
    item by what was seen of its *instance* over all its seeds and harnesses (`instance_weight`): varied 4,
    unseen 2, always failing 1, always passing 0.5. It draws `size` distinct ids without replacement
    (Efraimidis-Spirakis keys u ** (1 / w)) from a `random.Random` seeded by (search seed, iteration, call),
    so a resumed search draws the same minibatches. With several train seeds per instance an instance the
    student sometimes solves shows up as varied after a few iterations; that is what it is for.
    """

    def __init__(self, size: int, seed: int, instance_of: Callable[[Any], Any] | None = None) -> None:
        if size < 1:
            raise ValueError(f"minibatch size must be >= 1, got {size}")
        self.size = size
        self.seed = seed
        self.instance_of = instance_of  # train id -> instance key; default: the item's `instance.id`
        self._calls = _PerIteration()

    def weights(self, loader: Any, state: Any) -> dict[Any, float]:
        ids = list(loader.all_ids())
        of = self.instance_of or (lambda i: loader.fetch([i])[0].instance.id)
        instance = {i: of(i) for i in ids}
        seen = observed_scores(state)
        by_instance: dict[Any, list[float]] = {}
        for i in ids:
            by_instance.setdefault(instance[i], []).extend(seen.get(i, ()))
        return {i: instance_weight(by_instance[instance[i]]) for i in ids}

    def next_minibatch_ids(self, loader: Any, state: Any) -> list[Any]:
        weights = self.weights(loader, state)
        if not weights:
            raise ValueError("cannot sample a minibatch from an empty train set")
        rng = _rng(self.seed, "informative", state.i, self._calls.call_index(state.i))
        keys = {i: rng.random() ** (1.0 / w) for i, w in weights.items()}
        ranked = sorted(weights, key=lambda i: -keys[i])
        return [ranked[k % len(ranked)] for k in range(self.size)]
