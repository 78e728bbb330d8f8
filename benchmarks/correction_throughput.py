"""Corrections per minute on the micro student M0: in-process episodes vs the round's Ray pool, same sources.

    .venv/bin/python benchmarks/correction_throughput.py --instances 5 --samples 2 --actors 2

1. M0 (deploy/micro) is served by one vLLM CPU server (started here); it samples --samples rollouts of each of
   the first --instances train instances of every --family under h0 (T=0.7), as the round's arm_data does.
2. The failing ones are corrected twice, each time cold (a fresh run directory, no episode cache), with the
   round's embedded settings: counterfactual locator (oracle probes), the SIMULATED `showwork/<family>`
   rewrite (N=3), verifier_replay with 1 student replay per candidate, keep --keep (the 2026-12-05 figures:
   'improved'; the default now 'controlled': 1 decision and 1 control replay more per decided correction):
   - `in-process` (the stage before it ran on the pool): `local_rollouts(4)`, 2 sources at a time;
   - `ray-pool`: `pool_rollouts` on a `RolloutPool` (--actors, --in-flight episodes per server), sources
     --concurrency at a time (both default to local.yaml's 32).
3. Per arm: wall seconds, corrections kept and sources per minute, and the share of episode time in student
   model calls (`student-replay`), expert calls (locator probes + rewrites; a simulated provider's "call" is
   its own policy work) and the rest (environment setup, prefix replay, tool calls, verify).
Prints a markdown table; raw JSON in benchmarks/results/correction_throughput-<date>.json with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agents.jobs import Limits, RolloutJob  # noqa: E402
from agents.records import ModelRole, Trajectory  # noqa: E402
from correction.runner import local_rollouts  # noqa: E402
from flows.round.correct import CorrectionConfig, correct_run, pool_rollouts  # noqa: E402
from flows.store import RunStore  # noqa: E402
from harness import baseline  # noqa: E402
from results_io import save_results  # noqa: E402

FAMILIES = ("code_refactor", "anomaly_detection", "payroll_audit")


def samples(student: ModelRole, families: list[str], n: int, k: int) -> list[Trajectory]:
    import tasks

    jobs = [RolloutJob(instance=inst, harness=baseline(f), model=student, seed=s, tag="data",
                       limits=Limits(max_turns=30, wall_s=300, max_tokens_per_turn=1024))
            for f in families for inst in tasks.instances(f, "train", n) for s in range(k)]
    return asyncio.run(local_rollouts(8)(jobs))


def shares(result: Any) -> dict[str, float]:
    student = sum(v for k, v in result.model_s.items() if k == "student-replay")
    expert = sum(v for k, v in result.model_s.items() if k != "student-replay")
    rest = sum(result.other_s.values())
    total = student + expert + rest or 1.0
    return {"student calls": student / total, "expert calls": expert / total, "env + rest": rest / total}


def one_arm(name: str, trajs: list[Trajectory], config: CorrectionConfig, args: argparse.Namespace) -> dict[str, Any]:
    store = RunStore(Path(tempfile.mkdtemp(prefix=f"corr-{name}-")), "bench")
    harnesses = {baseline(f).id: baseline(f) for f in args.family}
    t0 = time.perf_counter()
    if name == "ray-pool":
        from agents.pool.driver import RolloutPool

        with RolloutPool(args.actors, num_cpus=2, concurrency_per_server=args.in_flight) as pool, \
                ThreadPoolExecutor(args.concurrency) as threads:
            result = correct_run(store, trajs, harnesses, config, run=pool_rollouts(pool, threads))
    else:
        result = correct_run(store, trajs, harnesses, config.model_copy(update={"concurrency": 2}),
                             run=local_rollouts(4))
    wall = time.perf_counter() - t0
    sources, kept = result.card["sources"], result.card["corrections"]
    return {"arm": name, "wall_s": round(wall, 1), "sources": sources, "kept": kept,
            "sources_per_min": round(60 * sources / wall, 2), "kept_per_min": round(60 * kept / wall, 2),
            "episodes": sum(result.calls.values()), "per_tag": result.calls,
            **{k: round(v, 3) for k, v in shares(result).items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", action="append", help="Repeatable; default: M0's three families.")
    ap.add_argument("--instances", type=int, default=5, help="First N train instances per family.")
    ap.add_argument("--samples", type=int, default=2, help="M0 samples per instance.")
    ap.add_argument("--concurrency", type=int, default=32, help="Sources corrected at once on the pool "
                    "(local.yaml's round.correction.concurrency).")
    ap.add_argument("--in-flight", type=int, default=32, help="Episodes in flight per server on the pool "
                    "(local.yaml's ray.concurrency_per_server).")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--keep", default="controlled", choices=["controlled", "improved", "any"])
    ap.add_argument("--port", type=int, default=8137)
    args = ap.parse_args()
    args.family = args.family or list(FAMILIES)
    from deploy.vllm_server import ServeSpec, start_server, stop_server

    state = Path(tempfile.mkdtemp(prefix="corr-vllm-"))
    spec = ServeSpec(model=str(REPO / "deploy" / "micro"), name="micro", port=args.port, max_model_len=16384,
                     cpu_kvcache_gib=1)
    handle = start_server(spec, state_dir=state, ready_timeout_s=600)
    try:
        student = ModelRole(model="hosted_vllm/micro", api_base=handle.api_base, temperature=0.7, max_tokens=1024,
                            timeout_s=120)
        trajs = samples(student, args.family, args.instances, args.samples)
        config = CorrectionConfig(student=student, expert=ModelRole(model="showwork/{family}"), n=3, replays=1,
                                  concurrency=args.concurrency, keep=args.keep)
        rows = [one_arm(name, trajs, config, args) for name in ("in-process", "ray-pool")]
    finally:
        stop_server(spec.port, state_dir=state)
    failing = sum(not t.passed for t in trajs)
    print(f"M0 samples {len(trajs)}, failing {failing}; load average {os.getloadavg()}")
    cols = ["arm", "wall_s", "sources", "kept", "sources_per_min", "kept_per_min", "episodes", "student calls",
            "expert calls", "env + rest"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    path = save_results("correction_throughput", {"samples": len(trajs), "failing": failing, "arms": rows}, args)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
