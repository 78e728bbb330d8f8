"""One failing rollout -> one `Correction` (and its corrected trajectory): locate, rewrite, select, build.

    corr, row = await correct_one(traj.view(), harness, locator, selector, expert, run, n=3)

`row` is None when nothing could be corrected (`corr.status` says why). Mode `single_turn` (the default) trains
only t*; with `suffix=SuffixOptions(...)` a cascade the single turn cannot stop is repaired over t*..t*+m.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.prefix import prefix_of
from agents.records import ModelRole, Trajectory
from correction.locators.base import Locator
from correction.records import Candidate, Correction, Localization
from correction.rewrite import rewrite
from correction.roles import continuation, family_role
from correction.rows import corrected_trajectory
from correction.suffix import suffix_repair
from correction.runner import RolloutFn
from correction.selectors.base import Selection, Selector
from harness.program import Harness

APPLY_TAG = "apply-candidate"


class SuffixOptions(BaseModel):
    """Mode `suffix`: who continues after the expert's turns, how far the suffix may reach, how many replays."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    student: ModelRole
    max_m: int = Field(default=4, ge=0)
    replays: int = Field(default=2, ge=1)


def _record(view: Trajectory, loc: Localization, expert: ModelRole, student: str, **kw: object) -> Correction:
    return Correction(source_trajectory_id=view.id, instance_id=view.instance.id, family=view.family,
                      harness_id=view.harness_id, student_model=student, expert_model=family_role(expert, view.family).model,
                      t_star=loc.t_star, locator=loc.locator, category=loc.category,
                      localization_rationale=loc.rationale, **kw)  # type: ignore[arg-type]


async def _apply(view: Trajectory, harness: Harness, t_star: int, cand: Candidate, run: RolloutFn) -> list[Trajectory]:
    """The student's prefix + the candidate, its calls run and no model called (for a selector that ran no
    episode; the role is never called)."""
    job = continuation(view, harness, ModelRole(model="oracle/{family}"), prefix_of(view, t_star).then(cand.message), 0,
                       APPLY_TAG, extra_turns=0)
    return await run([job])


async def _both(view: Trajectory, harness: Harness, t_star: int, cands: list[Candidate], selector: Selector,
                also: Selector | None, run: RolloutFn) -> tuple[Selection, bool | None]:
    """The primary selector's choice; with `also`, the second one's scores/ranks merged in and the agreement."""
    sel = await selector.select(view, harness, t_star, cands, run)
    if also is None:
        return sel, None
    other = await also.select(view, harness, t_star, cands, run)
    merged = [a.model_copy(update={"replay_scores": a.replay_scores or b.replay_scores,
                                   "judge_rank": a.judge_rank if a.judge_rank is not None else b.judge_rank})
              for a, b in zip(sel.candidates, other.candidates, strict=True)]
    agree = None if sel.chosen is None or other.chosen is None else sel.chosen == other.chosen
    return sel.model_copy(update={"candidates": merged}), agree


async def _try_suffix(view: Trajectory, harness: Harness, loc: Localization, expert: ModelRole, run: RolloutFn,
                      suffix: SuffixOptions, single: float) -> tuple[Correction, Trajectory] | None:
    """Suffix mode: the expert's turns t*..t*+m when they let the student do better than the single turn."""
    found = await suffix_repair(view, harness, loc.t_star or 0, expert, suffix.student, run, suffix.max_m,
                                suffix.replays)
    if found.chosen_m is None or found.turns[found.chosen_m].mean_score <= single:
        return None
    m = found.chosen_m
    row = corrected_trajectory(view, loc.t_star or 0, max(found.episodes, key=lambda e: e.score), trained=m + 1)
    corr = _record(view, loc, expert, view.model_id, status="corrected", mode="suffix", candidates=found.turns,
                   chosen=m, selector="suffix_replay", rationale=found.rationale, corrected_trajectory_id=row.id,
                   fewer_candidates_reason=f"suffix mode: the single corrected turn scored {single:.2f}")
    return corr, row


async def correct_one(view: Trajectory, harness: Harness, locator: Locator, selector: Selector, expert: ModelRole,
                      run: RolloutFn, n: int = 3, also: Selector | None = None,
                      suffix: SuffixOptions | None = None) -> tuple[Correction, Trajectory | None]:
    """Correct one failing rollout (a view). Never raises for this rollout's trouble; see `Correction.status`.
    `also`: a second selector run on the same candidates for the record (its agreement with `selector`).
    `suffix`: mode `suffix` - when the chosen single turn does not let the student reach score 1.0 in its
    replays, try the expert's suffix t*..t*+m (correction/suffix.py) and keep it when it does better."""
    view = view.require_view("correct_one")
    if view.harness_id != harness.id:
        raise ValueError(f"trajectory {view.id} ran under harness {view.harness_id}, not {harness.id}")
    loc = await locator.locate(view, harness, run)
    if loc.t_star is None:
        return _record(view, loc, expert, view.model_id, status="not_localized", rationale=loc.rationale), None
    cands, reason = await rewrite(view, harness, loc.t_star, expert, run, n=n)
    if not cands:
        return _record(view, loc, expert, view.model_id, status="no_candidate", fewer_candidates_reason=reason,
                       rationale="the expert wrote no candidate other than the student's own action"), None
    sel, agree = await _both(view, harness, loc.t_star, cands, selector, also, run)
    base = dict(candidates=sel.candidates, fewer_candidates_reason=reason, selector=selector.name,
                judge_agreement=agree)
    single = sel.candidates[sel.chosen].mean_score if sel.chosen is not None else 0.0
    if suffix is not None and (sel.chosen is None or single < 1.0):
        repaired = await _try_suffix(view, harness, loc, expert, run, suffix, single)
        if repaired is not None:
            return repaired
    if sel.chosen is None:
        return _record(view, loc, expert, view.model_id, status="no_candidate", rationale=sel.rationale, **base), None
    episodes = sel.episodes or await _apply(view, harness, loc.t_star, sel.candidates[sel.chosen], run)
    usable = [e for e in episodes if e.stop_reason != "replay_divergence" and len(e.turns) > loc.t_star]
    if not usable:
        return _record(view, loc, expert, view.model_id, status="replay_failed", chosen=sel.chosen,
                       rationale=f"no replay of the chosen candidate holds turn {loc.t_star}", **base), None
    best = max(usable, key=lambda e: e.score)
    row = corrected_trajectory(view, loc.t_star, best)
    corr = _record(view, loc, expert, view.model_id, status="corrected", chosen=sel.chosen,
                   rationale=f"{sel.candidates[sel.chosen].rationale} ({sel.rationale})",
                   corrected_trajectory_id=row.id, **base)
    return corr, row
