"""Harness search throughput vs the rollout pool alone, and the cache hit rate of a resumed search (issue 14).

    .venv/bin/python benchmarks/evolution_throughput.py                       # starts a tiny-model vLLM server
    .venv/bin/python benchmarks/evolution_throughput.py --api-base http://127.0.0.1:8123/v1 --proposals 1

1. Starts a vLLM CPU server on the tiny model (as benchmarks/rollout_throughput.py does: dev mode, so the
   prefix cache can be reset; server pinned to the first half of the CPUs unless --shared-cpus).
2. Search: `--search-seeds` search seeds (default 3, the issue's setting, run at once on the one pool unless
   `--sequential-seeds`) of the `library` reflector on `--family` with the tiny student, from h0 with every
   tool that takes a parameter hidden (every turn must call a tool, schemas strict, temperature 1 with
   per-turn seeds, so each episode runs its `--max-turns`),
   `--budget` evaluations, minibatch `--minibatch`, `--proposals` proposals per iteration, `--val-n` val
   instances. Times the whole search (GEPA, reflection, lineage included) and counts the rollouts it ran.
3. Pool: resets the prefix cache and runs exactly the rollouts the search ran (same harnesses, instances,
   seeds, sampling) through the same `RolloutPool` as one batch. Reports rollouts/s of both and the ratio
   (target >= 0.8: the search keeps the pool busy).
4. Resume: runs the finished search again from its state and cache, then the whole search again from
   scratch (no GEPA state) over a copy of its cache; reports the cache hit rates (target 100% of completed
   evaluations), whether the replay ends with the same h*, and the server requests meanwhile (target 0).
Prints a JSON line with every figure at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402

from benchmarks.rollout_throughput import SERVED, TEMPERATURE, reset_prefix_cache, split_cpus, start_server  # noqa: E402
from results_io import save_results  # noqa: E402  (benchmarks/ is sys.path[0] when this script runs)


def server_requests(api_base: str) -> float:
    text = httpx.get(api_base.removesuffix("/v1") + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def argument_free(family: str) -> Any:
    """The family's h0 with every tool that takes a parameter hidden.

    The tiny random model under `tool_choice=required` samples free text into a string argument until the
    length cut (probed 2026-12-01: 2 of 3 replies), which ends the episode at turn 0 (optional integer
    arguments did the same by turn 2); with only argument-free tools every turn is one complete call and each
    episode runs its `--max-turns`.
    """
    import tasks
    from harness import baseline

    env = tasks.make_env(tasks.instances(family, "val")[0])
    try:
        hidden = sorted(t.name for t in env.tools() if t.openai()["function"].get("parameters", {}).get("properties"))
    finally:
        env.close()
    h0 = baseline(family)
    return h0.model_copy(update={"tools": h0.tools.model_copy(update={"hidden": hidden})})


class Recorder:
    """Wraps the pool evaluator and keeps every (harness, item) it was asked to run (the cache's misses)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[tuple[Any, list[Any]]] = []
        self.batches: list[tuple[int, float]] = []  # (rollouts, seconds) of each batch sent to the pool

    @property
    def signature(self) -> str:
        return self.inner.signature

    def __call__(self, harness: Any, items: Sequence[Any], on_result: Any = None) -> list[Any]:
        return self.evaluate_many([(harness, items)], on_result)[0]

    def evaluate_many(self, requests: Sequence[tuple[Any, Sequence[Any]]], on_result: Any = None) -> list[list[Any]]:
        self.requests += [(h, list(items)) for h, items in requests]
        t0 = time.perf_counter()
        out = self.inner.evaluate_many(requests, on_result)
        self.batches.append((sum(len(items) for _, items in requests), time.perf_counter() - t0))
        return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="stock_alert")
    ap.add_argument("--budget", type=int, default=60, help="evaluations (GEPA metric calls) of the search")
    ap.add_argument("--minibatch", type=int, default=3)
    ap.add_argument("--proposals", type=int, default=4, help="proposals per iteration (one batch of rollouts)")
    ap.add_argument("--search-seeds", type=int, default=3, help="GEPA runs of the search (h* = best of all)")
    ap.add_argument("--sequential-seeds", action="store_true", help="run the search seeds one after another")
    ap.add_argument("--val-n", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16, help="episodes in flight per server")
    ap.add_argument("--api-base", default=None, help="use a running server (serving 'tiny')")
    ap.add_argument("--server-cpus", default=None, help="CPUs of the server, e.g. '0' (default: first half)")
    ap.add_argument("--shared-cpus", action="store_true", help="no pinning")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    server_cpus, client_cpus = split_cpus(args.server_cpus, args.shared_cpus)
    import ray

    import tasks
    from agents.pool.driver import LOCAL_RAY_SYSTEM_CONFIG, RolloutJob, RolloutPool
    from agents.records import ModelRole
    from agents.rollout import Limits
    from deploy.vllm_server import stop_server
    from flows.evolution_pool import PoolEvaluator
    from flows.store import RunStore
    from harness.evolution import CachedEvaluator, ResultCache, SearchConfig, items_for, make_reflector, run_search

    handle = state = None
    if args.api_base:
        api_base = args.api_base
    else:
        t0 = time.perf_counter()
        handle, state = start_server(8192, server_cpus)
        api_base = handle.api_base
        print(f"vLLM CPU server ready at {api_base} in {time.perf_counter() - t0:.0f} s")
    os.sched_setaffinity(0, client_cpus)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    tmp = Path(tempfile.mkdtemp(prefix="bench-evo-"))
    try:
        fam = args.family
        role = ModelRole(model=f"hosted_vllm/{SERVED}", api_base=api_base, max_tokens=args.max_tokens, retries=0,
                         temperature=TEMPERATURE, strict_tools=True)
        limits = Limits(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
        store = RunStore(tmp, "bench")
        config = SearchConfig(family=fam, seeds=args.search_seeds, minibatch_size=args.minibatch,
                              budget_rollouts=args.budget, proposals_per_iteration=args.proposals,
                              concurrent_seeds=not args.sequential_seeds)
        train = items_for(tasks.instances(fam, "train"), [0])
        val = items_for(tasks.instances(fam, "val", args.val_n), [0])
        out = tmp / "evolution" / fam
        start = argument_free(fam)
        with RolloutPool(args.actors, concurrency_per_server=args.concurrency) as pool:
            def evaluator(where: Path = out) -> tuple[CachedEvaluator, Recorder]:
                rec = Recorder(PoolEvaluator(pool, role, limits, store, f"evolve/{fam}", tool_choice="required"))
                return CachedEvaluator(rec, ResultCache(where / "cache.jsonl")), rec

            reset_prefix_cache(api_base)
            search_ev, rec = evaluator()
            t0 = time.perf_counter()
            result = run_search(start, train, val, search_ev, make_reflector("library", fam), config, out)
            search_s = time.perf_counter() - t0
            jobs = [RolloutJob(instance=it.instance, harness=h, model=role, seed=it.seed, limits=limits,
                               tool_choice="required", tag="bench-pool") for h, items in rec.requests for it in items]
            reset_prefix_cache(api_base)
            t0 = time.perf_counter()
            trajs = pool.run(jobs)
            pool_s = time.perf_counter() - t0
            before = server_requests(api_base)
            resume_ev, _ = evaluator()
            run_search(start, train, val, resume_ev, make_reflector("library", fam), config, out)
            # the whole search again from scratch (no GEPA state), over a copy of the cache: every evaluation
            # it asks for must be a hit, and it must end with the same h*
            replay = tmp / "replay"
            replay.mkdir()
            shutil.copy(out / "cache.jsonl", replay / "cache.jsonl")
            replay_ev, _ = evaluator(replay)
            again = run_search(start, train, val, replay_ev, make_reflector("library", fam), config, replay)
            resume_requests = server_requests(api_base) - before
        n = result.evaluations_run
        turns = sum(len(t.turns) for t in trajs)
        search_rps, pool_rps = n / search_s, len(trajs) / pool_s
        hit_rate = resume_ev.hits / max(1, resume_ev.hits + resume_ev.misses)
        print(f"search: {n} rollouts in {search_s:.1f} s = {search_rps:.3f} rollouts/s "
              f"({len(result.seeds)} search seeds {'one after another' if args.sequential_seeds else 'at once'}, "
              f"{sum(x.iterations for x in result.seeds)} iterations, {args.proposals} proposals each, "
              f"{result.evaluations_cached} evaluations from the cache)")
        stops = Counter(t.stop_reason for t in trajs)
        search_turns = sum(r.n_turns for r in search_ev.cache.results())
        print(f"pool  : {len(trajs)} rollouts ({turns} turns, search {search_turns}; stops {dict(stops)}) in "
              f"{pool_s:.1f} s = {pool_rps:.3f} rollouts/s")
        errors = [t.error for t in trajs if t.error][:2]
        if errors:
            print(f"pool errors: {errors}")
        in_batches = sum(t for _, t in rec.batches)
        sizes = [n for n, _ in rec.batches]
        print(f"ratio : {search_rps / pool_rps:.3f}  (target >= 0.8); the search spent {in_batches:.1f} s of "
              f"{search_s:.1f} s in {len(sizes)} pool batches of {min(sizes)}-{max(sizes)} rollouts (mean "
              f"{sum(sizes) / len(sizes):.1f}), the rest in GEPA, reflection and bookkeeping")
        replay_rate = replay_ev.hits / max(1, replay_ev.hits + replay_ev.misses)
        print(f"resume: cache hits {resume_ev.hits}, misses {resume_ev.misses}: hit rate {100 * hit_rate:.1f}% "
              f"(target 100%)")
        print(f"replay: the search from scratch over the cache: hits {replay_ev.hits}, misses {replay_ev.misses}: "
              f"hit rate {100 * replay_rate:.1f}%, same h* {again.best_id == result.best_id}; server requests "
              f"during resume + replay {resume_requests:.0f}")
        report = {"family": fam, "rollouts": n, "search_s": round(search_s, 2), "pool_s": round(pool_s, 2),
                  "search_rps": round(search_rps, 4), "pool_rps": round(pool_rps, 4),
                  "ratio": round(search_rps / pool_rps, 4), "turns": turns, "resume_hits": resume_ev.hits,
                  "resume_misses": resume_ev.misses, "replay_hits": replay_ev.hits,
                  "replay_misses": replay_ev.misses, "resume_server_requests": resume_requests,
                  "proposals": args.proposals, "budget": args.budget, "minibatch": args.minibatch,
                  "search_seeds": args.search_seeds, "concurrent_seeds": not args.sequential_seeds,
                  "concurrency": args.concurrency}
        print(json.dumps(report))
        print(f"raw results: {save_results('evolution_throughput', report, args).relative_to(REPO)}")
    finally:
        ray.shutdown()
        if handle is not None and state is not None:
            stop_server(handle.spec.port, state_dir=state)


if __name__ == "__main__":
    main()
