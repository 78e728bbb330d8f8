"""Attribute a set of trajectories: views to the attributor, originals to the measurement, tables to disk.

    batch = await attribute_batch(trajectories, make_attributor("heuristic"))
    paths = write_batch(batch, out_dir, random.Random(0))   # attributions.parquet, composition.md/.png,
                                                            # accuracy.md when the trajectories carry ground truth
Used by `coevo attribute` and the `attribute` stage (flows/).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from agents.records import Trajectory
from analysis import plots
from analysis.attribution.base import Attributor, attribute_all
from analysis.attribution.measure import AccuracyReport, accuracy_markdown, has_ground_truth, measure
from analysis.attribution.records import attribution_frame, write_attribution_frame
from analysis.composition import composition_markdown, composition_table


def pair_label(t: Trajectory) -> str:
    """The (model, harness) pair of a trajectory, as tables label it when no run config names it."""
    return f"{t.model_id} | {t.harness_id[:8]}"


@dataclass(frozen=True)
class AttributionBatch:
    frame: pl.DataFrame  # ATTRIBUTION_SCHEMA + `pair`
    order: list[str]
    n_trajectories: int
    accuracy: AccuracyReport | None


async def attribute_batch(trajectories: Sequence[Trajectory], attributor: Attributor, *,
                          pair_of: Callable[[Trajectory], str] = pair_label, concurrency: int = 4) -> AttributionBatch:
    """Attribute every failing trajectory (as a view); measure accuracy when ground truth is attached."""
    failing = [t for t in trajectories if not t.passed]
    records = await attribute_all(attributor, [t.view() for t in failing], concurrency)
    by_id = {t.id: t for t in failing}
    if len(by_id) != len(failing):
        raise ValueError("trajectory ids repeat; attributions could not be matched to their rollouts")
    frame = attribution_frame(records, by_id)
    labels = {t.id: pair_of(t) for t in trajectories}
    frame = frame.with_columns(pl.col("trajectory_id").replace_strict(labels, return_dtype=pl.String()).alias("pair"))
    order = list(dict.fromkeys(labels[t.id] for t in trajectories))
    accuracy = measure(trajectories, records) if has_ground_truth(trajectories) else None
    return AttributionBatch(frame=frame, order=order, n_trajectories=len(trajectories), accuracy=accuracy)


def _write_text(path: Path, text: str) -> Path:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_batch(batch: AttributionBatch, out_dir: str | Path, rng: random.Random, n_boot: int = 2000) -> dict[str, Path]:
    """attributions.parquet, composition.md (+ composition.png when there are failures), accuracy.md (ground truth)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"attributions": write_attribution_frame(out / "attributions.parquet", batch.frame)}
    failing_pairs = [p for p in batch.order if p in set(batch.frame["pair"].to_list())]
    md = [f"# Failure composition\n\n{batch.n_trajectories} rollouts, {batch.frame.height} failing, attributed by "
          f"{', '.join(sorted(set(batch.frame['attributor'].to_list()))) or '-'}.\n\n"]
    if failing_pairs:
        table = composition_table(batch.frame, rng, order=failing_pairs, n_boot=n_boot)
        md.append(composition_markdown(table, failing_pairs))
        paths["composition_png"] = plots.composition_bars(table, out / "composition.png", failing_pairs)
    paths["composition"] = _write_text(out / "composition.md", "".join(md))
    if batch.accuracy is not None:
        paths["accuracy"] = _write_text(out / "accuracy.md", "# Attribution accuracy\n\n" + accuracy_markdown(batch.accuracy))
    return paths
