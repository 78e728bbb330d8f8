"""A prompt section's `use_pattern`: hash-stable field, validated regex, and read end to end by the trigger scan
(real rollout runtime with a scripted model, real `analysis.triggers`), plus the knowledge card that sets one."""

from __future__ import annotations

import re

import pytest

from agents.rollout import run_episode
from analysis.triggers import trigger_rates, use_patterns_of
from harness import Harness, PromptSection, apply_edits, baseline
from harness.evolution import load_card, section_id
from harness.evolution.records import ReflectiveDataset, RolloutResult
from harness.evolution.reflectors.library_rules import suggestions
from scripted_model import Step, counter_env, scripted

def _h(pattern: str | None) -> Harness:
    return Harness(sections=[PromptSection(id="role", kind="role", text="You add numbers."),
                             PromptSection(id="recipe", kind="domain_recipe", text="Say 'total is N' when done.",
                                           use_pattern=pattern),
                             PromptSection(id="unused", text="Mention widgets.", use_pattern=r"widget")])

def test_use_pattern_is_hash_stable_and_a_bad_regex_names_the_field() -> None:
    plain = baseline("stock_alert")
    same = plain.model_copy(update={"sections": [s.model_copy(update={"use_pattern": None}) for s in plain.sections]})
    assert same.id == plain.id  # an unset pattern keeps the id of id version 1
    assert _h("total is [0-9]+").id != _h(None).id  # a set pattern is content
    assert Harness.model_validate_json(_h("total is [0-9]+").to_json()).sections[1].use_pattern == "total is [0-9]+"
    with pytest.raises(ValueError, match="use_pattern is not a valid regex"):
        PromptSection(id="x", text="t", use_pattern="(unclosed")

async def test_a_section_whose_pattern_matches_the_models_text_has_a_trigger_rate() -> None:
    h = _h(r"total is [0-9]+")
    role, _ = scripted([Step(calls=[("add", {"n": 5})]), Step(text="The total is 5.")])
    traj = await run_episode(role, h, counter_env(5), seed=0)
    assert traj.verdict.score == 1.0 and traj.stop_reason == "submitted"
    patterns = use_patterns_of(h)
    assert patterns == {"recipe": r"total is [0-9]+", "unused": "widget"}
    table = trigger_rates({"scripted@h": [traj]}, use_patterns={"counter": patterns},
                          components={"counter": ["section:recipe", "section:unused"]})
    rates = {r["component"]: r["rate"] for r in table.iter_rows(named=True)}
    assert rates == {"section:recipe": 1.0, "section:unused": 0.0}

async def test_a_pattern_over_tool_arguments_fires_on_the_call() -> None:
    h = _h(r'"n": *7\b')
    role, _ = scripted([Step(calls=[("add", {"n": 7})]), Step(text="7")])
    traj = await run_episode(role, h, counter_env(7), seed=0)
    table = trigger_rates({"p": [traj]}, use_patterns={"counter": use_patterns_of(h)})
    assert {r["component"]: r["fired"] for r in table.iter_rows(named=True)} == {"section:recipe": 1}

def test_the_knowledge_rule_carries_the_cards_use_pattern() -> None:
    item = load_card("stock_alert").item("read_every_page")
    assert item.use_pattern
    h0 = baseline("stock_alert")
    failing = RolloutResult(key="k", harness_id=h0.id, instance_id="stock_alert/0", seed=0, score=0.3, passed=False,
                            stop_reason="submitted", failed_checks=["sheet_rows_complete"])
    ds = ReflectiveDataset(family="stock_alert", harness_id=h0.id, records=[failing])
    edit = next(s.edit for s in suggestions(h0, ds, load_card("stock_alert")) if s.target == f"section:{section_id(item.key)}")
    h1 = apply_edits(h0, [edit])
    assert use_patterns_of(h1) == {section_id(item.key): item.use_pattern}

    assert re.search(item.use_pattern, '{"page": 2}') and not re.search(item.use_pattern, '{"page": 1}')
