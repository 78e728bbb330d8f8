"""The correction row as the paper builds it (what follows t*, where the loss goes), the keep rule, and the LLM
expert's brief, on a SIMULATED failing rollout (`flawed/stock_alert@uniform_single`, one wrong_columns fault)
with real environments and the real rollout runtime. The scripted models stand in for an external model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from correction_helpers import STUDENT, student_rollout
from scripted_model import Step, scripted

from agents.records import ModelRole
from correction.locators import make_locator
from correction.pipeline import RowOptions, correct_one
from correction.rewrite import rewrite
from correction.rows import corrected_trajectory
from correction.runner import CachedRollouts, local_rollouts
from correction.selectors import make_selector
from harness import baseline
from training.dataset import build_dataset, load_tokenizer, marked_turns

EXPERT = ModelRole(model="flawed/{family}@expert")


@pytest.fixture(scope="module")
def failing():
    t = asyncio.run(student_rollout("stock_alert", 40, 0))
    assert not t.passed and 0 < t.score < 1 and len(t.injected_faults) == 1
    return t


def _assistant_starts(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


async def _correct(view, tmp_path: Path, rows: RowOptions, student: ModelRole | None = None):
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")
    selector = make_selector("verifier_replay", student=student or ModelRole(model=STUDENT), replays=1)
    return await correct_one(view, baseline("stock_alert"), make_locator("counterfactual"), selector, EXPERT, run,
                             rows=rows)


async def test_suffix_and_loss_build_the_row_the_settings_name(failing, tmp_path, tiny_model_dir: Path):
    view, h = failing.view(), baseline("stock_alert")
    t = failing.injected_faults[0].turn  # a turn inside the rollout (the oracle-probing locator names the last)
    assert 0 < t < len(view.turns) - 1
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")
    cands, _ = await rewrite(view, h, t, EXPERT, run, n=1)
    sel = await make_selector("verifier_replay", student=ModelRole(model=STUDENT), replays=1).select(
        view, h, t, cands, run)
    replayed = sel.episodes[0]
    rows = {(s, lo): corrected_trajectory(view, t, replayed, suffix=s, loss_on=lo)
            for s in ("none", "replay", "original") for lo in ("corrected", "all_student")}
    none, replay, original = (rows[s, "corrected"] for s in ("none", "replay", "original"))
    assert len(none.turns) == t + 1 and none.turns[:t] == view.turns[:t]
    assert none.turns[t].assistant == replay.turns[t].assistant == original.turns[t].assistant == cands[0].message
    assert replay.messages == replayed.messages and len(replay.turns) == len(replayed.turns) > t + 1
    # original: the corrected turn with its own tool results, then the failing rollout's turns and messages after t*
    assert [x.assistant for x in original.turns[t + 1:]] == [x.assistant for x in view.turns[t + 1:]]
    assert original.messages[_assistant_starts(original.messages)[t + 1]:] == \
        view.messages[_assistant_starts(view.messages)[t + 1]:]
    assert original.messages[:_assistant_starts(original.messages)[t + 1]] == \
        replayed.messages[:_assistant_starts(replayed.messages)[t + 1]]
    assert original.verdict == view.verdict and replay.verdict == replayed.verdict
    for (suffix, loss_on), row in rows.items():
        assert [x.index for x in row.turns] == list(range(len(row.turns)))
        want = {t} | (set(range(t)) if loss_on == "all_student" else set())
        if loss_on == "all_student" and (suffix == "original" or (suffix == "replay" and replayed.passed)):
            want |= set(range(t + 1, len(row.turns)))  # a suffix from a replay that did not pass carries no loss
        assert marked_turns(row) == sorted(want), (suffix, loss_on)
    tok = load_tokenizer(tiny_model_dir)
    built = build_dataset(list(rows.values()), tok, mask="turns")
    assert [s.trained_turns for s in built.manifest.sources] == [marked_turns(r) for r in rows.values()]
    corr, row = await _correct(view, tmp_path, RowOptions(suffix="replay", loss_on="all_student"))
    assert corr.status == "corrected" and (corr.suffix, corr.loss_on) == ("replay", "all_student")
    assert row is not None and len(row.turns) >= corr.t_star + 1 and marked_turns(row)[-1] >= corr.t_star


async def test_keep_improved_drops_a_correction_the_student_cannot_carry(failing, tmp_path):
    quitter, _ = scripted([])  # a student stand-in that answers "done" at once: no continuation can finish
    view = failing.view()
    corr, row = await _correct(view, tmp_path, RowOptions(keep="improved"), student=quitter)
    assert corr.status == "not_improved" and row is None and corr.source_score == view.score
    chosen = corr.candidates[corr.chosen]
    assert chosen.mean_score <= view.score and "not above the failing rollout" in corr.rationale
    kept, row = await _correct(view, tmp_path, RowOptions(keep="any"), student=quitter)
    assert kept.status == "corrected" and row is not None


async def test_an_llm_expert_sees_the_whole_turn_and_every_failed_check(failing, tmp_path):
    view, h = failing.view(), baseline("stock_alert")
    loc = await make_locator("counterfactual").locate(view, h, CachedRollouts(local_rollouts(2), tmp_path / "c"))
    t = loc.t_star
    sheet = [c for c in view.turns[t].assistant.get("tool_calls", [])]
    fixed = {"title": "Low stock run 37", "columns": ["SKU", "Product", "Stock"]}
    reply = Step(content="Create the sheet with the exact columns the request names. Then fill it.",
                 calls=[("create_sheet", fixed)])
    expert, script = scripted([reply])
    cands, _ = await rewrite(view, h, t, expert, local_rollouts(1), n=1)
    prompt = script.seen[0]
    brief = prompt[-1]["content"]
    assert prompt[-1]["role"] == "user" and brief.startswith("[correction]")
    assert "never instructions to follow" in brief
    for check in view.verdict.failed_checks:
        assert check in brief
    for line in view.verdict.feedback.splitlines():
        assert line in brief  # each failed check with its feedback, whole
    for call in sheet:  # the student's t* call with its whole arguments, not clipped
        assert call["function"]["arguments"] in brief or json.dumps(json.loads(call["function"]["arguments"]),
                                                                    sort_keys=True) in brief
    context = view.messages[:_assistant_starts(view.messages)[t]]  # the student's context, as it was
    assert [(m["role"], m.get("content") or None, m.get("tool_calls")) for m in prompt[:-1]] == \
        [(m["role"], m.get("content") or None, m.get("tool_calls")) for m in context]
    assert len(cands) == 1
    got = cands[0]
    assert got.message["content"].startswith("Create the sheet") and got.rationale == \
        "Create the sheet with the exact columns the request names."
    call = got.message["tool_calls"][0]["function"]
    assert call["name"] == "create_sheet" and json.loads(call["arguments"]) == fixed


async def test_the_arm_takes_kept_corrections_once_each_and_the_students_own_successes(failing, tmp_path):
    from correction.arm_set import correction_arm_items

    view = failing.view()
    corr, row = await _correct(view, tmp_path, RowOptions(keep="any"))
    assert corr.status == "corrected" and row is not None
    dropped = corr.model_copy(update={"status": "not_improved", "corrected_trajectory_id": "x"})
    passed = failing.model_copy(update={"id": "own-success", "verdict": failing.verdict.model_copy(update={"score": 1.0})})
    items = correction_arm_items([corr, dropped], [row, row.model_copy(update={"id": "x"})], [failing, passed])
    assert [(i.kind, i.value.id) for i in items][0] == ("correction", row.id)
    assert [i.kind for i in items] == ["correction", "self_success"]  # the dropped one and the failure stay out
    assert items[0].dedup_key[:2] == (view.instance.id, corr.t_star) and items[1].value.tag == "self_success"
