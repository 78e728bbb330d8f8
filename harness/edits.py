"""Typed harness edits: validated, applied atomically, rejected with a reason.

Each edit is a small pydantic record with an `op` tag, so a reflection model's JSON proposal parses into
exactly one kind of edit (`parse_edit`). `apply_edits(h, edits)` applies them in order to a copy and
returns a new harness; if any edit is invalid it raises `EditError` naming the edit and the reason, and
nothing is applied (harnesses are immutable, so "never half-applied" holds by construction).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from harness.composite import AddCompositeTool, RemoveCompositeTool, apply_composite_edit
from harness.context import ContextPolicy
from harness.errors import EditError
from harness.helpers import SPECS as HELPER_SPECS
from harness.hooks import Hook
from harness.program import Harness, PromptSection, SectionKind


class _Edit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SetSection(_Edit):
    op: Literal["set_section"] = "set_section"
    id: str
    text: str
    title: str | None = None
    kind: SectionKind | None = None


class InsertSection(_Edit):
    op: Literal["insert_section"] = "insert_section"
    section: PromptSection
    after: str | None = Field(default=None, description="Insert after this section id; None = at the end.")


class RemoveSection(_Edit):
    op: Literal["remove_section"] = "remove_section"
    id: str


class AddHook(_Edit):
    op: Literal["add_hook"] = "add_hook"
    hook: Hook


class UpdateHook(_Edit):
    op: Literal["update_hook"] = "update_hook"
    hook: Hook


class RemoveHook(_Edit):
    op: Literal["remove_hook"] = "remove_hook"
    id: str


class SetToolDescription(_Edit):
    op: Literal["set_tool_description"] = "set_tool_description"
    tool: str
    description: str = Field(min_length=1)


class ExposeTool(_Edit):
    op: Literal["expose_tool"] = "expose_tool"
    tool: str


class HideTool(_Edit):
    op: Literal["hide_tool"] = "hide_tool"
    tool: str


class SetContextPolicy(_Edit):
    op: Literal["set_context_policy"] = "set_context_policy"
    changes: dict[str, Any] = Field(description="Fields of ContextPolicy to change; others keep their value.")


HarnessEdit = Annotated[
    SetSection | InsertSection | RemoveSection | AddHook | UpdateHook | RemoveHook | SetToolDescription
    | ExposeTool | HideTool | SetContextPolicy,
    Field(discriminator="op"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(HarnessEdit)


def parse_edit(data: dict[str, Any] | str) -> HarnessEdit:
    """Parse untrusted JSON (e.g. from a reflection model) into an edit, or raise EditError with the reason."""
    try:
        obj = json.loads(data) if isinstance(data, str) else data
        return _ADAPTER.validate_python(obj)
    except json.JSONDecodeError as e:
        raise EditError(f"edit is not valid JSON: {e}") from None
    except ValidationError as e:
        raise EditError(f"invalid edit: {_short(e)}") from None


def _short(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'edit'}: {err['msg']}" for err in e.errors()[:5])


def _need_tool(h: Harness, tool: str) -> None:
    known = h.tools.known_tools() | set(HELPER_SPECS)
    if h.tools.known_tools() and tool not in known:
        raise EditError(f"unknown tool '{tool}'; known: {', '.join(sorted(known))}")


def apply_edit(h: Harness, edit: HarnessEdit) -> Harness:
    data = h.model_dump(mode="json")
    sections: list[dict[str, Any]] = data["sections"]
    hooks: list[dict[str, Any]] = data["hooks"]
    section_ids = [s["id"] for s in sections]
    hook_ids = [x["id"] for x in hooks]
    match edit:
        case SetSection():
            if edit.id not in section_ids:
                raise EditError(f"no section '{edit.id}'; sections: {', '.join(section_ids) or '(none)'}")
            s = sections[section_ids.index(edit.id)]
            s["text"] = edit.text
            if edit.title is not None:
                s["title"] = edit.title
            if edit.kind is not None:
                s["kind"] = edit.kind
        case InsertSection():
            if edit.section.id in section_ids:
                raise EditError(f"section '{edit.section.id}' exists; use set_section to change it")
            if edit.after is not None and edit.after not in section_ids:
                raise EditError(f"no section '{edit.after}' to insert after")
            pos = len(sections) if edit.after is None else section_ids.index(edit.after) + 1
            sections.insert(pos, edit.section.model_dump(mode="json"))
        case RemoveSection():
            if edit.id not in section_ids:
                raise EditError(f"no section '{edit.id}' to remove")
            del sections[section_ids.index(edit.id)]
        case AddHook():
            if edit.hook.id in hook_ids:
                raise EditError(f"hook '{edit.hook.id}' exists; use update_hook")
            hooks.append(edit.hook.model_dump(mode="json"))
        case UpdateHook():
            if edit.hook.id not in hook_ids:
                raise EditError(f"no hook '{edit.hook.id}' to update; use add_hook")
            hooks[hook_ids.index(edit.hook.id)] = edit.hook.model_dump(mode="json")
        case RemoveHook():
            if edit.id not in hook_ids:
                raise EditError(f"no hook '{edit.id}' to remove")
            del hooks[hook_ids.index(edit.id)]
        case SetToolDescription():
            _need_tool(h, edit.tool)
            data["tools"]["descriptions"][edit.tool] = edit.description
        case ExposeTool():
            _need_tool(h, edit.tool)
            if edit.tool in HELPER_SPECS:
                if edit.tool in data["tools"]["helpers"]:
                    raise EditError(f"helper tool '{edit.tool}' is already exposed")
                data["tools"]["helpers"].append(edit.tool)
            elif edit.tool in data["tools"]["hidden"]:
                data["tools"]["hidden"].remove(edit.tool)
            else:
                raise EditError(f"tool '{edit.tool}' is already exposed")
        case HideTool():
            _need_tool(h, edit.tool)
            if edit.tool in data["tools"]["helpers"]:
                data["tools"]["helpers"].remove(edit.tool)
            elif edit.tool in data["tools"]["hidden"] or edit.tool in HELPER_SPECS:
                raise EditError(f"tool '{edit.tool}' is already hidden")
            else:
                data["tools"]["hidden"].append(edit.tool)
        case SetContextPolicy():
            unknown = set(edit.changes) - set(ContextPolicy.model_fields)
            if unknown:
                raise EditError(f"unknown context policy field(s) {sorted(unknown)}; fields: {sorted(ContextPolicy.model_fields)}")
            data["context"] = {**data["context"], **edit.changes}
        case _:
            raise EditError(f"not a harness edit: {type(edit).__name__}")
    try:
        return Harness.model_validate(data)
    except ValidationError as e:
        raise EditError(f"the edited harness is invalid: {_short(e)}") from None


def apply_edits(h: Harness, edits: Sequence[HarnessEdit | dict[str, Any]]) -> Harness:
    """All edits or none: returns the new harness, or raises EditError (index + reason); `h` never changes."""
    out = h
    for i, edit in enumerate(edits):
        try:
            e = parse_edit(edit) if isinstance(edit, dict) else edit
            out = apply_edit(out, e)
        except EditError as err:
            raise EditError(err.reason, index=i) from None
    return out


# --- edit kinds added for the harness search (harness/evolution) ----------------------------------------
# Appended (not merged into the union above) so parallel work on the kinds above merges cleanly; the union,
# the parser and `apply_edit` below are the complete set.

class SetToolExamples(_Edit):
    """Set (or clear, with []) the argument examples appended to a tool's description."""

    op: Literal["set_tool_examples"] = "set_tool_examples"
    tool: str
    examples: list[dict[str, Any]] = Field(max_length=5, description="Argument objects, e.g. [{\"path\": \"policy.md\"}].")


