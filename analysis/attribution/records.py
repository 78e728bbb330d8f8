"""The `Attribution` record (one per failing rollout) and its Parquet table (polars, explicit schema)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from analysis.attribution.ontology import Bucket


class Attribution(BaseModel):
    """Why one rollout failed, as one attributor sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trajectory_id: str
    category: Bucket = Field(description="One of the six categories, or 'unattributed'.")
    evidence_turns: list[int] = Field(default_factory=list, description="Assistant turns (0-based) that show it.")
    rationale: str = Field(description="Why, in a sentence or two, naming the evidence.")
    attributor: str = Field(description="'heuristic' or 'judge:<model>'.")
    confidence: float = Field(ge=0.0, le=1.0)


ATTRIBUTION_SCHEMA: dict[str, pl.DataType] = {
    "trajectory_id": pl.String(),
    "family": pl.String(),
    "instance_id": pl.String(),
    "model_id": pl.String(),
    "harness_id": pl.String(),
    "seed": pl.Int64(),
    "category": pl.String(),
    "evidence_turns": pl.List(pl.Int64()),
    "rationale": pl.String(),
    "attributor": pl.String(),
    "confidence": pl.Float64(),
}


def attribution_frame(attributions: Iterable[Attribution], trajectories: Mapping[str, Trajectory]) -> pl.DataFrame:
    """One row per attribution, with the trajectory's family, instance, model, harness and seed beside it."""
    rows = []
    for a in attributions:
        t = trajectories.get(a.trajectory_id)
        if t is None:
            raise ValueError(f"attribution for unknown trajectory {a.trajectory_id!r}")
        rows.append({**a.model_dump(), "family": t.family, "instance_id": t.instance.id, "model_id": t.model_id,
                     "harness_id": t.harness_id, "seed": t.seed})
    return pl.DataFrame(rows, schema=ATTRIBUTION_SCHEMA)


def write_attribution_frame(path: str | Path, frame: pl.DataFrame) -> Path:
    """Atomic Parquet write of a frame in `ATTRIBUTION_SCHEMA` (extra columns such as `pair` are dropped)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    frame.select(list(ATTRIBUTION_SCHEMA)).cast(ATTRIBUTION_SCHEMA).write_parquet(tmp)  # type: ignore[arg-type]
    os.replace(tmp, path)
    return path


def read_attribution_frame(path: str | Path) -> pl.DataFrame:
    """All attribution rows under `path` (a file or a directory of .parquet files), schema-checked."""
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    frames = [pl.read_parquet(f) for f in files if f.exists()]
    for f, df in zip(files, frames, strict=True):
        if dict(df.schema) != ATTRIBUTION_SCHEMA:
            raise ValueError(f"{f} does not have the attribution schema: {dict(df.schema)}")
    return pl.concat(frames) if frames else pl.DataFrame(schema=ATTRIBUTION_SCHEMA)


def attributions_of(frame: pl.DataFrame) -> list[Attribution]:
    return [Attribution.model_validate({k: r[k] for k in Attribution.model_fields}) for r in frame.iter_rows(named=True)]
