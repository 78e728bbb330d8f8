"""Composite tools, the pure part: the record, its schema, expansion of a call, and the add/remove edits."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import tasks
from harness import Harness, apply_edits, baseline, parse_edit, render
from harness.composite import (AddCompositeTool, CompositeError, CompositeTool, RemoveCompositeTool,
                               apply_composite_edit, expand)
from harness.edits import EditError
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
