"""The Harness program: identity, files, the components() text view, typed edits, diff, render, baselines."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from pydantic import create_model

import tasks
from harness import EditError, Harness, PromptSection, ToolPolicy, apply_edits, baseline, diff, parse_edit, render
from harness.baseline import BASELINE_DIR, generate_baseline
from harness.context import ContextCut, ContextPolicy, apply_cut, truncate, window_cut
from harness.edits import AddHook, ExposeTool, HideTool, InsertSection, RemoveHook, RemoveSection, SetContextPolicy, SetSection, SetToolDescription, UpdateHook
from harness.helpers import CalcError, calculate
from harness.hooks import Hook
from tasks.records import ToolSpec

HOOK = {"id": "guard", "when": {"on": "before_tool_call", "tool": "delete_.*"}, "then": {"do": "block", "message": "never delete"}}


def _h() -> Harness:
    return Harness(
        name="demo",
        sections=[PromptSection(id="role", kind="role", text="You are careful."),
                  PromptSection(id="fmt", kind="output_format", title="Output", text="Answer in one line.")],
        tools=ToolPolicy(descriptions={"read": "Read a file.", "delete_file": "Delete a file."},
                         examples={"read": [{"path": "a.txt"}]}, helpers=["calculator"]),
        hooks=[Hook.model_validate(HOOK)],
        context=ContextPolicy(max_tool_result_chars=1000),
    )


def test_id_is_a_content_hash_and_files_round_trip(tmp_path):
    h = _h()
    assert len(h.id) == 16 and h.id == _h().id
    assert h.model_copy(update={"name": "other"}).id == h.id  # the label is not content
    assert apply_edits(h, [SetSection(id="role", text="You are bold.")]).id != h.id
    for name in ("h.yaml", "h.json"):
        path = h.dump(tmp_path / name)
        assert Harness.load(path) == h
    assert "guard" in (tmp_path / "h.yaml").read_text()
    (tmp_path / "bad.yaml").write_text("sections: [{id: r, text: t, colour: red}]")
    with pytest.raises(ValueError, match="colour"):
        Harness.load(tmp_path / "bad.yaml")


# Ids of the seven baseline harnesses at id version 1: evaluation caches and stored runs are keyed by them.
BASELINE_IDS = {
    "anomaly_detection": "defcf68d21eac795", "browser_automation": "b488c74be754a96d",
    "budget_approval": "40f2cca34335730a", "code_refactor": "59d63ea46599fa67", "payroll_audit": "0bab341b86dd4a91",
    "stock_alert": "02e5251f76491e69", "website_admin": "18b1e40a15d41599",
}


def test_baseline_ids_stay_the_same():
    assert {f: Harness.load(BASELINE_DIR / f"{f}.yaml").id for f in BASELINE_IDS} == BASELINE_IDS


def test_id_survives_fields_added_later():
    """A field added to a record (the harness search adds composite tools and a section `use_pattern`) changes
    no id of a harness that does not use it, and does change the id of one that does."""
    Section2 = create_model("Section2", __base__=PromptSection, use_pattern=(str | None, None))
    Harness2 = create_model("Harness2", __base__=Harness, sections=(list[Section2], []), composite_tools=(list[dict], []))
    for family, known in BASELINE_IDS.items():
        h = Harness.load(BASELINE_DIR / f"{family}.yaml")
        grown = Harness2.model_validate(h.model_dump())
        assert "use_pattern" in grown.model_dump()["sections"][0] and grown.id == known == h.id
        used = grown.model_copy(update={"sections": [grown.sections[0].model_copy(update={"use_pattern": "x"})]})
        assert used.id != known
        assert grown.model_copy(update={"composite_tools": [{"name": "c"}]}).id != known
    # without the rule the added defaults would have changed every id
    plain = json.dumps(Harness2.model_validate(h.model_dump()).model_dump(mode="json", exclude={"name"}), sort_keys=True,
                       separators=(",", ":"))
    assert hashlib.sha256(plain.encode()).hexdigest()[:16] != h.id


def test_components_round_trip_and_edit():
    h = _h()
    comps = h.components()
    assert comps["section:role"] == "You are careful." and comps["tool:read"] == "Read a file."
    assert json.loads(comps["hook:guard"])["then"]["do"] == "block"
    assert Harness.from_components(h, comps) == h
    edited = dict(comps, **{"section:role": "You are meticulous.", "tool:read": "Read one file."})
    h2 = Harness.from_components(h, edited)
    assert h2.components() == edited and h2.section("role").kind == "role"
    assert Harness.from_components(h2, h.components()) == h  # and back
    h3 = Harness.from_components(h, {"section:recipe": "Check totals twice."})
    assert [s.id for s in h3.sections] == ["role", "fmt", "recipe"]
    with pytest.raises(ValueError, match="unknown component key 'colour'"):
        Harness.from_components(h, {"colour": "red"})
    with pytest.raises(ValueError, match="'hook:guard' is not valid JSON"):
        Harness.from_components(h, {"hook:guard": "{not json"})
    with pytest.raises(ValueError, match="valid harness"):
        Harness.from_components(h, {"context": json.dumps({"max_tool_result_chars": 5})})


def test_every_edit_kind_applies():
    h = _h()
    h2 = apply_edits(h, [
        SetSection(id="fmt", text="Answer with a number.", title="Format"),
        InsertSection(section=PromptSection(id="recipe", kind="domain_recipe", text="Sum per department."), after="role"),
        RemoveSection(id="role"),
        AddHook(hook=Hook.model_validate({"id": "t5", "when": {"on": "at_turn", "turn": 5}, "then": {"do": "inject", "message": "hurry"}})),
        UpdateHook(hook=Hook.model_validate({**HOOK, "then": {"do": "block", "message": "deleting is off"}})),
        SetToolDescription(tool="read", description="Read a UTF-8 file."),
        HideTool(tool="delete_file"),
        ExposeTool(tool="notes"),
        HideTool(tool="calculator"),
        SetContextPolicy(changes={"keep_last_turns": 4}),
    ])
    assert [s.id for s in h2.sections] == ["recipe", "fmt"] and h2.section("fmt").title == "Format"
    assert [x.id for x in h2.hooks] == ["guard", "t5"] and h2.hook("guard").then.message == "deleting is off"
    assert h2.tools.hidden == ["delete_file"] and h2.tools.helpers == ["notes"]
    assert h2.tools.descriptions["read"] == "Read a UTF-8 file."
    assert h2.context.keep_last_turns == 4 and h2.context.max_tool_result_chars == 1000
    h3 = apply_edits(h2, [RemoveHook(id="t5"), ExposeTool(tool="delete_file")])
    assert [x.id for x in h3.hooks] == ["guard"] and h3.tools.hidden == []
    assert h == _h()  # the original never changes


@pytest.mark.parametrize("edit, reason", [
    (SetSection(id="nope", text="x"), "no section 'nope'"),
    (InsertSection(section=PromptSection(id="role", text="x")), "exists"),
    (InsertSection(section=PromptSection(id="new", text="x"), after="nope"), "insert after"),
    (RemoveHook(id="nope"), "no hook 'nope'"),
    (AddHook(hook=Hook.model_validate(HOOK)), "exists"),
    (SetToolDescription(tool="write", description="x"), "unknown tool 'write'"),
    (ExposeTool(tool="read"), "already exposed"),
    (SetContextPolicy(changes={"keep_last": 2}), "unknown context policy field"),
    (SetContextPolicy(changes={"summarize_with": "self"}), "needs keep_last_turns"),
])
def test_invalid_edit_is_rejected_with_a_reason_and_nothing_applies(edit, reason):
    h = _h()
    good = SetSection(id="role", text="changed")
    with pytest.raises(EditError, match=reason) as e:
        apply_edits(h, [good, edit])
    assert e.value.index == 1
    assert h == _h() and h.section("role").text == "You are careful."


def test_parse_edit_from_untrusted_json():
    e = parse_edit('{"op": "set_section", "id": "role", "text": "Be brief."}')
    assert isinstance(e, SetSection)
    assert apply_edits(_h(), [{"op": "hide_tool", "tool": "read"}]).tools.hidden == ["read"]
    for bad, reason in [("{oops", "not valid JSON"), ('{"op": "rewrite_everything"}', "invalid edit"),
                        ('{"op": "set_section", "id": "role"}', "text"),
                        ('{"op": "add_hook", "hook": {"id": "h", "when": {"on": "at_turn", "turn": 1}, "then": {"do": "block", "message": "m"}}}', "cannot follow")]:
        with pytest.raises(EditError, match=reason):
            parse_edit(bad)


def test_diff_is_readable():
    h = _h()
    assert diff(h, h) == ""
    h2 = apply_edits(h, [SetSection(id="role", text="You are careful.\nCheck every total."), RemoveHook(id="guard"),
                         SetSection(id="fmt", text="Answer in one line.", kind="example")])
    d = diff(h, h2)
    assert d.startswith(f"harness {h.id} -> {h2.id}")
    assert "~ changed section:role" in d and "+Check every total." in d
    assert "- removed hook:guard" in d and "~ section:fmt kind: 'output_format' -> 'example'" in d


def test_render_applies_tool_policy():
    h = _h()
    env_tools = [ToolSpec(name="read", description="env read"), ToolSpec(name="delete_file", description="env delete"),
                 ToolSpec(name="list", description="env list")]
    r = render(apply_edits(h, [HideTool(tool="delete_file")]), env_tools)
    by_name = {t.name: t.description for t in r.tools}
    assert list(by_name) == ["read", "list", "calculator"]
    assert by_name["read"] == 'Read a file.\nExample arguments: {"path": "a.txt"}'
    assert by_name["list"] == "env list"  # no override: the environment's own text
    assert r.env_tools == ["read", "list"] and r.helper_tools == ["calculator"]
    assert r.system_prompt == "You are careful.\n\n## Output\nAnswer in one line."


def test_truncation_keeps_head_and_tail():
    text = "A" * 100 + "m" * 10_000 + "Z" * 100
    out, cut = truncate(text, 1000)
    assert out.startswith("A" * 100) and out.endswith("Z" * 100) and cut == len(text) - 1000
    assert "characters cut" in out and len(out) < 1100
    out, _ = truncate(text, 1000, head_fraction=0.9)
    assert out.index("characters cut") > 850
    assert truncate("short", 1000) == ("short", 0) and truncate(text, None) == (text, 0)


def test_window_keeps_task_and_last_turns():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(4):
        msgs += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "tool_call_id": str(i), "content": f"r{i}"}]
    cut = window_cut(msgs, ContextPolicy(keep_last_turns=2))
    assert cut == ContextCut(start=2, end=6, note="[harness] 2 earlier turn(s) are not shown to save context.")
    view = apply_cut(msgs, cut)
    assert [m["content"] for m in view][:3] == ["s", "task", cut.note]
    assert [m["content"] for m in view if m["role"] == "assistant"] == ["a2", "a3"]
    assert window_cut(msgs, ContextPolicy(keep_last_turns=10)) is None and apply_cut(msgs, None) == msgs
    summarized = window_cut(msgs, ContextPolicy(keep_last_turns=3, summarize_with="self"), "did a0")
    assert summarized == ContextCut(start=2, end=4, note="[harness] Summary of earlier turns:\ndid a0")


def test_calculator_is_safe_and_exact():
    assert calculate("(12.5 + 3) * 4 / 2") == 31.0
    assert calculate("max(3, 7) - abs(-2) + round(2.567, 2) + sqrt(16) + 7 // 2 + 7 % 4") == pytest.approx(17.57)
    for bad in ["__import__('os').system('true')", "x + 1", "2 ** 100000", "1 / 0", "[1, 2]", "'a' * 3", "9" * 600]:
        with pytest.raises(CalcError):
            calculate(bad)


def test_baseline_per_family_exposes_all_env_tools():
    families = tasks.families()
    assert families, "no task family installed"
    for fam in families:
        h = baseline(fam)
        env = tasks.make_env(tasks.instances(fam, "train")[0])
        names = {t.name for t in env.tools()}
        env.close()
        assert h.hooks == [] and h.context == ContextPolicy() and h.tools.hidden == [] and h.tools.helpers == []
        assert [s.kind for s in h.sections] == ["role"]
        assert set(h.tools.descriptions) == names, f"{fam}: stored baseline out of date; run python -m harness.baseline"
    stored = sorted(p.stem for p in BASELINE_DIR.glob("*.yaml"))
    for fam in stored:
        assert Harness.load(BASELINE_DIR / f"{fam}.yaml") == baseline(fam)
    assert generate_baseline(families[0]).name == f"h0/{families[0]}"


def test_harness_imports_without_heavy_dependencies():
    code = ("import sys, harness, harness.edits, harness.diffs, harness.render, harness.baseline; "
            "print(sorted(m for m in ('ray', 'torch', 'prefect', 'litellm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
