"""The correction row as the paper builds it (what follows t*, where the loss goes), the keep rules (with the
control: the student's own turn resampled from the same prefix), the dedup of the arm's rows, and the LLM
expert's brief, on SIMULATED failing rollouts (`flawed/<family>@uniform_single`, one fault each) with real
environments and the real rollout runtime. The scripted models stand in for an external model."""

from __future__ import annotations

import asyncio
import json
import random
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


async def _correct(view, tmp_path: Path, rows: RowOptions, student: ModelRole | None = None, replays: int = 1,
                   run=None):
    run = run or CachedRollouts(local_rollouts(2), tmp_path / "cache")
    student = student or ModelRole(model=STUDENT)
    selector = make_selector("verifier_replay", student=student, replays=replays)
    rows = rows if rows.student is not None else rows.model_copy(update={"student": student, "replays": replays})
    return await correct_one(view, baseline(view.family), make_locator("counterfactual"), selector, EXPERT, run,
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
    # keep 'improved': the student's own resample finishes this one too (the control refuses it: the next test)
    corr, row = await _correct(view, tmp_path, RowOptions(suffix="replay", loss_on="all_student", keep="improved"))
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


class Recorded:
    """The rollout function the pipeline is given, with every job it was asked to run written down (tag, seed,
    assistant turns in the prefix)."""

    def __init__(self, tmp_path: Path) -> None:
        self.inner, self.jobs = CachedRollouts(local_rollouts(2), tmp_path / "cache"), []

    async def __call__(self, jobs):
        self.jobs += [(j.tag, j.seed, sum(m.get("role") == "assistant" for m in j.prefix.messages) if j.prefix else 0)
                      for j in jobs]
        return await self.inner(jobs)


async def test_keep_controlled_refuses_what_the_students_own_resample_also_does(failing, tmp_path):
    """stock_alert/40: the student, resampled from the failing rollout's prefix, finishes the task itself (the failure
    was a draw), so the correction beats the failing rollout (the rule before keeps it) but not the control."""
    from correction.pipeline import CONTROL_TAG, DECISION_TAG
    from correction.records import kept_rate, kept_without_control
    from correction.selectors.verifier_replay import REPLAY_TAG

    view, run = failing.view(), Recorded(tmp_path)
    corr, row = await _correct(view, tmp_path, RowOptions(keep="controlled"), replays=2, run=run)
    assert corr.status == "not_improved" and row is None and "not above the control's" in corr.rationale
    assert corr.control_scores == [1.0, 1.0] and corr.decision_scores == [1.0, 1.0]
    assert kept_without_control(corr) is True and kept_rate([corr]) == {
        "decided": 1, "kept": 0, "kept_without_control": 1, "rule": ["controlled"]}
    seeds = {tag: sorted({s for t, s, _ in run.jobs if t == tag}) for tag in (REPLAY_TAG, DECISION_TAG, CONTROL_TAG)}
    assert seeds == {REPLAY_TAG: [0, 1], DECISION_TAG: [2, 3], CONTROL_TAG: [2, 3]}  # decided on fresh seeds
    prefix = {tag: {n for t, _, n in run.jobs if t == tag} for tag in (DECISION_TAG, CONTROL_TAG)}
    assert prefix == {DECISION_TAG: {corr.t_star + 1}, CONTROL_TAG: {corr.t_star}}  # the control resamples t*
    before, _ = await _correct(view, tmp_path, RowOptions(keep="improved"), replays=2)
    assert before.status == "corrected"  # the rule before keeps it: regression to the mean


async def test_keep_controlled_keeps_a_correction_that_beats_the_students_own_resample(tmp_path):
    """payroll_audit/40: the student resampled from the prefix does worse than with the expert's turn."""
    source = await student_rollout("payroll_audit", 40, 0)
    corr, row = await _correct(source.view(), tmp_path, RowOptions(keep="controlled"), replays=2)
    assert corr.status == "corrected" and row is not None
    assert sum(corr.decision_scores) > sum(corr.control_scores) and len(corr.control_scores) == 2


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


async def test_own_successes_count_once_per_way_of_acting_and_text_only_corrections_by_their_text(failing, tmp_path):
    from correction.arm_set import correction_arm_items
    from correction.mix import MixConfig, mix, pass_rates

    view = failing.view()
    corr, row = await _correct(view, tmp_path, RowOptions(keep="any"))
    passed = failing.verdict.model_copy(update={"score": 1.0})
    twins = [failing.model_copy(update={"id": f"own-{k}", "seed": k, "verdict": passed}) for k in range(3)]
    last = twins[0].turns[-1].model_copy(update={"assistant": {"role": "assistant", "content": "Another answer."}})
    other = twins[0].model_copy(update={"id": "own-other", "turns": [*twins[0].turns[:-1], last]})  # acts otherwise
    items = correction_arm_items([corr], [row], [*twins, other])
    mixed = mix(items, pass_rates(twins), MixConfig(corrections=10, self_successes=10), random.Random(0))
    assert mixed.card.taken["self_success"] == 2 and mixed.card.duplicates["self_success"] == 2
    # two text-only corrections of one turn: kept apart by their text (with no call, they shared one key before)
    chosen = corr.candidates[corr.chosen]
    texts = [corr.model_copy(update={"corrected_trajectory_id": f"r{k}", "candidates": [chosen.model_copy(update={
        "message": {"role": "assistant", "content": text}})], "chosen": 0}) for k, text in enumerate(["A.", "B."])]
    rows = [row.model_copy(update={"id": f"r{k}"}) for k in range(2)]
    keys = [i.dedup_key for i in correction_arm_items(texts, rows, [])]
    assert len(keys) == 2 and keys[0] != keys[1] and keys[0][:2] == keys[1][:2]


async def test_a_corrections_table_written_before_the_control_still_reads(failing, tmp_path):
    import polars as pl

    from correction.records import read_corrections, write_corrections

    corr, _ = await _correct(failing.view(), tmp_path, RowOptions(keep="improved"))
    path = write_corrections(tmp_path / "new.parquet", [corr])
    pl.read_parquet(path).drop("decision_scores", "control_scores").write_parquet(tmp_path / "old.parquet")
    (old,) = read_corrections(tmp_path / "old.parquet")
    assert old == corr and old.decision_scores == [] and old.control_scores == []
