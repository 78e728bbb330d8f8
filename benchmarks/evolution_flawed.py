"""Evidence run: the harness search with the `library` reflector, then h0 vs h* on the test split.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/evolution_flawed.py --families stock_alert payroll_audit \
        budget_approval --budget 40 --search-seeds 2 --train 10 --val 10 --test 20 --test-seeds 3 --out runs/evo-flawed
    # a real student served by vLLM (the micro student M0: `coevo serve start --model deploy/micro --name micro ...`)
    PYTHONPATH=$PWD .venv/bin/python benchmarks/evolution_flawed.py --student hosted_vllm/micro \
        --api-base http://127.0.0.1:8131/v1 --temperature 0.7 --max-tokens 1024 --families code_refactor ...

The default student is SIMULATED: `flawed/<family>@native`, the oracle policy with injected, labelled faults.

Per family: the search (h0 -> h*), the accepted edits, the knowledge keys h* states, then h0 and h* with the
same student on the test split (paired bootstrap CI over instances, `analysis.stats.paired_bootstrap`) and the
injected faults per category on each (the simulator's ground truth, read here by measurement code only).
The knowledge cards and the flawed student share keys: this tests the machinery, not the method.
Writes `<out>/evidence.json` and benchmarks/results/evolution_flawed-<date>.json (the list of per-family JSON
lines it prints, with the date, machine and arguments) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from pathlib import Path

import ray

from agents.pool.driver import LOCAL_RAY_SYSTEM_CONFIG, RolloutPool
from agents.records import ModelRole
from agents.rollout import Limits
from agents.tables.trajectories import read_trajectories
from analysis.triggers import trigger_rates, use_patterns_of
from flows.evolution import EvolveSettings, TransferSettings, run_evolution
from flows.store import RunStore
from harness import Harness
from harness.evolution import SearchConfig, stated_keys
from results_io import REPO, save_results  # benchmarks/ is sys.path[0] when this script runs


def _simulated(a: argparse.Namespace) -> bool:
    return a.student.startswith("flawed/")


def _settings(family: str, a: argparse.Namespace) -> EvolveSettings:
    student = ModelRole(model=a.student, api_base=a.api_base, temperature=a.temperature, max_tokens=a.max_tokens)
    return EvolveSettings(
        family=family, student=student, reflector="library",
        search=SearchConfig(family=family, seeds=a.search_seeds, minibatch_size=3, budget_rollouts=a.budget,
                            proposals_per_iteration=a.proposals, minibatch_sampler=a.minibatch_sampler),
        train_instances=a.train, val_instances=a.val, train_seeds=a.train_seeds, val_seeds=a.val_seeds,
        limits=Limits(max_turns=a.max_turns, wall_s=300, max_tokens_per_turn=a.max_tokens),
        concurrency_per_server=a.concurrency,
        transfer=TransferSettings(expert=student, test_instances=a.test, seeds=a.test_seeds))


def _faults(store: RunStore, family: str, h0: Harness, h_star: Harness) -> dict[str, dict[str, int]]:
    """Injected faults per category in the test rollouts of h0 and of h* (simulation ground truth)."""
    out: dict[str, Counter[str]] = {"h0": Counter(), "h*": Counter()}
    for t in read_trajectories(store.root / "trajectories" / "evolve-transfer" / family):
        for pair, h in (("h0", h0), ("h*", h_star)):
            if t.harness_id == h.id:
                out[pair].update(f.category for f in t.injected_faults)
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def _trigger_rates(store: RunStore, family: str, h_star: Harness, evolved: list[str]) -> dict[str, float]:
    """Share of h*'s test rollouts in which each evolved component that can fire did (analysis.triggers)."""
    patterns = use_patterns_of(h_star)
    can_fire = [c for c in evolved if not c.startswith(("section:", "tool:", "tools.", "tool_examples:"))
                or c.removeprefix("section:") in patterns]
    trajs = [t for t in read_trajectories(store.root / "trajectories" / "evolve-transfer" / family)
             if t.harness_id == h_star.id]
    if not can_fire or not trajs:
        return {}
    table = trigger_rates({"h*": trajs}, components={family: can_fire}, use_patterns={family: patterns})
    return {r["component"]: round(r["rate"], 3) for r in table.iter_rows(named=True)}


