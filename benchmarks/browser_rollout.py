"""Browser-family oracle rollouts: seconds per rollout and per turn, and where they go (issue 15, "Performance").

    .venv/bin/python benchmarks/browser_rollout.py                        # 3 train instances x 2 browser families
    .venv/bin/python benchmarks/browser_rollout.py --n 5 --family website_admin --repeats 2

Each rollout is `agents.rollout.run_episode` with the `oracle/<family>` model under the baseline harness on a
real environment (shop server + headless Chromium), one after the other in this process, exactly as a
rollout actor runs one episode. Timed per rollout: the whole thing (make_env + run_episode + close), and the
parts: environment setup (make_env; reset runs inside run_episode and is counted with the env's tool calls
below), tool calls in the rollout's environment, the oracle's "model" calls (they read the rollout's own
environment, agents/shared_env.py; a checkout before 2026-12-02 replays each new tool call on the oracle's own
copy, with its own browser), verify (the verifier's and the oracle's reads of it), and close. The first rollout of
a process also pays the one-time imports and the first Chromium start; it is reported apart (`cold`).

Prints one line per rollout, then per family: mean s per rollout and per turn over the warm rollouts, and a
JSON line with everything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from results_io import save_results  # noqa: E402  (benchmarks/ is sys.path[0] when this script runs)

FAMILIES = ("website_admin", "browser_automation")


class _Timed:
    """Wraps an environment's `call`, `verify` and `reset` to add up their wall time (the env itself is real)."""

    def __init__(self, env: Any) -> None:
        self.env, self.t = env, {"tools": 0.0, "verify": 0.0, "reset": 0.0}
        call, verify, reset = env.call, env.verify, env.reset

        async def timed_call(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await call(*a, **k)
            finally:
                self.t["tools"] += time.perf_counter() - t0

        def timed(name: str, fn: Any) -> Any:
            def inner(*a: Any, **k: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    self.t[name] += time.perf_counter() - t0
            return inner

        env.call, env.verify, env.reset = timed_call, timed("verify", verify), timed("reset", reset)


async def one(family: str, index: int, split: str) -> dict[str, Any]:
    import tasks
    from agents.records import ModelRole
    from agents.rollout import Limits, run_episode
    from harness import baseline

    fam = tasks.get(family)
    inst = next(i for i in fam.instances(split) if i.index == index)
    t0 = time.perf_counter()
    env = fam.make_env(inst)
    t_make = time.perf_counter() - t0
    timed = _Timed(env)
    try:
        traj = await run_episode(ModelRole(model=f"oracle/{family}"), baseline(family), env, seed=0,
                                 limits=Limits(max_turns=40, wall_s=600))
    finally:
        t1 = time.perf_counter()
        env.close()
        t_close = time.perf_counter() - t1
    total = time.perf_counter() - t0
    oracle = sum(t.latency_s for t in traj.turns)
    return {"family": family, "instance": inst.id, "score": traj.score, "stop": traj.stop_reason,
            "turns": len(traj.turns), "total_s": total, "make_env_s": t_make, "reset_s": timed.t["reset"],
            "tools_s": timed.t["tools"], "oracle_s": oracle, "verify_s": timed.t["verify"], "close_s": t_close}


def _line(r: dict[str, Any], tag: str) -> str:
    return (f"{tag:5} {r['instance']:24} score {r['score']:.2f} turns {r['turns']:2d} | total {r['total_s']:6.2f} s "
            f"({r['total_s'] / max(r['turns'], 1):.2f} s/turn) | make_env {r['make_env_s']:.2f} reset "
            f"{r['reset_s']:.2f} tools {r['tools_s']:.2f} oracle {r['oracle_s']:.2f} verify {r['verify_s']:.2f} "
            f"close {r['close_s']:.2f}")


async def main(args: argparse.Namespace) -> None:
    if args.keep_browser:
        try:
            from tasks.runtime.browser_host import keep_browser_alive
        except ImportError:  # a runtime from before the shared browser: one Chromium per environment
            print("this runtime has no shared browser: --keep-browser ignored")
        else:
            keep_browser_alive()  # as a rollout actor does (agents/pool/actor.py)
    results: list[dict[str, Any]] = []
    first = True
    for _ in range(args.repeats):
        for family in args.family:
            for index in range(args.start, args.start + args.n):
                r = await one(family, index, args.split)
                r["cold"] = first
                first = False
                results.append(r)
                print(_line(r, "cold" if r["cold"] else "warm"), flush=True)
    summary: dict[str, Any] = {}
    for family in args.family:
        warm = [r for r in results if r["family"] == family and not r["cold"]]
        if not warm:
            continue
        per_rollout = statistics.mean(r["total_s"] for r in warm)
        per_turn = statistics.mean(r["total_s"] / max(r["turns"], 1) for r in warm)
        parts = {k: statistics.mean(r[k] for r in warm) for k in ("make_env_s", "reset_s", "tools_s", "oracle_s",
                                                                   "verify_s", "close_s")}
        summary[family] = {"rollouts": len(warm), "mean_s_per_rollout": per_rollout, "mean_s_per_turn": per_turn,
                           "mean_turns": statistics.mean(r["turns"] for r in warm),
                           "all_scored_1": all(r["score"] == 1.0 for r in warm), **parts}
        print(f"{family}: {len(warm)} warm rollouts, mean {per_rollout:.2f} s per rollout, {per_turn:.2f} s per turn "
              f"(mean {summary[family]['mean_turns']:.1f} turns); parts " +
              ", ".join(f"{k[:-2]} {v:.2f}" for k, v in parts.items()) + f"; all 1.0: {summary[family]['all_scored_1']}")
    report = {"summary": summary, "rollouts": results}
    print(json.dumps(report))
    print(f"raw results: {save_results('browser_rollout', report, args).relative_to(REPO)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--n", type=int, default=3, help="Instances per family.")
    ap.add_argument("--start", type=int, default=0, help="First instance index.")
    ap.add_argument("--split", default="train")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--keep-browser", action=argparse.BooleanOptionalAction, default=True,
                    help="Keep the process's Chromium between rollouts, as a rollout actor does (default on).")
    asyncio.run(main(ap.parse_args()))
