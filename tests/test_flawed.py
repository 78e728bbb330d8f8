"""The flawed student `flawed/<family>@<profile>` on real environments through the real rollout runtime:
reproducible faults, every category on every family where it applies, ground truth kept out of the
pipeline's view, the zero-rate profile equal to the oracle, recovery after hook messages and tool errors
at the profile's rates, a knowledge section lowering its item's rate, context policies and the long-context
trigger. (A simulation: these tests check the simulator, not any model.)"""

from __future__ import annotations

import json

import pytest

import tasks
from agents.flawed.families import menu_for
from agents.flawed.profiles import load_profile
from agents.records import ModelRole, Trajectory
from agents.rollout import Limits, run_episode
from harness import Hook, PromptSection, baseline
from harness.context import ContextPolicy
from harness.program import Harness

BROWSER = {"website_admin", "browser_automation"}
CATEGORIES = ("tool_use", "instruction_following", "implicit_knowledge", "long_context", "planning")
# per category: the overrides that make it fire at its first opportunity (and nothing else)
FORCE = {
    "tool_use": "tool_use=1",
    "instruction_following": "instruction_following=1",
    "implicit_knowledge": "implicit_knowledge=1",
    "long_context": "long_context=1+requery=1+long_context_chars=0",
    "planning": "planning=1+skip_write=1",
}
# per family and category: an instance where the family has a fault of that category (docs/flawed.md lists
# the instances that have none); browser families on one or two instances, with a turn limit
WHERE = {
    "stock_alert": dict.fromkeys(CATEGORIES, 41),
    "budget_approval": dict.fromkeys(CATEGORIES, 41),
    "anomaly_detection": dict.fromkeys(CATEGORIES, 41),
    "payroll_audit": dict.fromkeys(CATEGORIES, 41),
    "code_refactor": {**dict.fromkeys(CATEGORIES, 41), "instruction_following": 43},
    "website_admin": {**dict.fromkeys(CATEGORIES, 40), "implicit_knowledge": 46, "long_context": 42},
    "browser_automation": {**dict.fromkeys(CATEGORIES, 40), "implicit_knowledge": 42},
}


async def run(model: str, family: str, index: int, seed: int = 0, h: Harness | None = None,
              limits: Limits = Limits(max_turns=40)) -> Trajectory:
    env = tasks.make_env(tasks.get(family).generate(index))
    try:
        return await run_episode(ModelRole(model=model), h or baseline(family), env, seed=seed, limits=limits)
    finally:
        env.close()


def calls(t: Trajectory) -> list[tuple[str, str]]:
    return [(c.name, c.arguments_json()) for turn in t.turns for c in turn.tool_calls]


def test_every_family_has_a_menu_with_its_exceptions_documented():
    for family in tasks.families():
        menu = menu_for(family)
        assert menu.family == family and menu.read_tools and menu.write_tools, family
        assert {b.category for b in menu.beliefs} | {s.category for s in menu.slips} >= {
            "instruction_following", "implicit_knowledge"}, family


def test_knowledge_keys_are_the_cards_keys():
    cards = pytest.importorskip("harness.evolution.cards", reason="the knowledge cards come with the harness search")
    for family in tasks.families():
        menu = menu_for(family)
        keys = {f.key for f in (*menu.beliefs, *menu.slips) if f.key is not None}
        assert keys <= set(cards.load_card(family).keys()), (family, keys - set(cards.load_card(family).keys()))


async def test_faults_are_reproducible_by_seed():
    model = "flawed/stock_alert@uniform"
    first = [await run(model, "stock_alert", 41, seed=s) for s in range(3)]
    again = [await run(model, "stock_alert", 41, seed=s) for s in range(3)]
    for a, b in zip(first, again, strict=True):
        assert a.injected_faults == b.injected_faults and calls(a) == calls(b) and a.verdict == b.verdict
    assert any(t.injected_faults for t in first)
    assert len({json.dumps([f.model_dump() for f in t.injected_faults]) for t in first}) > 1  # seeds differ


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f in BROWSER else f
                                    for f in tasks.families()])
async def test_every_category_injects_where_it_applies(family):
    limits = Limits(max_turns=14 if family in BROWSER else 40)
    for category in CATEGORIES:
        model = f"flawed/{family}@none+{FORCE[category]}+max_faults=1"
        t = await run(model, family, WHERE[family][category], limits=limits)
        assert [f.category for f in t.injected_faults] == [category], (category, t.injected_faults, t.error)
        fault = t.injected_faults[0]
        assert fault.kind and fault.detail and 0 <= fault.turn < len(t.turns)


async def test_ground_truth_never_reaches_the_pipelines_view():
    t = await run("flawed/payroll_audit@uniform", "payroll_audit", 41, seed=1)
    assert t.injected_faults
    with pytest.raises(ValueError, match="must not read injected-fault ground truth"):
        t.require_view("attribution")
    seen = t.view()
    assert seen.injected_faults == [] and seen.require_view("attribution") is seen
    text = seen.model_dump_json()
    assert all(f.detail not in text and f.kind not in text for f in t.injected_faults)
    assert all("provider_specific_fields" not in m for m in seen.messages)


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f in BROWSER else f
                                    for f in tasks.families()])