def run_family(family: str, a: argparse.Namespace, store: RunStore, pool: RolloutPool) -> dict:
    t0 = time.monotonic()
    summary = run_evolution(_settings(family, a), store, Path.cwd(), pool, resume=True)
    out = Path(summary.out_dir)
    h0, h_star = Harness.load(out / "h0.yaml"), Harness.load(out / "h_star.yaml")
    t, s = summary.transfer, summary.search
    assert t is not None
    return {"family": family, "h0_val": s.h0_val_mean, "h_star_val": s.best_val_mean, "h_star_id": s.best_id,
            "accepted_edits": [f"seed {e['seed']}: {e['op']}" for e in summary.accepted_edits],
            "h_star_new_components": summary.evolved_components,
            "stated_keys": sorted(stated_keys(h_star)), "test_h0": t.h0_success, "test_h_star": t.h_star_success,
            "diff": t.diff.model_dump(mode="json"),
            "faults": _faults(store, family, h0, h_star) if _simulated(a) else None,
            "trigger_rates_h_star": _trigger_rates(store, family, h_star, summary.evolved_components),
            "rollouts_run": s.evaluations_run, "seconds": round(time.monotonic() - t0)}


def _table(rows: list[dict]) -> str:
    lines = ["| family | val h0 -> h* | test h0 | test h* | diff [95% CI] | implicit_knowledge faults h0 -> h* | "
             "components new in h* |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        d, f = r["diff"], r["faults"]
        ik = f"{f['h0'].get('implicit_knowledge', 0)} -> {f['h*'].get('implicit_knowledge', 0)}" if f else "n/a"
        lines.append(f"| {r['family']} | {r['h0_val']:.2f} -> {r['h_star_val']:.2f} | {r['test_h0']:.3f} | "
                     f"{r['test_h_star']:.3f} | {d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] | {ik} | "
                     f"{', '.join(r['h_star_new_components']) or '(none)'} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", default=["stock_alert", "payroll_audit", "budget_approval"])
    p.add_argument("--student", default="flawed/{family}@native",
                   help="LiteLLM model string ('{family}' is filled); default: the SIMULATED flawed student.")
    p.add_argument("--api-base", default=None, help="Server URL ending in /v1 (hosted_vllm students).")
    p.add_argument("--temperature", type=float, default=0.0, help="Student sampling temperature.")
    p.add_argument("--max-tokens", type=int, default=512, help="Generated tokens per student turn.")
    p.add_argument("--concurrency", type=int, default=8, help="Episodes in flight per model server.")
    p.add_argument("--budget", type=int, default=40, help="Evaluations per search seed.")
    p.add_argument("--search-seeds", type=int, default=2)
    p.add_argument("--proposals", type=int, default=2)
    p.add_argument("--train", type=int, default=10)
    p.add_argument("--val", type=int, default=10)
    p.add_argument("--train-seeds", type=int, default=1, help="Rollout seeds per train instance.")
    p.add_argument("--val-seeds", type=int, default=1, help="Rollout seeds per val instance.")
    p.add_argument("--minibatch-sampler", choices=["epoch", "informative"], default="epoch",
                   help="GEPA's epoch-shuffled minibatches, or weighted toward instances whose score varied.")
    p.add_argument("--test", type=int, default=20)
    p.add_argument("--test-seeds", type=int, default=3)
    p.add_argument("--max-turns", type=int, default=60)
    p.add_argument("--out", type=Path, default=Path("runs/evo-flawed"))
    a = p.parse_args()
    a.out = a.out.resolve()
    store = RunStore(a.out.parent, a.out.name)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
             _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    rows = []
    try:
        with RolloutPool(2) as pool:
            for family in a.families:
                rows.append(run_family(family, a, store, pool))
                (a.out / "evidence.json").write_text(json.dumps(rows, indent=2))
                print(json.dumps(rows[-1]), flush=True)
                raw = save_results("evolution_flawed", rows, a)
    finally:
        ray.shutdown()
    print(("SIMULATED student " if _simulated(a) else "student ") + a.student)
    print(_table(rows))
    print(f"raw results: {raw.relative_to(REPO)}")


if __name__ == "__main__":
    main()
