"""The `Harness` program: prompt sections, tool policy, hooks and context policy, each with a stable id.

Identity is content: `Harness.id` hashes everything that changes what the model sees or what the runtime
does (the free `name` label does not count). Identity survives growth: a field added to any of these
records after id version 1 enters the hash only when it differs from its default, so a harness that does not
use a new feature keeps its id (evaluation caches and stored trajectories are keyed by it). The fields of
id version 1 are frozen in `_ID_FIELDS_V1`; add new fields freely (with a default), never edit that table. Serialisation is YAML or JSON (`load`/`dump`). The text view
for a text-only optimizer is `components()` / `from_components()`:

| key                  | text                                          |
|----------------------|-----------------------------------------------|
| `section:<id>`       | the section's text                            |
| `tool:<name>`        | the tool's description as the model sees it   |
| `tool_examples:<name>`| JSON list of argument examples (only if any)  |
| `tools.hidden`       | JSON list of hidden environment tools         |
| `tools.helpers`      | JSON list of harness helper tools             |
| `hook:<id>`          | the hook as JSON (without its id)             |
| `context`            | the context policy as JSON                    |
| `composite:<name>`   | a composite tool as JSON (without its name)   |
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.composite import CompositeTool
from harness.context import ContextPolicy
from harness.hooks import (
    AfterToolError, AtTurn, BeforeToolCall, Block, ContextSize, Hook, Inject, OnFinish, RepeatedCall, Require, Stop,
)

SCHEMA_VERSION = 1
SectionKind = Literal["role", "task_guidance", "domain_recipe", "output_format", "example"]
HelperName = Literal["notes", "calculator"]
HELPER_NAMES: tuple[str, ...] = HelperName.__args__  # type: ignore[attr-defined]
_ID = r"^[A-Za-z0-9_.\-]+$"


def checked_use_pattern(v: str | None) -> str | None:
    """A `use_pattern` that compiles (or None); a clear error naming the field otherwise."""
    if v is not None:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"use_pattern is not a valid regex: {e}") from None
    return v


class PromptSection(BaseModel):
    """One block of the system prompt, rendered in list order (`## title` then text when titled)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID)
    kind: SectionKind = "task_guidance"
    title: str = ""
    text: str
    use_pattern: str | None = Field(
        default=None, description="Regex (searched) over the model's text and tool-call arguments (as JSON) "
        "that shows the section was used, e.g. a domain formula; read by the trigger-rate scan.")

    @field_validator("use_pattern")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        return checked_use_pattern(v)


