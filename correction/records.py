"""Records of the correction arm: where a failing rollout went wrong (`Localization`), what the expert wrote
instead (`Candidate`), and the whole decision (`Correction`), stored as Parquet with an explicit schema.

Lineage: every `Correction` names its source trajectory (`source_trajectory_id`, the id in the trajectory
table the failing rollout was read from), its instance and the harness it ran under; `corrected_trajectory_id`
is the id of the corrected trajectory written beside it (the row `coevo train` takes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.attribution.ontology import Bucket

Mode = Literal["single_turn", "suffix"]


class Localization(BaseModel):
    """A locator's answer: the failing turn t*, its category and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    t_star: int | None = Field(ge=0, description="0-based assistant turn to rewrite; None when none was found.")
    category: Bucket = Field(description="Failure-ontology category (or 'unattributed').")
    rationale: str = Field(description="Why this turn, naming the evidence (e.g. the R(t) values probed).")
    locator: str = Field(description="'counterfactual', 'divergence', ...")
    probes: dict[int, bool] = Field(default_factory=dict, description="Counterfactual R(t) values the search probed.")
    monotone: bool = Field(default=True, description="False when the probes showed R recover after failing.")


class Candidate(BaseModel):
    """One expert rewrite of turn t*: the assistant message (content + tool calls) and its scores."""

    model_config = ConfigDict(extra="forbid")

    message: dict[str, Any] = Field(description="The OpenAI assistant message the expert wrote for t*.")
    rationale: str = Field(description="One sentence: what the corrected turn does differently.")
    seed: int = Field(description="Seed the expert sampled it with.")
    replay_scores: list[float] = Field(default_factory=list, description="Verifier scores of the student's continuations.")
    judge_rank: int | None = Field(default=None, description="Rank given by a judge selector (1 = best).")

    @property
    def mean_score(self) -> float:
        return sum(self.replay_scores) / len(self.replay_scores) if self.replay_scores else 0.0


class Correction(BaseModel):
    """One corrected failing rollout (the decision, with lineage to the trajectories)."""

    model_config = ConfigDict(extra="forbid")

    source_trajectory_id: str
    instance_id: str
    family: str
    harness_id: str
    student_model: str
    expert_model: str
    t_star: int | None
    locator: str
    category: Bucket
    localization_rationale: str
    candidates: list[Candidate] = Field(default_factory=list)
    fewer_candidates_reason: str = Field(default="", description="Why fewer than N distinct candidates were kept.")
    selector: str = ""
    chosen: int | None = Field(default=None, description="Index into candidates; None when nothing was chosen.")
    rationale: str = Field(default="", description="The chosen candidate's rationale, or why nothing was chosen.")
    mode: Mode = "single_turn"
    corrected_trajectory_id: str = ""
    status: Literal["corrected", "not_localized", "no_candidate", "replay_failed", "not_improved"] = "corrected"
    judge_agreement: bool | None = Field(default=None, description="Both selectors ran: did they choose the same one?")
    source_score: float | None = Field(default=None, description="The failing rollout's verifier score (what a "
                                       "kept correction's replays must beat under keep 'improved').")
    keep: Literal["controlled", "improved", "any"] = Field(default="any", description="The keep rule the correction "
                                                           "was judged by.")
    decision_scores: list[float] = Field(default_factory=list, description="Keep 'controlled': the chosen candidate's "
                                         "decision replays (seeds the selection did not use).")
    control_scores: list[float] = Field(default_factory=list, description="Keep 'controlled': the control, the "
                                        "student's own turn t* resampled from the same prefix with the same seeds.")
    suffix: str = Field(default="none", description="What follows t* in the row: none | replay | original, with the "
                        "reason when a requested suffix fell back (e.g. 'none (replay requested; judge ran none)').")
    loss_on: Literal["corrected", "all_student"] = "corrected"


CORRECTION_SCHEMA: dict[str, pl.DataType] = {
    "source_trajectory_id": pl.String(), "instance_id": pl.String(), "family": pl.String(), "harness_id": pl.String(),
    "student_model": pl.String(), "expert_model": pl.String(), "t_star": pl.Int64(), "locator": pl.String(),
    "category": pl.String(), "localization_rationale": pl.String(), "candidates_json": pl.String(),
    "n_candidates": pl.Int64(), "fewer_candidates_reason": pl.String(), "selector": pl.String(),
    "chosen": pl.Int64(), "chosen_mean_score": pl.Float64(), "rationale": pl.String(), "mode": pl.String(),
    "corrected_trajectory_id": pl.String(), "status": pl.String(), "judge_agreement": pl.Boolean(),
    "source_score": pl.Float64(), "keep": pl.String(), "suffix": pl.String(), "loss_on": pl.String(),
    "decision_scores": pl.List(pl.Float64()), "control_scores": pl.List(pl.Float64()),
}


def _row(c: Correction) -> dict[str, Any]:
    d = c.model_dump(exclude={"candidates"})
    d["candidates_json"] = json.dumps([x.model_dump() for x in c.candidates], sort_keys=True)
    d["n_candidates"] = len(c.candidates)
    d["chosen_mean_score"] = c.candidates[c.chosen].mean_score if c.chosen is not None else None
    return d