async def test_zero_rates_equal_the_oracle(family):
    for index in ([41] if family in BROWSER else [40, 41]):
        oracle = await run(f"oracle/{family}", family, index)
        flawed = await run(f"flawed/{family}@none", family, index)
        assert flawed.injected_faults == []
        assert calls(flawed) == calls(oracle)
        assert flawed.verdict.score == oracle.verdict.score == 1.0
        assert flawed.messages[-1] == oracle.messages[-1]  # the same final answer


def _require(tool: str) -> Harness:
    hook = Hook.model_validate({"id": f"require-{tool}", "when": {"on": "on_finish"},
                                "then": {"do": "require", "tool": tool,
                                         "message": f"Before finishing you must call {tool} successfully."}})
    return baseline("stock_alert").model_copy(update={"hooks": [hook]})


async def test_hook_feedback_is_followed_at_the_profiles_rate():
    p = load_profile("native").recovery.hook
    model = f"flawed/stock_alert@none+finish_early=1+max_faults=1+recovery.hook={p}"
    h, n, followed = _require("send_email"), 60, 0
    for seed in range(n):
        t = await run(model, "stock_alert", 40, seed=seed, h=h)
        fault = t.injected_faults[0]
        assert fault.kind == "finish_early"
        nxt = t.turns[fault.turn + 1]  # the turn right after the refused finish and its [harness] message
        followed += bool(nxt.tool_calls)
        if nxt.tool_calls:
            assert t.score == 1.0  # followed: it went on from the state and repaired everything
    assert abs(followed / n - p) < 0.2, (followed, n, p)
    # without the hook nothing refuses the early finish: it always fails
    t = await run(model, "stock_alert", 40, seed=0)
    assert t.stop_reason == "submitted" and t.score < 1.0


async def test_unexpected_tool_errors_resync_at_the_profiles_rate():
    p = load_profile("native").recovery.tool_error
    model = f"flawed/anomaly_detection@none+tool_use=1+max_faults=1+recovery.tool_error={p}"
    first = ("bucket_get", json.dumps({"key": "config/sensor_params.json"}))
    n, errors, retried = 60, 0, 0
    for seed in range(n):
        t = await run(model, "anomaly_detection", 40, seed=seed)
        fault = t.injected_faults[0]
        assert fault.category == "tool_use" and fault.turn == 0
        if not t.turns[0].tool_results[0].is_error:
            assert fault.kind == "adjacent_tool"  # bucket_list for bucket_get: nothing to notice
            continue
        errors += 1
        # re-synced: it sees the parameters were never read and reads them; else it goes on as if it had
        retried += calls(t)[1] == first
    assert errors >= n // 2 and abs(retried / errors - p) < 0.2, (retried, errors, p)


def _with_section(family: str, key: str) -> Harness:
    from harness.evolution.cards import load_card, section_id

    item = load_card(family).item(key)
    h = baseline(family)
    return h.model_copy(update={"sections": [*h.sections, PromptSection(
        id=section_id(key), kind="domain_recipe", title=item.title, text=item.text)]})


async def test_a_knowledge_section_lowers_its_items_rate():
    pytest.importorskip("harness.evolution.cards", reason="the knowledge cards come with the harness search")
    model = "flawed/stock_alert@none+implicit_knowledge=1+max_faults=1+stated_rate=0.1"
    stated = _with_section("stock_alert", "low_stock_at_or_below")
    plain = [await run(model, "stock_alert", 40, seed=s) for s in range(20)]
    told = [await run(model, "stock_alert", 40, seed=s, h=stated) for s in range(20)]

    def rate(ts: list[Trajectory], kind: str) -> float:
        return sum(any(f.kind == kind for f in t.injected_faults) for t in ts) / len(ts)
    assert rate(plain, "exclusive_bound") > 0.6 and rate(told, "exclusive_bound") <= 0.25
    # the other item (its key not stated) keeps its rate: with one fault allowed, it now takes the place
    assert rate(told, "supplier_id_as_name") > rate(plain, "supplier_id_as_name")


async def test_context_policy_changes_the_long_context_trigger_and_windows_are_followed():
    model = "flawed/stock_alert@none+long_context=1+requery=1+long_context_chars=6000+max_faults=1"
    full = await run(model, "stock_alert", 41)
    assert [f.category for f in full.injected_faults] == ["long_context"]
    window = baseline("stock_alert").model_copy(update={"context": ContextPolicy(keep_last_turns=2)})
    windowed = await run(model, "stock_alert", 41, h=window)
    assert windowed.injected_faults == [] and windowed.score == 1.0  # the view it gets stays short
    assert any(tr.kind == "context_window" for turn in windowed.turns for tr in turn.triggers)


async def test_bad_profile_is_a_clear_model_error():
    t = await run("flawed/stock_alert@uniform+no_such_knob=1", "stock_alert", 40)
    assert t.stop_reason == "model_error" and "no_such_knob" in t.error
    t = await run("flawed/stock_alert@nonexistent", "stock_alert", 40)
    assert t.stop_reason == "model_error" and "unknown flawed profile 'nonexistent'" in t.error
