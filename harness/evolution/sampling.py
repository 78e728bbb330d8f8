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
