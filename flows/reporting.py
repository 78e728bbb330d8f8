"""Run directory -> evaluation report (no Prefect here; the `report` stage adds the artifacts).

The numbers come from the chunk files the `evaluate` stage recorded as finished in `state.json`, read back
from Parquet: never from memory, never typed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict

from agents.records import Trajectory
from analysis.report import build_report, write_report
from analysis.report_sections import ReportSection, trigger_section
from flows.config import parse_config
from flows.store import RunStore


class RunReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    report_path: str
    plots: dict[str, str]
    pairs: list[str]
    family_rows: list[dict[str, str]]
    n_rollouts: int
    markdown: str


def _finished_pairs(store: RunStore) -> tuple[dict[str, Any], list[str]]:
    """The finished evaluation pairs (stage + chunks each) and their order in the run's config."""
    done = store.done("evaluate")
    if not done:
        raise ValueError(f"run {store.run_id} has no finished evaluation yet (state.json lists none)")
    try:
        config = parse_config(store.load_config_dict(), str(store.root / "config.yaml"))
        order = [p.name for p in config.evaluation.pairs if p.name in done]
    except FileNotFoundError:
        order = sorted(done)
    return done, order


def evaluation_frame(store: RunStore) -> tuple[pl.DataFrame, list[str]]:
    """All finished evaluation trajectories with a `pair` column, and the pairs in config order."""
    done, order = _finished_pairs(store)
    frames = [store.chunk_frame(done[p]["stage"], done[p]["chunks"]).with_columns(pl.lit(p).alias("pair"))
              for p in order]
    return pl.concat(frames), order


def evaluation_trajectories(store: RunStore) -> tuple[dict[str, list[Trajectory]], list[str]]:
    """All finished evaluation trajectories per pair (full records, turns included), and the pair order."""
    done, order = _finished_pairs(store)
    return {p: store.read_chunks(done[p]["stage"], done[p]["chunks"]) for p in order}, order


def write_run_report(store: RunStore, n_boot: int = 2000,
                     sections: Sequence[ReportSection] | None = None) -> RunReport:
    """The run's report; `sections` default to the component trigger rates of every pair."""
    frame, order = evaluation_frame(store)
    cfg = store.load_config_dict()
    ev = cfg.get("evaluation", {})
    meta: dict[str, Any] = {
        "run": store.run_id,
        "run directory": str(store.root.resolve()),
        "split": ev.get("split", "test"),
        "instances per family": ev.get("n_instances") or "all",
        "seeds": frame["seed"].n_unique(),
        "families": ", ".join(sorted(frame["family"].unique().to_list())),
        "pairs": "; ".join(f"{p} = {store.done('evaluate')[p].get('desc', p)}" for p in order),
    }
    if sections is None:
        sections = [trigger_section(evaluation_trajectories(store)[0], order)]
    rep = build_report(frame, order, title=f"Evaluation report: {store.run_id}", meta=meta, n_boot=n_boot,
                       sections=sections)
    paths = write_report(rep, frame, store.root / "reports", order)
    return RunReport(
        run_id=store.run_id, report_path=str(paths["report"].resolve()),
        plots={k: str(v.resolve()) for k, v in paths.items() if k != "report"},
        pairs=order, family_rows=rep.family_rows, n_rollouts=rep.n_rollouts, markdown=rep.markdown,
    )
