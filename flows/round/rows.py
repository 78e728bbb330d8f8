"""A round's test rollouts as the report's rows, read back from its store.

    tests = round_tests(store)                 # pair name -> EvalRecord, from the round's state.json
    frame = rows_frame(store, tests)           # one row per test rollout (columns: ROW_COLUMNS)

The row key (`group`) is the pair's name for the base pairs and `<arm>.<harness>` for a trained arm, whose
training seed (`corr.s2.hstar` -> 2) goes to `train_seed` (flows/round/stages.py `grouped`). Per rollout:
success, cost, the seconds the model spent answering (`model_s`: its turns' call latencies, from the turn table),
and `instance_digest`, the content hash of the instance it ran (tasks/fingerprint.py), which `coevo compare`
checks before pairing two runs' units.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agents.tables.trajectories import generated_turn_usage, turns_path
from flows.round.eval import EvalRecord
from flows.round.stages import grouped
from flows.store import RunStore
from tasks.fingerprint import instance_digest
from tasks.records import TaskInstance

EVAL_STAGES = ("evaluate_pairs", "evaluate_h0", "evaluate_h_star", "evaluate_arms")
ROW_COLUMNS = ("group", "train_seed", "family", "instance_id", "seed", "passed", "cost_usd", "model_s", "wall_s",
               "n_turns", "prompt_tokens", "completion_tokens", "instance_digest")


def round_tests(store: RunStore) -> dict[str, EvalRecord]:
    """Every evaluated test pair the round's finished stages recorded."""
    done = store.done("round")
    return {name: EvalRecord.model_validate(rec) for stage in EVAL_STAGES if stage in done
            for name, rec in done[stage]["output"]["pairs"].items()}


def model_seconds(paths: list[Path]) -> pl.DataFrame:
    """(id, model_s) for the trajectories stored in these files: the sum of their generated turns' latencies."""
    heads = [p for p in paths if turns_path(p).exists()]
    if not heads:
        return pl.DataFrame(schema={"id": pl.String(), "model_s": pl.Float64()})
    return generated_turn_usage(heads).select(pl.col("trajectory_id").alias("id"), "model_s").collect()


def _digests(frame: pl.DataFrame) -> pl.DataFrame:
    first = frame.select("instance_id", "instance_json").unique(subset="instance_id")
    return pl.DataFrame({"instance_id": first["instance_id"],
                         "instance_digest": [instance_digest(TaskInstance.model_validate_json(j))
                                             for j in first["instance_json"]]},
                        schema={"instance_id": pl.String(), "instance_digest": pl.String()})


def rows_frame(store: RunStore, tests: dict[str, EvalRecord]) -> pl.DataFrame:
    """One row per test rollout of these pairs (columns `ROW_COLUMNS`); empty when there is none."""
    frames = []
    for group, recs in grouped(tests).items():
        for rec in recs:
            parts = rec.name.split(".")
            seed = int(parts[1][1:]) if len(parts) == 3 else None
            f = store.chunk_frame(rec.stage, rec.chunk_keys)
            secs = model_seconds([store.trajectory_path(rec.stage, k) for k in rec.chunk_keys])
            f = f.join(secs, on="id", how="left").with_columns(pl.col("model_s").fill_null(0.0))
            f = f.join(_digests(f), on="instance_id", how="left")
            frames.append(f.with_columns(pl.lit(group).alias("group"),
                                         pl.lit(seed, dtype=pl.Int64).alias("train_seed")).select(ROW_COLUMNS))
    return pl.concat(frames) if frames else pl.DataFrame()