_BASE_EDIT_KINDS = HarnessEdit
_ADDED_EDIT_KINDS: tuple[type[BaseModel], ...] = (SetToolExamples, AddCompositeTool, RemoveCompositeTool)
HarnessEdit = Annotated[  # type: ignore[misc]
    Union[(*get_args(get_args(_BASE_EDIT_KINDS)[0]), *_ADDED_EDIT_KINDS)],  # noqa: UP007 - built from a tuple
    Field(discriminator="op"),
]
_ADAPTER = TypeAdapter(HarnessEdit)
_apply_base_edit = apply_edit


def apply_edit(h: Harness, edit: HarnessEdit) -> Harness:  # type: ignore[no-redef]
    """Apply one edit (every kind, the added ones included); raises EditError with the reason."""
    if isinstance(edit, AddCompositeTool | RemoveCompositeTool):
        data = apply_composite_edit(h.model_dump(mode="json"), edit, h.tools.known_tools() or None)
        try:
            return Harness.model_validate(data)
        except ValidationError as e:
            raise EditError(f"the edited harness is invalid: {_short(e)}") from None
    if not isinstance(edit, SetToolExamples):
        return _apply_base_edit(h, edit)
    _need_tool(h, edit.tool)
    data = h.model_dump(mode="json")
    if edit.examples:
        data["tools"]["examples"][edit.tool] = edit.examples
    elif edit.tool in data["tools"]["examples"]:
        del data["tools"]["examples"][edit.tool]
    else:
        raise EditError(f"tool '{edit.tool}' has no examples to clear")
    try:
        return Harness.model_validate(data)
    except ValidationError as e:
        raise EditError(f"the edited harness is invalid: {_short(e)}") from None
