"""Suffix repair on a SIMULATED cascade: a student that finishes at its first chance (`flawed/...@none+
finish_early=1`) cannot carry one corrected turn to success after a skipped thread, so mode `suffix` trains the
expert's turns t*..t*+m, the shortest suffix after which that student succeeds (real environments and runtime)."""

from __future__ import annotations

import asyncio

from correction_helpers import student_rollout

from agents.records import ModelRole
from correction.locators import make_locator
from correction.pipeline import RowOptions, SuffixOptions, correct_one
from correction.runner import CachedRollouts, local_rollouts
from correction.selectors import make_selector
from harness import baseline
from training.dataset import marked_turns


def test_suffix_mode_trains_the_shortest_expert_suffix_the_student_completes(tmp_path):
    t = asyncio.run(student_rollout("budget_approval", 40, 0))
    assert not t.passed and [f.kind for f in t.injected_faults] == ["skip_thread"]
    lazy = ModelRole(model="flawed/{family}@none+finish_early=1")
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")

    async def go(suffix, rows=RowOptions(keep="improved")):
        return await correct_one(t.view(), baseline("budget_approval"), make_locator("counterfactual"),
                                 make_selector("verifier_replay", student=lazy, replays=1),
                                 ModelRole(model="flawed/{family}@expert"), run, suffix=suffix, rows=rows)

    single, _ = asyncio.run(go(None))
    assert single.mode == "single_turn" and single.candidates[single.chosen].mean_score < 1.0
    corr, row = asyncio.run(go(SuffixOptions(student=lazy, max_m=8, replays=1)))
    assert corr.mode == "suffix" and corr.status == "corrected" and corr.chosen is not None and corr.chosen >= 1
    m = corr.chosen
    assert corr.candidates[m].replay_scores == [1.0] and all(c.mean_score < 1.0 for c in corr.candidates[:m])
    assert marked_turns(row) == list(range(corr.t_star, corr.t_star + m + 1)) and len(row.turns) == corr.t_star + m + 1
    assert row.turns[:corr.t_star] == t.view().turns[:corr.t_star]
    # keep 'controlled': the suffix must beat the student's own turn resampled from the same prefix (it does)
    ctl, _ = asyncio.run(go(SuffixOptions(student=lazy, max_m=8, replays=1),
                            RowOptions(keep="controlled", student=lazy, replays=1)))
    assert ctl.mode == "suffix" and ctl.status == "corrected" and ctl.chosen == m
    assert len(ctl.control_scores) == 1 and ctl.control_scores[0] < ctl.candidates[m].mean_score
