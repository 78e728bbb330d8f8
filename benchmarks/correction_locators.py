"""Locator accuracy and correction throughput on SIMULATED single-fault rollouts (issue 15, docs/correction.md).

    .venv/bin/python benchmarks/correction_locators.py --family stock_alert --family payroll_audit \\
        --family budget_approval --family anomaly_detection --n 20 --seeds 3 --per-family 12

1. Students: `flawed/<family>@uniform_single` on the first N test instances x K seeds under the baseline
   harness (h0); the failing rollouts with exactly one injected fault are kept (at most --per-family).
2. Ground truth (this script and correction/measure.py are the only readers of `injected_faults`): the
   injected turn, and the first unrecoverable turn by a linear scan of R(k) with the pure oracle.
3. Locators (on `trajectory.view()`): counterfactual (binary search) and divergence, both with the pure
   oracle as the expert. Per family: exact-turn accuracy (t* == injected turn) and the share of t* inside
   [injected turn, first unrecoverable turn]; also the share of trajectories whose probed R was monotone.
4. Throughput: on up to --throughput-per-family of those rollouts, the whole correction (counterfactual,
   `flawed/<family>@expert` rewrite with N=3, verifier_replay with --replays student continuations),
   cold (no episode cache): corrections per minute and the share of episode time in student model calls,
   expert model calls (locator probes + rewrites) and the rest (environment replay of prefixes, tool
   calls, verify). Model-call time of these simulated providers is the provider's own policy work.
Prints markdown tables and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agents.jobs import Limits, RolloutJob  # noqa: E402
from agents.records import ModelRole, Trajectory  # noqa: E402
from correction.locators import make_locator  # noqa: E402
from correction.measure import ground_truth_window, inside  # noqa: E402
from correction.pipeline import correct_one  # noqa: E402
from correction.runner import CachedRollouts, local_rollouts  # noqa: E402
from correction.selectors import make_selector  # noqa: E402
from harness import baseline  # noqa: E402
from results_io import save_results  # noqa: E402

STUDENT = "flawed/{family}@uniform_single"


async def students(family: str, n: int, seeds: int, cap: int) -> tuple[list[Trajectory], int]:
    import tasks

    h = baseline(family)
    jobs = [RolloutJob(instance=tasks.get(family).generate(40 + i), harness=h, seed=s, limits=Limits(max_turns=40),
                       model=ModelRole(model=STUDENT.format(family=family)), tag="student")
            for i in range(n) for s in range(seeds)]
    trajs = await local_rollouts(2)(jobs)
    single = [t for t in trajs if not t.passed and len(t.injected_faults) == 1]
    return single[:cap], len(trajs)


async def locate_family(family: str, trajs: list[Trajectory]) -> list[dict[str, Any]]:
    run = CachedRollouts(local_rollouts(2))
    h = baseline(family)
    rows = []
    for t in trajs:
        w = await ground_truth_window(t, h, run)
        row = {"family": family, "id": t.id, "kind": w.kind, "category": w.category, "injected": w.injected,
               "unrecoverable": w.unrecoverable, "turns": len(t.turns)}
        for name in ("counterfactual", "divergence"):
            loc = await make_locator(name).locate(t.view(), h, run)
            row[name] = {"t_star": loc.t_star, "exact": loc.t_star == w.injected,
                         "inside": inside(loc.t_star, w, len(t.turns)), "monotone": loc.monotone,
                         "probes": len(loc.probes)}
        rows.append(row)
    return rows


async def throughput(family: str, trajs: list[Trajectory], replays: int) -> dict[str, Any]:
    run = CachedRollouts(local_rollouts(2))
    h = baseline(family)
    selector = make_selector("verifier_replay", student=ModelRole(model=STUDENT), replays=replays)
    t0, corrected = time.perf_counter(), 0
    for t in trajs:
        corr, _ = await correct_one(t.view(), h, make_locator("counterfactual"), selector,
                                    ModelRole(model="flawed/{family}@expert"), run)
        corrected += corr.status == "corrected"
    wall = time.perf_counter() - t0
    student = run.model_s.get("student-replay", 0.0)
    expert = sum(v for k, v in run.model_s.items() if k.startswith("expert"))
    rest = sum(run.other_s.values())
    total = student + expert + rest or 1.0
    return {"family": family, "sources": len(trajs), "corrected": corrected, "wall_s": wall,
            "per_min": 60.0 * corrected / wall if wall else 0.0, "student_share": student / total,
            "expert_share": expert / total, "env_share": rest / total, "episodes": dict(run.calls)}


def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}% ({a}/{b})" if b else "–"


def accuracy_table(rows: list[dict[str, Any]]) -> str:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["family"]].append(r)
    out = ["| family | rollouts | locator | exact turn | inside window | monotone R | mean probes |",
           "|---|---|---|---|---|---|---|"]
    for fam in [*sorted(by), "all"]:
        rs = rows if fam == "all" else by[fam]
        for name in ("counterfactual", "divergence"):
            n = len(rs)
            out.append(f"| {fam} | {n} | {name} | {pct(sum(r[name]['exact'] for r in rs), n)} | "
                       f"{pct(sum(r[name]['inside'] for r in rs), n)} | {pct(sum(r[name]['monotone'] for r in rs), n)} | "
                       f"{sum(r[name]['probes'] for r in rs) / max(n, 1):.1f} |")
    return "\n".join(out)


def throughput_table(rows: list[dict[str, Any]]) -> str:
    out = ["| family | corrected / sources | wall s | corrections / min | student calls | expert calls | env + rest |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['family']} | {r['corrected']}/{r['sources']} | {r['wall_s']:.1f} | {r['per_min']:.1f} | "
                   f"{100 * r['student_share']:.0f}% | {100 * r['expert_share']:.0f}% | {100 * r['env_share']:.0f}% |")
    return "\n".join(out)


async def main(args: argparse.Namespace) -> None:
    acc, thr, counts = [], [], {}
    for family in args.family:
        trajs, total = await students(family, args.n, args.seeds, args.per_family)
        counts[family] = {"rollouts": total, "single_fault_failing": len(trajs)}
        print(f"{family}: {len(trajs)} single-fault failing of {total}", file=sys.stderr, flush=True)
        acc += await locate_family(family, trajs)
        if args.throughput_per_family:
            thr.append(await throughput(family, trajs[:args.throughput_per_family], args.replays))
    print("SIMULATED (flawed/<family>@uniform_single students, oracle expert)\n")
    print("students:", json.dumps(counts), "\n")
    print(accuracy_table(acc), "\n")
    if thr:
        print(throughput_table(thr), "\n")
    report = {"accuracy": acc, "throughput": thr, "counts": counts}
    print(json.dumps(report, default=str))
    print(f"raw results: {save_results('correction_locators', report, args).relative_to(REPO)}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", action="append", required=True)
    p.add_argument("--n", type=int, default=20, help="Test instances per family (40..40+n-1).")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--per-family", type=int, default=12, help="Single-fault failing rollouts kept per family.")
    p.add_argument("--throughput-per-family", type=int, default=4)
    p.add_argument("--replays", type=int, default=2)
    asyncio.run(main(p.parse_args()))
