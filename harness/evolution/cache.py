"""Every evaluation the search makes, cached by content key, so no rollout ever runs twice.

`ResultCache` is an append-only JSON-lines file: one line per finished rollout, flushed and fsynced as the
result arrives, so a search killed at any point keeps every rollout that finished. A torn last line (the
process died mid-write) is ignored on load with a warning. `CachedEvaluator` wraps an injected evaluator:
it answers from the cache, sends only the misses to the evaluator (as one batch) and records each new
result. Its counters (`hits`, `misses`) are what a resume check and the benchmark report. Several threads (the
search seeds, run concurrently) may share one: an evaluation another thread is running now is waited for, not
run again (it counts as a hit), so concurrent seeds asking for h0's validation pass run it once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from harness.evolution.protocols import Evaluator, OnResult, Request, evaluate_many
from harness.evolution.records import EvalItem, RolloutResult, cache_key
from harness.program import Harness

log = logging.getLogger(__name__)


class ResultCache:
    """Rollout results by content key, persisted as JSON lines at `path` (created on first write)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._results: dict[str, RolloutResult] = {}
        self._lock = threading.Lock()
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        lines = self.path.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = RolloutResult.model_validate_json(line)
            except ValidationError as e:
                if n == len(lines):  # a write torn by a kill: the rollout is simply not cached
                    log.warning("%s: ignoring a torn last line (%d chars)", self.path, len(line))
                    continue
                raise ValueError(f"{self.path}:{n}: not a rollout result: {e.errors()[0]['msg']}") from None
            self._results[r.key] = r

    def __len__(self) -> int:
        return len(self._results)

    def __contains__(self, key: str) -> bool:
        return key in self._results

    def get(self, key: str) -> RolloutResult | None:
        return self._results.get(key)

    def keys(self) -> set[str]:
        return set(self._results)

    def results(self) -> list[RolloutResult]:
        return list(self._results.values())

    def put(self, result: RolloutResult) -> None:
        """Record one result durably (idempotent: a key already cached is not written again)."""
        with self._lock:
            if result.key in self._results:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(result.model_dump_json() + "\n")
                f.flush()
                os.fsync(f.fileno())
            self._results[result.key] = result


class CachedEvaluator:
    """An `Evaluator` that never repeats a rollout: cached results are returned, only misses are run."""

    def __init__(self, inner: Evaluator, cache: ResultCache) -> None:
        self.inner = inner
        self.cache = cache
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._running: dict[str, threading.Event] = {}  # key -> set when the thread running it is done

    @property
    def signature(self) -> str:
        return self.inner.signature

    def key(self, harness: Harness, item: EvalItem) -> str:
        return cache_key(harness.id, item.instance.id, item.seed, self.signature)

    def __call__(self, harness: Harness, items: Sequence[EvalItem], on_result: OnResult | None = None) -> list[RolloutResult]:
        return self.evaluate_many([(harness, items)], on_result)[0]

    def evaluate_many(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[list[RolloutResult]]:
        """Cached results where there are; every miss of every request goes to the evaluator in one batch."""
        keys = [[self.key(h, it) for it in items] for h, items in requests]
        todo, others = self._claim(requests, keys)
        try:
            if todo:
                self._run(todo, on_result)
        finally:
            with self._lock:
                for k in todo:
                    self._running.pop(k).set()
        for done in others:
            done.wait()
        return [[self.cache.get(k) or _missing(k) for k in ks] for ks in keys]

    def _claim(self, requests: Sequence[Request], keys: list[list[str]]
               ) -> tuple[dict[str, tuple[Harness, EvalItem]], list[threading.Event]]:
        """The misses this call runs (claimed), and the events of those another thread is running now."""
        todo: dict[str, tuple[Harness, EvalItem]] = {}
        others: dict[str, threading.Event] = {}
        with self._lock:
            for (h, items), ks in zip(requests, keys, strict=True):
                for k, it in zip(ks, items, strict=True):
                    if k in self.cache or k in todo or k in others:
                        continue
                    if k in self._running:
                        others[k] = self._running[k]
                    else:
                        todo[k] = (h, it)
                        self._running[k] = threading.Event()
            self.hits += sum(len(ks) for ks in keys) - len(todo)
        return todo, list(others.values())

    def _run(self, todo: dict[str, tuple[Harness, EvalItem]], on_result: OnResult | None) -> None:
        def record(r: RolloutResult) -> None:
            self.cache.put(r)
            if on_result is not None:
                on_result(r)

        by_harness: dict[str, tuple[Harness, list[EvalItem]]] = {}
        for h, it in todo.values():
            by_harness.setdefault(h.id, (h, []))[1].append(it)
        for batch in evaluate_many(self.inner, list(by_harness.values()), record):
            for r in batch:
                if r.key not in todo:
                    raise RuntimeError(f"evaluator returned result {r.key} for no requested item "
                                       f"(its signature or cache_key use is inconsistent)")
                self.cache.put(r)  # idempotent; covers evaluators that do not call on_result
        with self._lock:
            self.misses += len(todo)

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "cached": len(self.cache)}


def _missing(key: str) -> RolloutResult:
    raise RuntimeError(f"no result for evaluation {key} after running it (the evaluator dropped an item, or "
                       f"the thread that ran it failed)")


def read_results(path: str | Path) -> list[RolloutResult]:
    """All results of a cache file (for reports and tests)."""
    return ResultCache(path).results() if Path(path).exists() else []

