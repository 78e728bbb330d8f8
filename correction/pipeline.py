"""One failing rollout -> one `Correction` (and its corrected trajectory): locate, rewrite, select, build.

    corr, row = await correct_one(traj.view(), harness, locator, selector, expert, run, n=3)

`row` is None when nothing could be corrected (`corr.status` says why). Mode `single_turn` only: suffix repair
(rewriting t*..t*+m until the expert's state is back on a successful path) is not built; docs/correction.md.
"""

from __future__ import annotations

from agents.records import ModelRole, Trajectory
from correction.locators.base import Locator
from correction.records import Correction, Localization
from correction.rewrite import rewrite
from correction.roles import family_role
from correction.rows import corrected_trajectory
from correction.runner import RolloutFn
from correction.selectors.base import Selector
from harness.program import Harness


def _record(view: Trajectory, loc: Localization, expert: ModelRole, student: str, **kw: object) -> Correction:
    return Correction(source_trajectory_id=view.id, instance_id=view.instance.id, family=view.family,
                      harness_id=view.harness_id, student_model=student, expert_model=family_role(expert, view.family).model,
                      t_star=loc.t_star, locator=loc.locator, category=loc.category,
                      localization_rationale=loc.rationale, **kw)  # type: ignore[arg-type]


async def correct_one(view: Trajectory, harness: Harness, locator: Locator, selector: Selector, expert: ModelRole,
                      run: RolloutFn, n: int = 3) -> tuple[Correction, Trajectory | None]:
    """Correct one failing rollout (a view). Never raises for this rollout's trouble; see `Correction.status`."""
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
    sel = await selector.select(view, harness, loc.t_star, cands, run)
    base = dict(candidates=sel.candidates, fewer_candidates_reason=reason, selector=selector.name)
    if sel.chosen is None:
        return _record(view, loc, expert, view.model_id, status="no_candidate", rationale=sel.rationale, **base), None
    usable = [e for e in sel.episodes if e.stop_reason != "replay_divergence" and len(e.turns) > loc.t_star]
    if not usable:
        return _record(view, loc, expert, view.model_id, status="replay_failed", chosen=sel.chosen,
                       rationale=f"no replay of the chosen candidate holds turn {loc.t_star}", **base), None
    best = max(usable, key=lambda e: e.score)
    row = corrected_trajectory(view, loc.t_star, best)
    corr = _record(view, loc, expert, view.model_id, status="corrected", chosen=sel.chosen,
                   rationale=f"{sel.candidates[sel.chosen].rationale} ({sel.rationale})",
                   corrected_trajectory_id=row.id, **base)
    return corr, row
