"""The harness search's pure parts: typed edits through YAML and the hash, the library reflector's determinism,
the knowledge cards, the resumable GEPA strategies, the result cache and the llm reflector's answer parsing.

No model, no Ray: the records here are data (a reflective dataset written out by hand, as a reflector
receives it), and every harness is a real family baseline.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tasks
from harness import Harness, apply_edits, baseline, parse_edit
from harness.edits import EditError, SetToolExamples
from harness.evolution import (CachedEvaluator, EvalItem, ResultCache, cache_key, items_for, load_card, make_reflector,
                              parse_strategy, section_id, stated_keys)
from harness.evolution.adapter import decode, encode
from harness.evolution.cards import card_families
from harness.evolution.records import (CallSummary, EvolutionCandidate, ProposalBudget, ProposedEdit, ReflectiveDataset,
                                       RolloutResult, TriggerEvent, apply_proposed)
from harness.evolution.reflectors.library import draw
from harness.evolution.reflectors.library_rules import suggestions
from harness.evolution.reflectors.llm import LlmReflector, answer_schema, extract_json, parse_answer
from harness.evolution.sampling import CONSTANT_FAIL, CONSTANT_PASS, UNSEEN, VARIED, EpochSampler, InformativeSampler

FAMILY = "payroll_audit"


def _result(i: int, passed: bool, **kw: object) -> RolloutResult:
    base = dict(key=f"k{i}", harness_id="h", instance_id=f"{FAMILY}/{i}", seed=0, score=1.0 if passed else 0.2,
                passed=passed, stop_reason="submitted")
    return RolloutResult.model_validate({**base, **kw})


def _evidence(h: Harness) -> ReflectiveDataset:
    """A minibatch showing several kinds of evidence: a blocking hook, a loop, tool errors, failed checks."""
    loop = [CallSummary(turn=t, name="read_file", arguments='{"path": "policy.md"}') for t in range(4)]
    errors = [CallSummary(turn=4 + t, name="read_spreadsheet", arguments='{"path": "x.xlsx"}', is_error=True)
              for t in range(3)]
    good = [CallSummary(turn=1, name="read_spreadsheet", arguments='{"path": "attendance_week2.xlsx"}')]
    blocked = [CallSummary(turn=2, name="write_file", arguments='{"path": "audit.csv"}', is_error=True, blocked=True)]
    block_trigger = [TriggerEvent(component="hook:no-writes", turn=2, kind="hook", detail="before_tool_call->block")]
    return ReflectiveDataset(family=FAMILY, harness_id=h.id, records=[
        _result(0, False, failed_checks=["overtime_hours", "gross_pay"], calls=loop + errors),
        _result(1, False, failed_checks=["audit_file_readable", "late_arrivals"], calls=blocked, triggers=block_trigger),
        _result(2, True, calls=good),
    ])


def _broken() -> Harness:
    return apply_edits(baseline(FAMILY), [{"op": "add_hook", "hook": {
        "id": "no-writes", "when": {"on": "before_tool_call", "tool": "write_file"},
        "then": {"do": "block", "message": "writing is disabled"}}}])


def test_edits_round_trip_through_yaml_json_and_the_hash(tmp_path: Path) -> None:
    h = _broken()
    ds = _evidence(h)
    pool = suggestions(h, ds, load_card(FAMILY))
    assert {s.rule for s in pool} >= {"harmful_hooks", "loop_guard", "tool_error_guard", "tool_examples", "knowledge"}
    edits = [ProposedEdit(edit=s.edit, rationale=s.rationale) for s in pool]
    h1, applied, rejected = apply_proposed(h, edits)
    assert rejected == [] and len(applied) == len(edits) and h1.id != h.id
    # the harness: YAML and JSON give back the same content and id; the candidate encoding too
    for suffix in (".yaml", ".json"):
        assert Harness.load(h1.dump(tmp_path / f"h1{suffix}")).id == h1.id
    assert decode(encode(h1)) == h1
    # the edits: JSON text -> the same typed edits -> the same harness
    texts = [pe.model_dump_json() for pe in applied]
    again = [ProposedEdit.model_validate_json(t) for t in texts]
    assert again == applied and apply_edits(h, [pe.edit for pe in again]).id == h1.id
    # and as a lineage record
    cand = EvolutionCandidate(search_seed=0, iteration=1, harness_id=h1.id, parent_id=h.id, edits=applied, accepted=True)
    assert EvolutionCandidate.model_validate_json(cand.model_dump_json()) == cand
    # set_tool_examples, the added kind, parses from untrusted JSON and round-trips
    e = parse_edit(json.dumps({"op": "set_tool_examples", "tool": "read_file", "examples": [{"path": "policy.md"}]}))
    assert isinstance(e, SetToolExamples)
    h2 = apply_edits(baseline(FAMILY), [e])
    assert "Example arguments" not in h2.to_yaml() and h2.tools.examples == {"read_file": [{"path": "policy.md"}]}
    with pytest.raises(EditError, match="no examples to clear"):
        apply_edits(baseline(FAMILY), [{"op": "set_tool_examples", "tool": "read_file", "examples": []}])


def test_invalid_and_noop_edits_are_rejected_with_their_error() -> None:
    h = baseline(FAMILY)
    edits = [ProposedEdit(edit=parse_edit({"op": "remove_hook", "id": "nope"}), rationale="r"),
             ProposedEdit(edit=parse_edit({"op": "set_section", "id": "role", "text": h.sections[0].text}), rationale="r"),
             ProposedEdit(edit=parse_edit({"op": "expose_tool", "tool": "calculator"}), rationale="r")]
    out, applied, rejected = apply_proposed(h, edits)
    assert [pe.edit.op for pe in applied] == ["expose_tool"] and out.tools.helpers == ["calculator"]
    assert [r.error for r in rejected] == ["no hook 'nope' to remove", "the edit changes nothing"]


def test_library_reflector_is_deterministic_by_seed_and_its_edits_apply() -> None:
    h = _broken()
    ds = _evidence(h)
    reflector = make_reflector("library", FAMILY)
    budget = ProposalBudget(max_edits=2)
    runs = {seed: reflector.propose(h, ds, budget, random.Random(seed)) for seed in range(12)}
    again = {seed: reflector.propose(h, ds, budget, random.Random(seed)) for seed in range(12)}
    assert runs == again
    distinct = {tuple(pe.model_dump_json() for pe in p.edits) for p in runs.values()}
    assert len(distinct) >= 3  # seeds explore different edits
    for p in runs.values():
        assert len(p.edits) == 2 and p.cost_usd == 0.0
        assert len({pe.edit.model_dump_json() for pe in p.edits}) == 2
        _, applied, rejected = apply_proposed(h, list(p.edits))
        assert rejected == [] and len(applied) == 2
    # removing the hook that blocked the output is the edit proposed most often
    counts = Counter(pe.edit.model_dump_json() for p in runs.values() for pe in p.edits)
    assert json.loads(counts.most_common(1)[0][0]) == {"op": "remove_hook", "id": "no-writes"}
    # no failure, no proposal
    passed = ReflectiveDataset(family=FAMILY, harness_id=h.id, records=[_result(9, True)])
    assert reflector.propose(h, passed, budget, random.Random(0)).edits == []


def test_weighted_draw_keeps_one_edit_per_component() -> None:
    h = _broken()
    pool = suggestions(h, _evidence(h), load_card(FAMILY))
    picked = draw(pool + pool, 50, random.Random(3))
    assert len({s.target for s in picked}) == len(picked) == len({s.target for s in pool})


def test_every_family_has_a_card_whose_sections_insert_into_its_baseline() -> None:
    assert set(card_families()) == set(tasks.families())
    for fam in card_families():
        card = load_card(fam)
        assert card is not None and card.family == fam and card.items
        h0 = baseline(fam)
        for name in card.needed_tools:
            assert name in h0.tools.descriptions, f"{fam}: needed tool {name} is not an environment tool"
        edits = [{"op": "insert_section", "section": {"id": section_id(i.key), "kind": "domain_recipe",
                                                      "title": i.title, "text": i.text}} for i in card.items]
        h = apply_edits(h0, edits)
        assert stated_keys(h) == set(card.keys()) and stated_keys(h0) == set()
        with pytest.raises(KeyError, match="no knowledge item"):
            card.item("not_a_key")


def test_epoch_sampler_is_a_function_of_seed_and_iteration() -> None:
    class Loader:
        def all_ids(self) -> list[int]:
            return list(range(7))

    class State:
        def __init__(self, i: int) -> None:
            self.i = i

    a, b = EpochSampler(3, seed=5), EpochSampler(3, seed=5)
    seq_a = [a.next_minibatch_ids(Loader(), State(i)) for i in range(6)]
    seq_b = [b.next_minibatch_ids(Loader(), State(i)) for i in reversed(range(6))][::-1]  # any call order
    assert seq_a == seq_b
    first_epoch = [x for mb in seq_a[:3] for x in mb]  # 7 ids padded to 9
    assert set(first_epoch) == set(range(7)) and len(first_epoch) == 9
    assert [EpochSampler(3, seed=6).next_minibatch_ids(Loader(), State(i)) for i in range(6)] != seq_a


def test_informative_sampler_prefers_instances_whose_score_varied() -> None:
    from gepa.core.data_loader import ensure_loader

    a, b, c, d = tasks.instances("stock_alert", "train", 4)
    loader = ensure_loader(items_for([a, b, c, d], [0, 1]))  # ids 0-1: a, 2-3: b, 4-5: c, 6-7: d

    class State:  # the two fields of GEPAState the sampler reads
        def __init__(self, i: int) -> None:
            self.i = i
            self.full_program_trace = [
                {"i": 0, "tasks": [{"parent_idx": 0, "subsample_ids": [0, 2, 4],
                                    "subsample_scores": [0.0, 0.0, 1.0], "new_subsample_scores": [0.0, 0.0, 1.0]}]},
                {"i": 1, "tasks": [{"parent_idx": 0, "subsample_ids": [1, 3, 5], "subsample_scores": [1.0, 0.0, 1.0]}]},
            ]

    sampler = InformativeSampler(3, seed=2)
    weights = sampler.weights(loader, State(2))
    # a: 0, 0 (id 0) and 1 (id 1) -> varied; b: always 0; c: always 1; d: never run (a trace without scores
    # for a task, as GEPA leaves a skipped one, counts as unseen)
    assert weights == {0: VARIED, 1: VARIED, 2: CONSTANT_FAIL, 3: CONSTANT_FAIL, 4: CONSTANT_PASS, 5: CONSTANT_PASS,
                       6: UNSEEN, 7: UNSEEN}
    draws = [sampler.next_minibatch_ids(loader, State(i)) for i in range(2, 302)]
    assert all(len(set(mb)) == 3 for mb in draws)
    again = InformativeSampler(3, seed=2)  # a resumed search: same state, same iteration -> same minibatch
    assert [again.next_minibatch_ids(loader, State(i)) for i in range(2, 302)] == draws
    assert [InformativeSampler(3, seed=3).next_minibatch_ids(loader, State(i)) for i in range(2, 302)] != draws
    freq = Counter(x // 2 for mb in draws for x in mb)  # by instance
    assert freq[0] > freq[3] > freq[1] > freq[2], freq


def test_result_cache_survives_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    cache = ResultCache(path)
    r1, r2 = _result(1, False), _result(2, True)
    cache.put(r1)
    cache.put(r2)
    cache.put(r1)  # idempotent
    assert len(path.read_text().splitlines()) == 2
    with path.open("a") as f:
        f.write(_result(3, True).model_dump_json()[:40])  # a kill in the middle of a write
    again = ResultCache(path)
    assert again.keys() == {"k1", "k2"} and again.get("k2") == r2
    path.write_text("garbage\n" + r1.model_dump_json() + "\n")
    with pytest.raises(ValueError, match="cache.jsonl:1"):
        ResultCache(path)
    assert cache_key("h", "i", 0, "sig") != cache_key("h", "i", 1, "sig") == cache_key("h", "i", 1, "sig")


class _ScoreByIndex:
    """An `Evaluator` (the protocol the search injects): score 1.0 for even instance indices, after a short
    wait; it counts the items it was asked to run. Stands in for the rollout pool, which is outside the cache."""

    signature = "score-by-index"

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.lock = threading.Lock()
        self.started = threading.Event()

    def __call__(self, harness: Harness, items: Sequence[EvalItem], on_result: object = None) -> list[RolloutResult]:
        with self.lock:
            self.ran += [it.label for it in items]
        self.started.set()
        time.sleep(0.3)
        return [_result(0, it.instance.index % 2 == 0, key=cache_key(harness.id, it.instance.id, it.seed,
                                                                      self.signature), instance_id=it.instance.id)
                for it in items]


def test_cached_evaluator_shared_by_threads_runs_each_evaluation_once(tmp_path: Path) -> None:
    inner = _ScoreByIndex()
    ev = CachedEvaluator(inner, ResultCache(tmp_path / "cache.jsonl"))
    h = baseline(FAMILY)
    items = items_for(tasks.instances(FAMILY, "val", 4), [0])
    first = ThreadPoolExecutor(1).submit(ev, h, items[:3])
    assert inner.started.wait(10)  # items 0-2 are running in the other thread now
    second = ev(h, items[1:])  # 1 and 2 are waited for, 3 runs here
    assert sorted(inner.ran) == sorted(it.label for it in items)  # every evaluation ran once
    assert [r.passed for r in second] == [it.instance.index % 2 == 0 for it in items[1:]]
    assert [r.key for r in first.result()] == [r.key for r in ev(h, items[:3])]
    assert ev.misses == 4 and ev.hits == 2 + 3 and len(ev.cache) == 4


def test_llm_answers_are_parsed_into_typed_edits_or_rejected_with_the_reason() -> None:
    h = baseline(FAMILY)
    good = {"op": "insert_section", "section": {"id": "knowledge.overtime_per_day", "kind": "domain_recipe",
                                                "text": "Overtime is daily."}}
    text = "Here you go:\n```json\n" + json.dumps({"edits": [
        {"edit": good, "rationale": "overtime_hours failed"},
        {"edit": {"op": "remove_section", "id": "missing"}, "rationale": "x"},
        {"edit": {"op": "fly"}, "rationale": "x"}]}) + "\n```"
    edits, rejected = parse_answer(h, text)
    assert [pe.edit.op for pe in edits] == ["insert_section"]
    assert any("no section 'missing'" in r.error for r in rejected)
    assert any(r.error.startswith("invalid edit") for r in rejected)
    assert parse_answer(h, "\n\n\t")[1][0].error == "not a valid answer: the answer holds no JSON object"
    assert extract_json('noise {"edits": []} noise') == {"edits": []}
    schema = answer_schema()
    assert schema["required"] == ["edits"] and "SetToolExamples" in schema["$defs"]


def test_llm_reflector_prompt_fits_its_cap_after_the_data_blocks_escape_it() -> None:
    """Escaping `<`, `>` and `&` lengthens the evidence; the cap holds for what is sent (a tiny model's window)."""
    h = baseline(FAMILY)
    noisy = "<tool_call>{\"a\": \"x & y\"}</tool_call> " * 400
    dataset = ReflectiveDataset(family=FAMILY, harness_id=h.id, records=[
        _result(i, False, failed_checks=["gross_pay"], feedback=noisy, transcript=noisy, instruction=noisy)
        for i in range(4)])
    sizes = {}
    for cap in (4000, 16_000, 40_000):
        reflector = LlmReflector("m", complete=lambda m, s: None, max_prompt_chars=cap)  # type: ignore[arg-type,return-value]
        messages = reflector.messages(h, dataset, ProposalBudget(max_edits=2))
        sizes[cap] = sum(len(m["content"]) for m in messages)
        assert "&lt;tool_call&gt;" in messages[1]["content"]
    assert 15_000 <= sizes[16_000] <= 16_000 and sizes[16_000] < sizes[40_000] <= 40_000
    fixed = len(json.dumps(answer_schema(), separators=(",", ":"))) + 1000  # below the fixed part, 1,000 characters of evidence still go
    assert fixed < sizes[4000] <= fixed + 3000


def test_strategy_flags_follow_name_or_name_colon_model() -> None:
    assert parse_strategy("library") == ("library", None)
    assert parse_strategy("llm:hosted_vllm/tiny") == ("llm", "hosted_vllm/tiny")
    for bad, msg in (("llm", "needs a model"), ("gpt", "unknown reflector"), ("library:x", "takes no model")):
        with pytest.raises(ValueError, match=msg):
            parse_strategy(bad)
    with pytest.raises(ValueError, match="completion function"):
        make_reflector("llm:openai/gpt-4o", FAMILY)


def test_the_search_imports_without_heavy_dependencies() -> None:
    code = ("import sys, harness.evolution, harness.evolution.search; "
            "print(sorted(m for m in ('ray', 'torch', 'prefect', 'litellm', 'agents', 'flows') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
