"""Expert rewrite, verifier_replay selection and the training row, on a SIMULATED failing rollout
(`flawed/stock_alert@uniform_single`, one wrong_columns fault) with real environments and the real rollout
runtime: the selector picks the candidate the student can carry to success, and the corrected row trains only t*."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from correction_helpers import STUDENT, student_rollout

from agents.records import ModelRole
from correction.locators import make_locator
from correction.pipeline import RowOptions, correct_one
from correction.records import Candidate, read_corrections, write_corrections
from correction.rewrite import rewrite
from correction.runner import CachedRollouts, local_rollouts
from correction.selectors import make_selector
from harness import baseline
from training.dataset import build_dataset, load_tokenizer
from training.render import IGNORE

EXPERT = ModelRole(model="flawed/{family}@expert")


@pytest.fixture(scope="module")
def failing():
    t = asyncio.run(student_rollout("stock_alert", 40, 0))
    assert not t.passed and len(t.injected_faults) == 1
    return t


def trained_runs(tok, ids: list[int], labels: list[int]) -> list[str]:
    runs, cur = [], []
    for i, lab in zip(ids, labels, strict=True):
        if lab != IGNORE:
            assert lab == i
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return [tok.decode(r) for r in [*runs, *([cur] if cur else [])]]


async def test_verifier_replay_picks_the_candidate_that_succeeds(failing, tmp_path):
    view, h = failing.view(), baseline("stock_alert")
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")
    loc = await make_locator("counterfactual").locate(view, h, run)
    cands, reason = await rewrite(view, h, loc.t_star, EXPERT, run, n=3)
    assert cands and all(c.rationale and c.message.get("tool_calls") for c in cands)
    assert len(cands) == 3 or reason  # fewer distinct candidates come with the reason
    # the student's own t* action (it fails) first, the expert's candidate second
    own = Candidate(message=view.turns[loc.t_star].assistant, rationale="the student's action", seed=-1)
    selector = make_selector("verifier_replay", student=ModelRole(model=STUDENT), replays=2)
    sel = await selector.select(view, h, loc.t_star, [own, cands[0]], run)
    assert sel.candidates[0].mean_score < 1.0 and sel.candidates[1].replay_scores == [1.0, 1.0]
    assert sel.chosen == 1 and all(e.passed for e in sel.episodes)
    strict = make_selector("verifier_replay", student=ModelRole(model=STUDENT), replays=1, require_success=True)
    none = await strict.select(view, h, loc.t_star, [own], run)
    assert none.chosen is None or none.candidates[0].mean_score > 0


async def test_corrected_row_trains_only_the_corrected_turn(failing, tmp_path, tiny_model_dir: Path):
    view, h = failing.view(), baseline("stock_alert")
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")
    selector = make_selector("verifier_replay", student=ModelRole(model=STUDENT), replays=1)
    # keep 'improved': the student's own resample finishes this one too, so the control would refuse it
    corr, row = await correct_one(view, h, make_locator("counterfactual"), selector, EXPERT, run,
                                  rows=RowOptions(keep="improved"))
    assert corr.status == "corrected" and row is not None and row.id == corr.corrected_trajectory_id
    t = corr.t_star
    # the student's own prefix is untouched (messages and turn records, token ids included)
    assert row.turns[:t] == view.turns[:t] and row.messages[:len(row.messages) - 2] == view.messages[:len(row.messages) - 2]
    assert len(row.turns) == t + 1 and row.turns[t].assistant == corr.candidates[corr.chosen].message
    assert write_corrections(tmp_path / "c.parquet", [corr]) and read_corrections(tmp_path / "c.parquet") == [corr]
    tok = load_tokenizer(tiny_model_dir)
    built = build_dataset([row], tok, mask="turns")
    ex = built.examples[0]
    runs = trained_runs(tok, ex.input_ids, ex.labels)
    assert len(runs) == 1 and built.manifest.sources[0].trained_turns == [t]
    call = corr.candidates[corr.chosen].message["tool_calls"][0]["function"]
    assert call["name"] in runs[0] and json.dumps(json.loads(call["arguments"])) in runs[0]
    for earlier in view.turns[:t]:  # every student turn is context only
        for c in earlier.tool_calls:
            assert c.name not in runs[0] or c.name == call["name"]
    assert runs[0].endswith("<|im_end|>") and runs[0].count("<tool_call>") == 1
