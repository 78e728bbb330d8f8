"""The `attribute` stage's work: the finished evaluation pairs of a run -> attributions, composition, fit.

    record = attribute_run(store, AttributionConfig(base_pair="student", expert_pair="expert"))
    sections = report_sections(store, config)        # for analysis.report.build_report(..., sections=...)

1. Per finished evaluation pair (state.json), its chunk files are read; failing rollouts go to the attributor
   as views. `<run>/attributions/<pair>-<key>.parquet`: the key hashes the chunk keys and the attributor
   spec, so a resumed run reuses finished pairs (and a changed attributor makes new files).
2. The composition (with the shift between `shifts` pairs), the trigger rates and the fit table become
   report sections; `<run>/reports/attribution.md` holds them on their own.
A Prefect task in flows/evaluation/flow.py wraps `attribute_run` (the lead wires it after `evaluate`).
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from agents.records import ModelRole, Trajectory
from analysis.attribution import Attributor, make_attributor
from analysis.attribution.batch import attribute_batch
from analysis.attribution.records import read_attribution_frame, write_attribution_frame
from analysis.report_sections import (
    ReportSection,
    composition_section,
    fit_section,
    trigger_section,
)
from flows.config import AttributionConfig
from flows.reporting import evaluation_frame, evaluation_trajectories
from flows.store import RunStore, atomic_write_text, content_key

STAGE = "attribute"


class AttributionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attributor: str
    files: dict[str, str] = Field(description="pair -> attribution Parquet file.")
    failing: dict[str, int] = Field(description="pair -> failing rollouts attributed.")
    reused: list[str] = Field(description="Pairs whose attributions were found in the store.")
    at_risk: list[str] = Field(default_factory=list, description="Pairs whose fit is at risk (overall row).")
    report_path: str


def build_attributor(config: AttributionConfig, judge_role: ModelRole | None = None) -> Attributor:
    """'judge' alone uses the run's `judge` role; 'judge:MODEL' a model string; 'heuristic' needs nothing."""
    if config.attributor == "judge":
        if judge_role is None:
            raise ValueError("attribution.attributor: 'judge' needs a `judge` role under `models` (or use judge:MODEL)")
        return make_attributor(f"judge:{judge_role.model}", api_base=judge_role.api_base, max_tokens=judge_role.max_tokens)
    return make_attributor(config.attributor)


def _pair_attributions(store: RunStore, pair: str, frame: pl.DataFrame, trajectories: list[Trajectory], attributor: Attributor,
                       config: AttributionConfig) -> tuple[Path, bool]:
    key = content_key(sorted(frame["id"].to_list()), attributor.name)
    path = store.root / "attributions" / f"{re.sub(r'[^A-Za-z0-9_.@+-]', '_', pair)}-{key}.parquet"
    if path.exists():
        return path, True
    trajs = [t for t in trajectories if t.id in set(frame["id"].to_list())]
    batch = asyncio.run(attribute_batch(trajs, attributor, pair_of=lambda t: pair, concurrency=config.concurrency))
    return write_attribution_frame(path, batch.frame), False


def attribute_run(store: RunStore, config: AttributionConfig, judge_role: ModelRole | None = None) -> AttributionRecord:
    """Attribute every finished evaluation pair (resumable), then write reports/attribution.md."""
    frame, order = evaluation_frame(store)
    by_pair, _ = evaluation_trajectories(store)
    attributor = build_attributor(config, judge_role)
    files, failing, reused = {}, {}, []
    for pair in order:
        path, was_there = _pair_attributions(store, pair, frame.filter(pl.col("pair") == pair), by_pair[pair],
                                             attributor, config)
        files[pair] = str(path)
        failing[pair] = read_attribution_frame(path).height
        if was_there:
            reused.append(pair)
        store.mark_done(STAGE, pair, {"file": str(path), "failing": failing[pair], "attributor": attributor.name})
    sections = report_sections(store, config, files=files)
    md = "".join(f"## {s.title}\n\n{s.markdown}\n" for s in sections)
    report = store.path("reports", "attribution.md")
    atomic_write_text(report, f"# Failure attribution: {store.run_id}\n\n{md}")
    fit = next((s for s in sections if s.kind == "fit"), None)
    at_risk = sorted({r["pair"] for r in fit.rows if r["family"] == "overall" and r["at_risk"]}) if fit else []
    return AttributionRecord(attributor=attributor.name, files=files, failing=failing, reused=reused,
                             at_risk=at_risk, report_path=str(report.resolve()))


def report_sections(store: RunStore, config: AttributionConfig, files: dict[str, str] | None = None) -> list[ReportSection]:
    """Composition (from the stored attributions), trigger rates and, with a base pair, the fit table."""
    by_pair, order = evaluation_trajectories(store)
    files = files or {p: info["file"] for p, info in store.done(STAGE).items()}
    sections = []
    attrs = [read_attribution_frame(files[p]).with_columns(pl.lit(p).alias("pair")) for p in order if p in files]
    if attrs and sum(a.height for a in attrs):
        sections.append(composition_section(pl.concat(attrs), order, random.Random(config.seed),
                                            shifts=config.shifts, n_boot=config.bootstrap_samples))
    sections.append(trigger_section(by_pair, order))
    if config.base_pair is not None and config.base_pair in by_pair:
        sections.append(fit_section(by_pair, config.base_pair, config.expert_pair, config.fit))
    return sections
