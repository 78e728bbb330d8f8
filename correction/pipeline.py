"""One failing rollout -> one `Correction` (and its corrected trajectory): locate, rewrite, select, build.

    corr, row = await correct_one(traj.view(), harness, locator, selector, expert, run, n=3)

`row` is None when nothing could be corrected (`corr.status` says why). Mode `single_turn` (the default) trains
only t*; with `suffix=SuffixOptions(...)` a cascade the single turn cannot stop is repaired over t*..t*+m.
`rows=RowOptions(...)` says what the training row holds after t* and where its loss goes (correction/rows.py)
and which corrections are kept (a localization is often wrong; an unchecked correction is a guess):
- `controlled` (the default): the chosen candidate gets `replays` DECISION replays with seeds the selection did not
  use (R..2R-1; the selector's replays are 0..R-1), and the CONTROL resamples the student's own turn t* from the
  same prefix with the same seeds. Kept only when the decision replays' mean score is above the control's. The
  failing rollout was drawn because it failed, so re-sampling from its prefix beats it often (regression to the
  mean), and the replays that picked the best of N candidates are biased upward: neither decides here.
- `improved` (the rule before, kept for comparison): the chosen candidate's mean replay score (the selection's)
  must exceed the failing rollout's own score; a selector that runs no replay (the judge) gets one replay for it.
- `any`: every chosen candidate is kept.
Refused: the record says `not_improved` and no row is written. Every record that reached the decision keeps its
decision and control scores, so the kept rate with and without the control can be reported
(`correction.records.kept_without_control`). Suffix mode compares its repaired suffix with the control's mean
(controlled) or the failing rollout's score (improved), on the replays that chose the suffix.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.prefix import prefix_of
from agents.records import ModelRole, Trajectory
from correction.locators.base import Locator
from correction.records import Candidate, Correction, Localization
from correction.rewrite import rewrite
from correction.roles import continuation, family_role
from correction.rows import LossOn, Suffix, corrected_trajectory
from correction.runner import RolloutFn
from correction.selectors.base import Selection, Selector
from correction.selectors.verifier_replay import REPLAY_TAG
from correction.suffix import suffix_repair
from harness.program import Harness

APPLY_TAG = "apply-candidate"
DECISION_TAG = "student-decision"
CONTROL_TAG = "student-control"
Keep = Literal["controlled", "improved", "any"]


class RowOptions(BaseModel):
    """The training row and the keep rule (correction/rows.py for `suffix` and `loss_on`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    suffix: Suffix = Field(default="none", description="After t*: none | replay (the student's continuation in the "
                           "chosen candidate's best replay) | original (the failing rollout's own turns).")
    loss_on: LossOn = Field(default="corrected", description="corrected (t* only) | all_student (t* and every "
                            "student turn kept; a suffix from a replay that did not pass carries no loss).")
    keep: Keep = Field(default="controlled", description="controlled: keep a correction only when its decision "
                       "replays beat the control (the student's own t* resampled, same seeds); improved: when the "
                       "chosen candidate's mean replay score exceeds the failing rollout's score; any: keep every "
                       "chosen candidate (module docstring).")
    student: ModelRole | None = Field(default=None, description="Runs the decision and control replays (keep "
                                      "'controlled') and a judge-chosen candidate's replay (keep 'improved').")
    replays: int = Field(default=2, ge=1, description="Decision replays and control replays each (keep 'controlled'): "
                         "seeds replays..2*replays-1, after the selector's 0..replays-1.")
    extra_turns: int = Field(default=30, ge=1, description="Turns that replay may add after the corrected turn.")


class SuffixOptions(BaseModel):
    """Mode `suffix`: who continues after the expert's turns, how far the suffix may reach, how many replays."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    student: ModelRole
    max_m: int = Field(default=4, ge=0)
    replays: int = Field(default=2, ge=1)


def _record(view: Trajectory, loc: Localization, expert: ModelRole, rows: RowOptions, **kw: object) -> Correction:
    kw.setdefault("suffix", rows.suffix)
    return Correction(source_trajectory_id=view.id, instance_id=view.instance.id, family=view.family,
                      harness_id=view.harness_id, student_model=view.model_id,
                      expert_model=family_role(expert, view.family).model, t_star=loc.t_star, locator=loc.locator,
                      category=loc.category, localization_rationale=loc.rationale, source_score=view.score,
                      keep=rows.keep, loss_on=rows.loss_on, **kw)  # type: ignore[arg-type]


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


def _mean(scores: list[float]) -> float:
    return sum(scores) / len(scores) if scores else 0.0


async def _controlled(view: Trajectory, harness: Harness, t_star: int, cand: Candidate | None, rows: RowOptions,
                      run: RolloutFn) -> tuple[list[Trajectory], list[Trajectory]]:
    """Keep 'controlled', in one batch: (the candidate's decision replays, [] without one; the control, the student's
    own turn t* resampled from the same prefix), seeds replays..2*replays-1 each, the same absolute turn limit."""
    assert rows.student is not None  # correct_one checked it
    base, seeds = prefix_of(view, t_star), range(rows.replays, 2 * rows.replays)
    jobs = [continuation(view, harness, rows.student, base, s, CONTROL_TAG, rows.extra_turns + 1) for s in seeds]
    if cand is not None:
        jobs += [continuation(view, harness, rows.student, base.then(cand.message), s, DECISION_TAG, rows.extra_turns)
                 for s in seeds]
    episodes = await run(jobs)
    return episodes[rows.replays:], episodes[:rows.replays]


async def _try_suffix(view: Trajectory, harness: Harness, loc: Localization, expert: ModelRole, run: RolloutFn,
                      suffix: SuffixOptions, single: float, rows: RowOptions,
                      control: list[float]) -> tuple[Correction, Trajectory] | None:
    """Suffix mode: the expert's turns t*..t*+m when they let the student do better than the single turn (and,
    under keep 'controlled', better than the control's mean; under 'improved', than the failing rollout)."""
    found = await suffix_repair(view, harness, loc.t_star or 0, expert, suffix.student, run, suffix.max_m,
                                suffix.replays)
    if found.chosen_m is None:
        return None
    m = found.chosen_m
    score = found.turns[m].mean_score
    floor = {"controlled": _mean(control), "improved": view.score}.get(rows.keep)
    if score <= single or (floor is not None and score <= floor):
        return None
    row = corrected_trajectory(view, loc.t_star or 0, max(found.episodes, key=lambda e: e.score), trained=m + 1,
                               suffix=rows.suffix, loss_on=rows.loss_on)
    corr = _record(view, loc, expert, rows, status="corrected", mode="suffix", candidates=found.turns,
                   chosen=m, selector="suffix_replay", rationale=found.rationale, corrected_trajectory_id=row.id,
                   fewer_candidates_reason=f"suffix mode: the single corrected turn scored {single:.2f}",
                   control_scores=control)
    return corr, row


async def _replay_once(view: Trajectory, harness: Harness, t_star: int, cand: Candidate, rows: RowOptions,
                       run: RolloutFn) -> list[Trajectory]:
    """One student continuation after a candidate a selector chose without replaying it (for keep 'improved')."""
    if rows.student is None:
        raise ValueError("keep 'improved' under a selector that runs no replay needs RowOptions.student")
    job = continuation(view, harness, rows.student, prefix_of(view, t_star).then(cand.message), 0, REPLAY_TAG,
                       rows.extra_turns)
    return await run([job])


async def _chosen_episodes(view: Trajectory, harness: Harness, t_star: int, sel: Selection, rows: RowOptions,
                           run: RolloutFn) -> tuple[Selection, list[Trajectory], str]:
    """The chosen candidate's episodes (the selector's replays, else one keep replay or its calls applied), the
    selection with any new replay score, and the suffix the row can take (with the reason when it fell back)."""
    if sel.episodes or rows.keep == "controlled":  # 'controlled': the decision replays come next
        return sel, sel.episodes, rows.suffix
    chosen = sel.candidates[sel.chosen or 0]
    suffix = rows.suffix if rows.suffix != "replay" else "none (replay requested; the selector ran no replay)"
    if rows.keep != "improved":
        return sel, await _apply(view, harness, t_star, chosen, run), suffix
    episodes = await _replay_once(view, harness, t_star, chosen, rows, run)
    scored = chosen.model_copy(update={"replay_scores": [e.score for e in episodes]})
    cands = [scored if i == sel.chosen else c for i, c in enumerate(sel.candidates)]
    return sel.model_copy(update={"candidates": cands}), episodes, suffix


def _refusal(view: Trajectory, chosen: Candidate, why: str, keep: Keep, decision: list[float],
             control: list[float]) -> str:
    """Why the keep rule refuses the chosen candidate ('' when it keeps it)."""
    if keep == "controlled" and not _mean(decision) > _mean(control):
        return (f"the chosen candidate's decision replays scored {_mean(decision):.2f} on average, not above the "
                f"control's {_mean(control):.2f} (the student's own turn {len(decision)}x resampled from the same "
                f"prefix, same seeds; {why})")
    if keep == "improved" and chosen.mean_score <= view.score:
        return (f"the chosen candidate's replays scored {chosen.mean_score:.2f} on average, not above the failing "
                f"rollout's {view.score:.2f} ({why})")
    return ""


async def correct_one(view: Trajectory, harness: Harness, locator: Locator, selector: Selector, expert: ModelRole,
                      run: RolloutFn, n: int = 3, also: Selector | None = None,
                      suffix: SuffixOptions | None = None,
                      rows: RowOptions = RowOptions()) -> tuple[Correction, Trajectory | None]:
    """Correct one failing rollout (a view). Never raises for this rollout's trouble; see `Correction.status`.
    `also`: a second selector run on the same candidates for the record (its agreement with `selector`).
    `suffix`: mode `suffix` - when the chosen single turn does not let the student reach score 1.0 in its
    replays, try the expert's suffix t*..t*+m (correction/suffix.py) and keep it when it does better.
    `rows`: the row's suffix and loss, and the keep rule (module docstring)."""
    view = view.require_view("correct_one")
    if rows.keep == "controlled" and rows.student is None:
        raise ValueError("keep 'controlled' needs RowOptions.student (who runs the decision and control replays)")
    if view.harness_id != harness.id:
        raise ValueError(f"trajectory {view.id} ran under harness {view.harness_id}, not {harness.id}")
    loc = await locator.locate(view, harness, run)
    if loc.t_star is None:
        return _record(view, loc, expert, rows, status="not_localized", rationale=loc.rationale), None
    cands, reason = await rewrite(view, harness, loc.t_star, expert, run, n=n)
    if not cands:
        return _record(view, loc, expert, rows, status="no_candidate", fewer_candidates_reason=reason,
                       rationale="the expert wrote no candidate other than the student's own action"), None
    sel, agree = await _both(view, harness, loc.t_star, cands, selector, also, run)
    single = sel.candidates[sel.chosen].mean_score if sel.chosen is not None else 0.0
    wants_suffix = suffix is not None and (sel.chosen is None or single < 1.0)
    picked = sel.candidates[sel.chosen] if sel.chosen is not None else None
    decided, controls = await _controlled(view, harness, loc.t_star, picked, rows, run) \
        if rows.keep == "controlled" and (picked is not None or wants_suffix) else ([], [])
    control = [e.score for e in controls]
    if wants_suffix:
        repaired = await _try_suffix(view, harness, loc, expert, run, suffix, single, rows, control)
        if repaired is not None:
            return repaired
    base = dict(fewer_candidates_reason=reason, selector=selector.name, judge_agreement=agree)
    if sel.chosen is None:
        return _record(view, loc, expert, rows, status="no_candidate", rationale=sel.rationale,
                       candidates=sel.candidates, **base), None
    sel, episodes, used = await _chosen_episodes(view, harness, loc.t_star, sel, rows, run)
    base.update(candidates=sel.candidates, chosen=sel.chosen, suffix=used)
    chosen = sel.candidates[sel.chosen]
    decision = [e.score for e in decided]
    if rows.keep == "controlled":
        episodes = [*episodes, *decided]
        base.update(decision_scores=decision, control_scores=control)
    refused = _refusal(view, chosen, sel.rationale, rows.keep, decision, control)
    if refused:
        return _record(view, loc, expert, rows, status="not_improved", rationale=refused, **base), None
    usable = [e for e in episodes if e.stop_reason != "replay_divergence" and len(e.turns) > loc.t_star]
    if not usable:
        return _record(view, loc, expert, rows, status="replay_failed",
                       rationale=f"no replay of the chosen candidate holds turn {loc.t_star}", **base), None
    best = max(usable, key=lambda e: e.score)
    row = corrected_trajectory(view, loc.t_star, best, suffix=used if used in ("replay", "original") else "none",
                               loss_on=rows.loss_on)
    corr = _record(view, loc, expert, rows, status="corrected", rationale=f"{chosen.rationale} ({sel.rationale})",
                   corrected_trajectory_id=row.id, **base)
    return corr, row
