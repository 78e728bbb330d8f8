"""One failing rollout -> one `Correction` (and its corrected trajectory): locate, rewrite, select, build.

    corr, row = await correct_one(traj.view(), harness, locator, selector, expert, run, n=3)

`row` is None when nothing could be corrected (`corr.status` says why). Mode `single_turn` only: suffix repair
(rewriting t*..t*+m until the expert's state is back on a successful path) is not built; docs/correction.md.
"""

from __future__ import annotations

from agents.prefix import prefix_of
from agents.records import ModelRole, Trajectory
from correction.locators.base import Locator
from correction.records import Candidate, Correction, Localization
from correction.rewrite import rewrite
from correction.roles import continuation, family_role
from correction.rows import corrected_trajectory
from correction.runner import RolloutFn
from correction.selectors.base import Selection, Selector
from harness.program import Harness

APPLY_TAG = "apply-candidate"


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


async def correct_one(view: Trajectory, harness: Harness, locator: Locator, selector: Selector, expert: ModelRole,
                      run: RolloutFn, n: int = 3, also: Selector | None = None) -> tuple[Correction, Trajectory | None]:
    """Correct one failing rollout (a view). Never raises for this rollout's trouble; see `Correction.status`.
    `also`: a second selector run on the same candidates for the record (its agreement with `selector`)."""
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
