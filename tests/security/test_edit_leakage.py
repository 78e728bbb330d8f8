"""Harness edits that memorise the data (harness/evolution/guard.py): the search refuses an edit that copies a
train or validation instance's payload or expected values, and logs what it copied.

- the guard refuses a section that pastes a train instance's expected sheet rows (stock_alert), naming the
  values and the instance; every family's own knowledge (its card's sections and required outputs) passes;
- a real search (oracle student on the Ray pool, a start harness whose hook blocks the alert emails) with a
  reflector double that pastes an instance's expected values into a section next to the real fix: the pasted
  edit is refused and logged in the proposal ledger with what it copied, the fix is applied, h* holds none of
  the values.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import tasks
from agents.pool.driver import RolloutPool
from agents.records import ModelRole
from agents.rollout import Limits
from flows.evolution_pool import PoolEvaluator
from flows.store import RunStore
from harness import Harness, apply_edits, baseline
from harness.edits import AddHook, InsertSection, RemoveHook
from harness.evolution import SearchConfig
from harness.evolution.cache import CachedEvaluator, ResultCache
from harness.evolution.cards import load_card, section_id
from harness.evolution.guard import EditGuard
from harness.evolution.proposer import read_ledger
from harness.evolution.protocols import items_for
from harness.evolution.records import Proposal, ProposalBudget, ProposedEdit, ReflectiveDataset
from harness.evolution.search import run_search
from harness.hooks import Hook, OnFinish, Require
from harness.program import PromptSection
from tasks.stock_alert.data import StockPayload, expected_row, low_stock

FAMILY = "stock_alert"


def _expected_rows(inst: tasks.TaskInstance) -> list[list[str]]:
    p = StockPayload.model_validate(inst.payload)
    return [expected_row(p, product) for product in low_stock(p)]


def _pasted_section(inst: tasks.TaskInstance) -> InsertSection:
    rows = "\n".join(", ".join(r) for r in _expected_rows(inst))
    return InsertSection(section=PromptSection(id="known_answers", kind="domain_recipe", title="Low-stock rows",
                                               text=f"Put exactly these rows in the sheet:\n{rows}"))


def test_the_guard_refuses_pasted_answers_and_passes_every_familys_own_knowledge() -> None:
    train, val = tasks.instances(FAMILY, "train", 4), tasks.instances(FAMILY, "val", 2)
    h0 = baseline(FAMILY)
    guard = EditGuard.for_search(h0, FAMILY, train + val)
    target = next(i for i in train if _expected_rows(i))
    reasons = guard.check(h0, _pasted_section(target))
    sku = _expected_rows(target)[0][0]
    assert any(f"copies the value '{sku.lower()}' of {target.id}" in r for r in reasons), reasons
    print(f"pasted section of {target.id}: {len(reasons)} reasons, e.g. {reasons[0]}")
    # the same words from a test instance (not in train or val) are not this search's data
    test_inst = next(i for i in tasks.instances(FAMILY, "test") if _expected_rows(i)
                     and not any(_expected_rows(i)[0][0] in json.dumps(t.payload) for t in train + val))
    assert not [r for r in guard.check(h0, _pasted_section(test_inst)) if test_inst.id in r]

    refused = 0
    for family in tasks.families():
        fam_h0 = baseline(family)
        g = EditGuard.for_search(fam_h0, family, tasks.instances(family, "train") + tasks.instances(family, "val"))
        card = load_card(family)
        edits = [InsertSection(section=PromptSection(id=section_id(it.key), kind="domain_recipe", title=it.title,
                                                     text=it.text)) for it in card.items]
        edits += [AddHook(hook=Hook(id=f"require-{o.id}", when=OnFinish(),
                                    then=Require(tool=o.tool, message=o.message))) for o in card.outputs]
        bad = {str(e): g.check(fam_h0, e) for e in edits}
        refused += sum(bool(v) for v in bad.values())
        assert not any(bad.values()), {k[:80]: v for k, v in bad.items() if v}
    assert refused == 0


class PastingReflector:
    """A test double for the paid reflection model: it pastes a train instance's expected rows into a section
    and proposes the real fix (remove the hook that blocks the emails) beside it."""

    name = "llm:paste-double"

    def __init__(self, instance: tasks.TaskInstance) -> None:
        self.instance = instance
        self.calls = 0

    def propose(self, harness: Harness, dataset: ReflectiveDataset, budget: ProposalBudget,
                rng: random.Random) -> Proposal:
        self.calls += 1
        edits = [ProposedEdit(edit=_pasted_section(self.instance), rationale="the rows the verifier expects")]
        if harness.hook("no-email") is not None:
            edits.append(ProposedEdit(edit=RemoveHook(id="no-email"), rationale="the hook blocked every email"))
        return Proposal(edits=edits)


@pytest.mark.slow
def test_a_search_refuses_and_logs_an_edit_that_pastes_expected_values(tmp_path: Path, ray_local: None) -> None:
    train = tasks.instances(FAMILY, "train", 2)
    val = tasks.instances(FAMILY, "val", 2)
    target = next(i for i in train if _expected_rows(i))
    start = apply_edits(baseline(FAMILY), [{"op": "add_hook", "hook": {
        "id": "no-email", "when": {"on": "before_tool_call", "tool": "send_email"},
        "then": {"do": "block", "message": "email is disabled"}}}])
    reflector = PastingReflector(target)
    store = RunStore(tmp_path / "runs", "leak")
    config = SearchConfig(family=FAMILY, seeds=1, minibatch_size=2, budget_rollouts=8, max_edits=2)
    with RolloutPool(2) as pool:
        inner = PoolEvaluator(pool, ModelRole(model=f"oracle/{FAMILY}"), Limits(max_turns=40, wall_s=120), store,
                              "evolve/leak")
        evaluator = CachedEvaluator(inner, ResultCache(tmp_path / "cache.jsonl"))
        result = run_search(start, items_for(train, [0]), items_for(val, [0]), evaluator, reflector, config,
                            tmp_path / "search")
    ledger = list(read_ledger(tmp_path / "search" / "seed0" / "proposals.jsonl").values())
    assert reflector.calls >= 1 and ledger
    refusals = [r.error for entry in ledger for r in entry.rejected if r.error.startswith("refused: ")]
    assert len(refusals) == reflector.calls  # every pasted section refused, each logged
    copied = {row[0].lower() for row in _expected_rows(target)}
    assert all(any(f"'{sku}' of {target.id}" in e for sku in copied) for e in refusals), refusals[0][:400]
    applied = [pe.edit for entry in ledger for pe in entry.edits]
    assert applied and all(isinstance(e, RemoveHook) for e in applied)  # the fix went through alone
    h_star = Harness.load(result.h_star_path)
    assert h_star.hook("no-email") is None and h_star.section("known_answers") is None
    assert not any(sku in h_star.to_yaml().lower() for sku in copied)
    summary = json.loads((tmp_path / "search" / "summary.json").read_text())
    assert summary["seeds"][0]["counts"].get("edits_refused", 0) >= 1  # (GEPA saves the counts before an iteration)
    print(f"proposals {reflector.calls}, pasted edits refused {len(refusals)}, e.g. {refusals[0][:200]}")