class ToolPolicy(BaseModel):
    """Which tools the model sees and how they are described.

    Environment tools are exposed unless hidden; `descriptions` overrides the environment's own text;
    `examples` appends argument examples to a description. `helpers` are tools the runtime executes
    itself (never the environment): `notes` (a scratchpad) and `calculator` (arithmetic, no eval).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden: list[str] = Field(default_factory=list)
    descriptions: dict[str, str] = Field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    helpers: list[HelperName] = Field(default_factory=list)

    @model_validator(mode="after")
    def _no_duplicates(self) -> "ToolPolicy":
        for name, items in (("hidden", self.hidden), ("helpers", self.helpers)):
            if len(set(items)) != len(items):
                raise ValueError(f"tools.{name} lists a tool twice: {items}")
        return self

    def known_tools(self) -> set[str]:
        """Environment tools this policy names (empty when it names none, i.e. it relies on the env)."""
        return set(self.descriptions) | set(self.hidden) | set(self.examples)


class Harness(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    name: str = Field(default="", description="Free label; not part of the id.")
    sections: list[PromptSection] = Field(default_factory=list)
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    hooks: list[Hook] = Field(default_factory=list)
    context: ContextPolicy = Field(default_factory=ContextPolicy)
    composite_tools: list[CompositeTool] = Field(
        default_factory=list, description="Named sequences of environment calls the model calls as one tool "
        "(harness/composite.py); executed by the runtime.")

    @model_validator(mode="after")
    def _unique_ids(self) -> "Harness":
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"harness schema_version {self.schema_version} is not supported (expected {SCHEMA_VERSION})")
        for what, ids in (("section", [s.id for s in self.sections]), ("hook", [h.id for h in self.hooks]),
                          ("composite tool", [t.name for t in self.composite_tools])):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            if dup:
                raise ValueError(f"duplicate {what} id(s): {', '.join(dup)}")
        clash = sorted({t.name for t in self.composite_tools} & set(HELPER_NAMES))
        if clash:
            raise ValueError(f"composite tool name(s) {clash} shadow a helper tool")
        return self

    def composite(self, name: str) -> CompositeTool | None:
        return next((t for t in self.composite_tools if t.name == name), None)

    # --- identity -------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        body = identity_dump(self)
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]

    def section(self, section_id: str) -> PromptSection | None:
        return next((s for s in self.sections if s.id == section_id), None)

    def hook(self, hook_id: str) -> Hook | None:
        return next((h for h in self.hooks if h.id == hook_id), None)

    # --- files ----------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Harness":
        path = Path(path)
        text = path.read_text()
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as e:
            raise ValueError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from None
        try:
            return cls.model_validate(data or {})
        except ValidationError as e:
            raise ValueError(f"{path}: invalid harness:\n{e}") from None

    def dump(self, path: str | Path) -> Path:
        """Write YAML (or JSON for a .json path) atomically."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")  # unique: two threads may write one id
        tmp.write_text(self.to_json() if path.suffix == ".json" else self.to_yaml())
        tmp.replace(path)
        return path

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=110)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False)

    # --- text view for optimizers ---------------------------------------------------------------
    def components(self) -> dict[str, str]:
        out: dict[str, str] = {f"section:{s.id}": s.text for s in self.sections}
        out.update({f"tool:{name}": text for name, text in self.tools.descriptions.items()})
        out.update({f"tool_examples:{name}": json.dumps(ex, sort_keys=True) for name, ex in self.tools.examples.items()})
        out["tools.hidden"] = json.dumps(self.tools.hidden)
        out["tools.helpers"] = json.dumps(self.tools.helpers)
        for h in self.hooks:
            out[f"hook:{h.id}"] = json.dumps(h.model_dump(mode="json", exclude={"id"}), sort_keys=True)
        out["context"] = json.dumps(self.context.model_dump(mode="json"), sort_keys=True)
        for t in self.composite_tools:
            out[f"composite:{t.name}"] = json.dumps(t.model_dump(mode="json", exclude={"name"}), sort_keys=True)
        return out

    @classmethod
    def from_components(cls, base: "Harness", components: dict[str, str]) -> "Harness":
        """`base` with the given components replaced or added (keys not given keep base's value).

        New `section:<id>` keys are appended as task_guidance sections. Raises ValueError naming the key
        when a value does not parse; nothing of `base` changes (harnesses are immutable).
        """
        data = base.model_dump(mode="json")
        sections = {s["id"]: s for s in data["sections"]}
        hooks = {h["id"]: h for h in data["hooks"]}
        composites = {t["name"]: t for t in data["composite_tools"]}
        for key, value in components.items():
            kind, _, name = key.partition(":")
            try:
                if kind == "section" and name:
                    if name in sections:
                        sections[name]["text"] = value
                    else:
                        sections[name] = {"id": name, "kind": "task_guidance", "title": "", "text": value}
                elif kind == "tool" and name:
                    data["tools"]["descriptions"][name] = value
                elif kind == "tool_examples" and name:
                    data["tools"]["examples"][name] = json.loads(value)
                elif key == "tools.hidden":
                    data["tools"]["hidden"] = json.loads(value)
                elif key == "tools.helpers":
                    data["tools"]["helpers"] = json.loads(value)
                elif kind == "hook" and name:
                    hooks[name] = {"id": name, **json.loads(value)}
                elif key == "context":
                    data["context"] = json.loads(value)
                elif kind == "composite" and name:
                    composites[name] = {"name": name, **json.loads(value)}
                else:
                    raise ValueError(f"unknown component key '{key}'")
            except json.JSONDecodeError as e:
                raise ValueError(f"component '{key}' is not valid JSON: {e}") from None
        data["sections"] = list(sections.values())
        data["hooks"] = list(hooks.values())
        data["composite_tools"] = list(composites.values())
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ValueError(f"components do not form a valid harness:\n{e}") from None


# --- identity -------------------------------------------------------------------------------------
# The fields each record had at id version 1 (frozen: ids of existing harnesses depend on it). A field not
# listed here is hashed only when it differs from its default; a record class not listed (nor derived from
# a listed one) is hashed whole.
_ID_FIELDS_V1: dict[type[BaseModel], frozenset[str]] = {
    cls: frozenset(fields.split()) for cls, fields in {
        Harness: "schema_version name sections tools hooks context",
        PromptSection: "id kind title text",
        ToolPolicy: "hidden descriptions examples helpers",
        Hook: "id when then max_fires note",
        ContextPolicy: "max_tool_result_chars head_fraction keep_last_turns summarize_with",
        BeforeToolCall: "on tool args", RepeatedCall: "on n tool", AfterToolError: "on tool", AtTurn: "on turn",
        OnFinish: "on", ContextSize: "on chars",
        Inject: "do message", Block: "do message", Require: "do tool message", Stop: "do message",
    }.items()
}


def identity_dump(h: Harness) -> dict[str, Any]:
    """What `Harness.id` hashes: the JSON dump without `name`, and without fields newer than id version 1
    that hold their default."""
    data = stable_dump(h)
    del data["name"]
    return data


def stable_dump(h: Harness) -> dict[str, Any]:
    """The JSON dump without fields newer than id version 1 that hold their default: the same text for a
    harness that does not use them as before they existed (stored GEPA candidates stay equal)."""
    data = h.model_dump(mode="json")
    _prune_new_defaults(h, data)
    return data


def _prune_new_defaults(value: Any, data: Any) -> None:
    if isinstance(value, BaseModel):
        v1 = next((_ID_FIELDS_V1[k] for k in type(value).__mro__ if k in _ID_FIELDS_V1), None)
        for name, field in type(value).model_fields.items():
            if name not in data:
                continue
            v = getattr(value, name)
            if v1 is not None and name not in v1 and v == field.get_default(call_default_factory=True):
                del data[name]
            else:
                _prune_new_defaults(v, data[name])
    elif isinstance(value, list | tuple):
        for v, d in zip(value, data, strict=False):
            _prune_new_defaults(v, d)
    elif isinstance(value, dict):
        for k, v in value.items():
            if k in data:
                _prune_new_defaults(v, data[k])