def write_corrections(path: str | Path, corrections: Iterable[Correction]) -> Path:
    """Atomic Parquet write with the explicit schema."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame([_row(c) for c in corrections], schema=CORRECTION_SCHEMA)
    tmp = path.with_suffix(path.suffix + ".tmp")
    frame.write_parquet(tmp)
    os.replace(tmp, path)
    return path


def read_corrections(path: str | Path) -> list[Correction]:
    frame = pl.read_parquet(path)
    out: list[Correction] = []
    for row in frame.iter_rows(named=True):
        cands = [Candidate.model_validate(x) for x in json.loads(row.pop("candidates_json"))]
        for k in ("n_candidates", "chosen_mean_score"):
            row.pop(k)
        out.append(Correction.model_validate({**row, "candidates": cands}))
    return out


def boundary_instances(passed: Iterable[tuple[str, bool]]) -> set[str]:
    """Instances at the student's capability boundary: pass rate over its samples strictly between 0 and 1."""
    seen: dict[str, set[bool]] = {}
    for instance_id, ok in passed:
        seen.setdefault(instance_id, set()).add(ok)
    return {i for i, v in seen.items() if v == {True, False}}


def dataset_card(corrections: list[Correction], boundary: set[str] | None = None) -> dict[str, Any]:
    """Counts per family and status, mean t*, candidates kept, selector agreement where both ran, and the share
    of corrections on capability-boundary instances (`boundary`, when the student's samples are known)."""
    fams: dict[str, dict[str, int]] = {}
    for c in corrections:
        fams.setdefault(c.family, {}).setdefault(c.status, 0)
        fams[c.family][c.status] += 1
    done = [c for c in corrections if c.status == "corrected"]
    stars = [c.t_star for c in done if c.t_star is not None]
    both = [c.judge_agreement for c in corrections if c.judge_agreement is not None]
    return {
        "corrections": sum(c.status == "corrected" for c in corrections), "sources": len(corrections),
        "per_family": dict(sorted(fams.items())),
        "mean_t_star": sum(stars) / len(stars) if stars else None,
        "mean_candidates": sum(len(c.candidates) for c in corrections) / len(corrections) if corrections else None,
        "selector_agreement": (sum(both) / len(both)) if both else None,
        "boundary_share": (sum(c.instance_id in boundary for c in done) / len(done))
        if boundary is not None and done else None,
        "kept": kept_dropped(corrections),
        "kept_rate": kept_rate(corrections),
        "modes": dict(sorted({m: sum(c.mode == m and c.status == "corrected" for c in corrections)
                              for m in {c.mode for c in corrections}}.items())),
        "categories": dict(sorted({k: sum(c.category == k for c in corrections) for k in {c.category for c in corrections}}.items())),
    }


def kept_without_control(c: Correction) -> bool | None:
    """Whether the rule before the control (the chosen candidate's mean selection-replay score above the failing
    rollout's) keeps `c`; None when `c` never reached a keep decision (nothing chosen)."""
    if c.chosen is None or c.source_score is None or c.mode != "single_turn":
        return None
    return c.candidates[c.chosen].mean_score > c.source_score


def kept_rate(corrections: list[Correction]) -> dict[str, Any]:
    """Of the corrections that reached a keep decision: how many the rule kept, and how many the rule before the
    control would have kept (the chosen candidate's selection replays above the failing rollout's score)."""
    decided = [c for c in corrections if kept_without_control(c) is not None]
    kept = sum(c.status == "corrected" for c in decided)
    before = sum(bool(kept_without_control(c)) for c in decided)
    return {"decided": len(decided), "kept": kept, "kept_without_control": before,
            "rule": sorted({c.keep for c in decided})}


def kept_dropped(corrections: list[Correction]) -> dict[str, dict[str, dict[str, int]]]:
    """family -> locator -> {kept, dropped}: `kept` trained on, `dropped` rewritten and selected but refused by
    the keep rule (its replays did not beat the failing rollout's score); other outcomes are in `per_family`."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for c in corrections:
        cell = out.setdefault(c.family, {}).setdefault(c.locator, {"kept": 0, "dropped": 0})
        if c.status == "corrected":
            cell["kept"] += 1
        elif c.status == "not_improved":
            cell["dropped"] += 1
    return {f: dict(sorted(v.items())) for f, v in sorted(out.items())}


def correction_yield(samples: Iterable[tuple[str, bool]], corrections: list[Correction],
                     in_set: Mapping[str, int]) -> list[dict[str, Any]]:
    """Per family and locator, from the student's samples to the training set: samples, failures, located
    (a t* named), rewritten (a candidate written), kept (trained on), dropped by the keep rule, how many the rule
    before the control would have kept (`kept_without_control`), the yield (kept per failing sample), and
    corrections in the set after deduplication and the mix's cap (`in_set`: family -> rows of kind correction)."""
    drawn: dict[str, list[bool]] = {}
    for family, passed in samples:
        drawn.setdefault(family, []).append(passed)
    rows = []
    for family in sorted(drawn):
        mine = [c for c in corrections if c.family == family]
        for locator in sorted({c.locator for c in mine}) or ["-"]:
            cs = [c for c in mine if c.locator == locator]
            failures, kept = drawn[family].count(False), sum(c.status == "corrected" for c in cs)
            rows.append({"family": family, "locator": locator, "samples": len(drawn[family]),
                         "failures": failures, "located": sum(c.t_star is not None for c in cs),
                         "rewritten": sum(bool(c.candidates) for c in cs),
                         "kept": kept, "dropped (not improved)": sum(c.status == "not_improved" for c in cs),
                         "kept without the control": sum(bool(kept_without_control(c)) for c in cs),
                         "yield (kept / failures)": f"{100 * kept / failures:.1f}%" if failures else "-",
                         "in set": in_set.get(family, 0)})
    return rows
