"""Where a round's seconds go: per stage, wall time against the model time and the tokens of its rollouts.

    .venv/bin/python benchmarks/round_profile.py runs/RUN_ID [--round r0]

Reads a finished round (its state.json and the trajectories every stage wrote) and prints, per stage: wall
seconds; episodes and turns run; the summed model-call seconds (each turn's `latency_s`: queueing at the server,
prefill and decode), the summed episode seconds (`wall_s`: model calls + tools, sandbox and verifier), prompt and
generated tokens; then the rest of the stage's wall time (start-up, Ray and Prefect, training, gate statistics),
estimated as wall - episode seconds / concurrency (0 where rollouts ran wider than `--concurrency` or were
reused from an earlier stage, whose files the later stage holds too). Per turn: median prompt and generated tokens, and the share of
turns that stopped at the token limit. A run made with the frozen config `benchmarks/configs/round_profile.yaml`
(today's `deploy/configs/local.yaml`, kept so later changes to the default do not move the baseline) is the
baseline. Raw JSON in benchmarks/results/round_profile-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from results_io import save_results  # noqa: E402

# trajectories/<dir>/<label>: which stage wrote it (the round's evaluation labels, see flows/round/eval.py)
STAGE_OF = [("eval/val.", "gate"), ("eval/data.", "arm_data"), ("correction_data", "arm_data"), ("sets/", "arm_data"),
            ("evolve", "evolve"), ("eval/M_t.h0", "evaluate_h0"), ("eval/expert.h0", "evaluate_h0"),
            ("eval/M_t.hstar", "evaluate_h_star"), ("eval/expert.hstar", "evaluate_h_star"), ("eval/", "evaluate_arms")]


def stage_of(rel: str) -> str:
    return next((stage for prefix, stage in STAGE_OF if rel.startswith(prefix)), "other")


def episodes(round_dir: Path) -> pl.DataFrame:
    """One row per trajectory file under trajectories/ (and the correction episode cache): stage, wall, tokens."""
    rows = []
    for root in (round_dir / "trajectories", round_dir / "cache"):
        for f in root.rglob("*.parquet"):
            if f.name.endswith(".turns.parquet"):
                continue
            turns_file = f.with_name(f.name.removesuffix(".parquet") + ".turns.parquet")
            ep = pl.read_parquet(f, columns=["wall_s", "n_turns", "prompt_tokens", "completion_tokens"])
            turns = (pl.read_parquet(turns_file, columns=["latency_s", "prompt_tokens", "completion_tokens",
                                                          "finish_reason"])
                     if turns_file.exists() else None)
            rel = str(f.relative_to(root).parent)
            rows.append({"stage": stage_of(rel if root.name == "trajectories" else "correction_data"),
                         "dir": rel, "wall_s": float(ep["wall_s"].sum()), "turns": int(ep["n_turns"].sum()),
                         "model_s": float(turns["latency_s"].sum()) if turns is not None else 0.0,
                         "prompt_tokens": int(ep["prompt_tokens"].sum()),
                         "completion_tokens": int(ep["completion_tokens"].sum()),
                         "turn_prompt": turns["prompt_tokens"].to_list() if turns is not None else [],
                         "turn_completion": turns["completion_tokens"].to_list() if turns is not None else [],
                         "at_limit": int((turns["finish_reason"] == "length").sum()) if turns is not None else 0})
    return pl.DataFrame(rows, schema={"stage": pl.String, "dir": pl.String, "wall_s": pl.Float64, "turns": pl.Int64,
                                      "model_s": pl.Float64, "prompt_tokens": pl.Int64,
                                      "completion_tokens": pl.Int64, "turn_prompt": pl.List(pl.Int64),
                                      "turn_completion": pl.List(pl.Int64), "at_limit": pl.Int64})


def profile(run_dir: Path, round_id: str, concurrency: int) -> dict[str, Any]:
    round_dir = run_dir / "rounds" / round_id
    stages = json.loads((round_dir / "state.json").read_text())["stages"]["round"]
    eps = episodes(round_dir)
    out: dict[str, Any] = {"run": str(run_dir), "round": round_id, "concurrency": concurrency, "stages": {}}
    for name, rec in sorted(stages.items(), key=lambda kv: kv[1].get("at", 0)):
        mine = eps.filter(pl.col("stage") == name)
        episode_s = float(mine["wall_s"].sum())
        out["stages"][name] = {
            "wall_s": rec.get("wall_s", 0.0), "episodes": mine.height, "turns": int(mine["turns"].sum()),
            "model_s": round(float(mine["model_s"].sum()), 1), "episode_s": round(episode_s, 1),
            "prompt_tokens": int(mine["prompt_tokens"].sum()), "generated_tokens": int(mine["completion_tokens"].sum()),
            "rest_s": round(max(0.0, rec.get("wall_s", 0.0) - episode_s / concurrency), 1)}
    prompts = [t for row in eps["turn_prompt"].to_list() for t in row]
    gens = [t for row in eps["turn_completion"].to_list() for t in row]
    n = max(1, len(gens))
    out["per_turn"] = {"turns": len(gens), "median_prompt": sorted(prompts)[len(prompts) // 2] if prompts else 0,
                       "median_generated": sorted(gens)[len(gens) // 2] if gens else 0,
                       "mean_generated": sum(gens) / n, "at_token_limit": int(eps["at_limit"].sum()) / n,
                       "model_s_per_turn": float(eps["model_s"].sum()) / n}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="The run directory (runs/RUN_ID).")
    ap.add_argument("--round", default="r0")
    ap.add_argument("--concurrency", type=int, default=None, help="Rollouts in flight (default: the run's config).")
    args = ap.parse_args()
    import yaml

    cfg = yaml.safe_load((args.run / "config.yaml").read_text()) if (args.run / "config.yaml").exists() else {}
    concurrency = args.concurrency or int((cfg.get("rollout") or {}).get("concurrency", 8))
    result = profile(args.run, args.round, concurrency)
    print(f"| stage | wall s | episodes | turns | model s | episode s | prompt tok | generated tok | rest s |\n"
          f"|---|---|---|---|---|---|---|---|---|")
    for name, s in result["stages"].items():
        print(f"| {name} | {s['wall_s']:.0f} | {s['episodes']} | {s['turns']} | {s['model_s']:.0f} | "
              f"{s['episode_s']:.0f} | {s['prompt_tokens']:,} | {s['generated_tokens']:,} | {s['rest_s']:.0f} |")
    t = result["per_turn"]
    print(f"\nper turn: {t['turns']} turns, median prompt {t['median_prompt']} tokens, median generated "
          f"{t['median_generated']} (mean {t['mean_generated']:.0f}), {100 * t['at_token_limit']:.1f}% stopped at the "
          f"token limit, {t['model_s_per_turn']:.2f} model s per turn (summed over concurrent calls)")
    print(f"wrote {save_results('round_profile', result, args)}")


if __name__ == "__main__":
    main()
