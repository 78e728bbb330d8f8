"""What each stage of a round used, read back from the files it stored: rollouts, model calls, model-seconds.

    rows = stage_usage(store.root, runner.log, OUTPUTS)     # the runner's log rows, each with the three added

A stage's files are the globs `flows/round/runner.py` `OUTPUTS` lists for it. Counted per stage: the trajectories
under its globs, their model calls (turns) and model-seconds (the turns' call latencies), a continuation's copied
prefix turns left out (they were paid for by the rollout they copy). A rollout another stage already stored (the
same model, instance, seed, harness and wall time: a copy, e.g. M_t on h* when h* = h0, or the gate's rollout the
search ran) counts in the first stage that holds it. Derived rows (the arm sets, the corrected training rows) are
copies of counted episodes and are left out, as the API budget leaves them out (flows/round/budget.py). The API
dollars and wall seconds are the runner's own (its log rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from agents.tables.trajectories import generated_turn_usage, turns_path

IDENTITY = ("model_id", "instance_id", "seed", "harness_id", "wall_s")


def _derived(rel: tuple[str, ...]) -> bool:
    return "sets" in rel or "datasets" in rel or ("correction_data" in rel and "cache" not in rel)


def stage_files(root: Path, globs: Sequence[str]) -> list[Path]:
    """The trajectory tables under a stage's globs (turn tables, derived rows and superseded work left out)."""
    out: set[Path] = set()
    for pattern in globs:
        for hit in root.glob(pattern):
            found = [hit] if hit.is_file() else hit.rglob("*.parquet")
            out |= {p for p in found if p.suffix == ".parquet" and not p.name.endswith(".turns.parquet")
                    and not _derived(p.relative_to(root).parts) and turns_path(p).exists()}
    return sorted(out)


def _usage(files: list[Path]) -> pl.DataFrame:
    """One row per stored rollout: IDENTITY, model calls and model-seconds of its generated turns."""
    schema = {"model_id": pl.String(), "instance_id": pl.String(), "seed": pl.Int64(), "harness_id": pl.String(),
              "wall_s": pl.Float64(), "calls": pl.UInt32(), "model_s": pl.Float64()}
    if not files:
        return pl.DataFrame(schema=schema)
    heads = pl.scan_parquet(files).select(pl.col("id").alias("trajectory_id"), *IDENTITY)
    per = generated_turn_usage(files)
    return (heads.join(per, on="trajectory_id", how="left").select(*IDENTITY, pl.col("calls").fill_null(0),
                                                                    pl.col("model_s").fill_null(0.0))
            .collect().cast(schema))  # type: ignore[arg-type]


def stage_usage(root: Path, log: Sequence[Mapping[str, Any]], outputs: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """The log rows, in order, each with `rollouts`, `model_calls` and `model_s` of what its stage stored."""
    seen: set[tuple[Any, ...]] = set()
    rows = []
    for entry in log:
        use = _usage(stage_files(root, outputs.get(entry["stage"], ())))
        fresh = [r for r in use.iter_rows() if r[:len(IDENTITY)] not in seen]
        seen |= {r[:len(IDENTITY)] for r in fresh}
        rows.append({**entry, "rollouts": len(fresh), "model_calls": sum(r[-2] for r in fresh),
                     "model_s": round(sum(r[-1] for r in fresh), 1)})
    return rows
