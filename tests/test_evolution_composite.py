"""Composite tools: the record, its schema, expansion of a call, the add/remove edits, the harness field and its
rendering, and the library rule that proposes a paging composite (the runtime test is in test_rollout_runtime.py)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

import tasks
from harness import Harness, apply_edits, baseline, parse_edit, render
from harness.composite import (AddCompositeTool, CompositeError, CompositeTool, RemoveCompositeTool,
                               apply_composite_edit, expand)
from harness.edits import EditError
from harness.evolution import load_card
from harness.evolution.adapter import decode, encode
from harness.evolution.records import CallSummary, ReflectiveDataset, RolloutResult
from harness.evolution.reflectors.library_rules import paging_tool, suggestions
from harness.program import identity_dump

LIST_ALL = {"name": "list_all_products", "description": "List every page of the inventory.",
            "parameters": {"pages": {"type": "integer", "description": "How many pages the listing has."}},
            "steps": [{"tool": "list_products", "arguments": {"page": "{i}"}, "repeat": "pages"}]}


def test_a_composite_call_expands_into_the_environment_calls_it_stands_for() -> None:
    tool = CompositeTool.model_validate(LIST_ALL)
    assert expand(tool, {"pages": 3}) == [("list_products", {"page": 1}), ("list_products", {"page": 2}),
                                          ("list_products", {"page": 3})]
    assert tool.openai_parameters()["required"] == ["pages"]
    note = CompositeTool.model_validate({
        "name": "read_inputs", "description": "Read the policy and a roster.",
        "parameters": {"roster": {"type": "string"}, "tag": {"type": "string", "required": False}},
        "steps": [{"tool": "read_file", "arguments": {"path": "policy.md"}},
                  {"tool": "read_file", "arguments": {"path": "{roster}", "note": "roster {roster}"}}]})
    assert expand(note, {"roster": "roster.csv"}) == [
        ("read_file", {"path": "policy.md"}), ("read_file", {"path": "roster.csv", "note": "roster roster.csv"})]


@pytest.mark.parametrize(("args", "message"), [
    ({}, "missing required argument 'pages'"),
    ({"pages": "3"}, "must be a integer"),
    ({"pages": True}, "must be a integer"),
    ({"pages": 2, "x": 1}, "unexpected argument"),
    ({"pages": 51}, "more than 50 calls"),
    ({"pages": -1}, "non-negative"),
])
def test_bad_composite_calls_get_a_clear_error(args: dict, message: str) -> None:
    with pytest.raises(CompositeError, match=message):
        expand(CompositeTool.model_validate(LIST_ALL), args)


def test_templates_must_name_parameters() -> None:
    bad = {**LIST_ALL, "steps": [{"tool": "list_products", "arguments": {"page": "{nope}"}}]}
    with pytest.raises(ValidationError, match="unknown placeholder"):
        CompositeTool.model_validate(bad)
    with pytest.raises(ValidationError, match="needs `repeat`"):
        CompositeTool.model_validate({**LIST_ALL, "steps": [{"tool": "list_products", "arguments": {"page": "{i}"}}]})


def test_add_and_remove_edits_on_harness_data() -> None:
    env_tools = set(baseline("stock_alert").tools.descriptions)
    data = {**baseline("stock_alert").model_dump(mode="json"), "composite_tools": []}
    tool = CompositeTool.model_validate(LIST_ALL)
    added = apply_composite_edit(data, AddCompositeTool(tool=tool), env_tools)
    assert [t["name"] for t in added["composite_tools"]] == ["list_all_products"] and data["composite_tools"] == []
    with pytest.raises(EditError, match="exists"):
        apply_composite_edit(added, AddCompositeTool(tool=tool), env_tools)
    with pytest.raises(EditError, match="environment tool"):
        apply_composite_edit(data, AddCompositeTool(tool=tool.model_copy(update={"name": "send_email"})), env_tools)
    with pytest.raises(EditError, match="unknown tool"):
        steps = [{"tool": "fly", "arguments": {}}]
        apply_composite_edit(data, AddCompositeTool(tool=CompositeTool.model_validate({**LIST_ALL, "steps": steps,
                                                                                           "parameters": {}})), env_tools)
    assert apply_composite_edit(added, RemoveCompositeTool(name="list_all_products"))["composite_tools"] == []
    with pytest.raises(EditError, match="no composite tool"):
        apply_composite_edit(data, RemoveCompositeTool(name="list_all_products"))
    without = {k: v for k, v in data.items() if k != "composite_tools"}
    with pytest.raises(EditError, match="no composite_tools"):
        apply_composite_edit(without, AddCompositeTool(tool=tool))


def test_composite_tools_on_the_harness_keep_old_ids_round_trip_and_render() -> None:
    h0 = baseline("stock_alert")
    assert h0.composite_tools == [] and "composite_tools" not in identity_dump(h0)  # old ids stay
    h1 = apply_edits(h0, [parse_edit({"op": "add_composite_tool", "tool": LIST_ALL})])
    assert h1.id != h0.id and h1.composite("list_all_products") is not None
    assert Harness.model_validate_json(h1.to_json()) == h1 and Harness.from_components(h0, h1.components()) == h1
    assert "composite:list_all_products" in h1.components()
    r = render(h1, tasks.make_env(tasks.get("stock_alert").instances("train")[0]).tools())
    assert r.composite_tools == ["list_all_products"] and "list_all_products" not in r.env_tools
    spec = next(t for t in r.tools if t.name == "list_all_products")
    assert spec.parameters["required"] == ["pages"] and spec.description == LIST_ALL["description"]
    assert apply_edits(h1, [RemoveCompositeTool(name="list_all_products")]).id == h0.id
    with pytest.raises(EditError, match="unknown tool"):
        apply_edits(h0, [AddCompositeTool(tool=CompositeTool.model_validate({**LIST_ALL, "steps": [{"tool": "fly"}],
                                                                             "parameters": {}}))])
    with pytest.raises(ValueError, match="duplicate composite tool"):
        Harness.model_validate({"composite_tools": [LIST_ALL, LIST_ALL]})
    with pytest.raises(ValueError, match="shadow a helper"):
        Harness.model_validate({"composite_tools": [{**LIST_ALL, "name": "notes"}]})


def test_the_library_adds_a_paging_composite_when_failing_rollouts_skipped_pages() -> None:
    """Evidence: a failing rollout read page 1 of 3 of list_products; the rule proposes a composite that reads
    every page, the edit applies, and a rollout that read every page gives no such evidence."""
    h0 = baseline("stock_alert")
    head = '{"page": 1, "pages": 3, "total_products": 40, "products": [{"sku": "A1"'

    def rollout(pages: list[int], passed: bool) -> RolloutResult:
        calls = [CallSummary(turn=p, name="list_products", arguments=json.dumps({"page": p}), result_head=head)
                 for p in pages]
        return RolloutResult(key=f"k{pages}", harness_id=h0.id, instance_id="stock_alert/0", seed=0,
                             score=1.0 if passed else 0.4, passed=passed, stop_reason="submitted", calls=calls,
                             failed_checks=[] if passed else ["sheet_rows_complete"])

    ds = ReflectiveDataset(family="stock_alert", harness_id=h0.id, records=[rollout([1], False), rollout([1, 2, 3], True)])
    got = paging_tool(h0, ds, load_card("stock_alert"))
    assert [s.target for s in got] == ["composite:list_products_all_pages"] and "1 of 1 failing" in got[0].rationale
    h1 = apply_edits(h0, [got[0].edit])
    assert expand(h1.composite("list_products_all_pages"), {"pages": 3}) == [("list_products", {"page": p}) for p in (1, 2, 3)]
    assert paging_tool(h1, ds, None) == []  # already there
    read_all = ReflectiveDataset(family="stock_alert", harness_id=h0.id, records=[rollout([1, 2, 3], False)])
    assert paging_tool(h0, read_all, None) == []
    assert any(s.rule == "paging_tool" for s in suggestions(h0, ds, load_card("stock_alert")))
    assert decode(encode(h0)) == h0 and "composite_tools" not in encode(h0)["harness"]  # candidates keep their text
