"""Knowledge cards: per family, the domain conventions a good reflector would infer from the task's documents.

One YAML file per family in `harness/evolution/cards/<family>.yaml`, validated on load (a typo is an error
naming the field). Each knowledge item has a stable `key`, the section text a harness states it with, its
`source` in the family's data, and the verifier checks whose failure points to it (regexes, full match). The
`library` reflector turns an item into a `domain_recipe` prompt section whose id is `knowledge.<key>`
(`section_id`), so anyone can tell which items a harness states (`stated_keys`): the simulated
`flawed/<family>` student's `implicit_knowledge` faults use the same keys. Cards also list the outputs a task
must produce (`outputs`: a `require` hook per output tool) and the tools the library must never hide.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.program import Harness, checked_use_pattern

FamilyRecord = TypeVar("FamilyRecord", bound=BaseModel)  # a record with a `family: str` field

CARD_DIR = Path(__file__).resolve().parent / "cards"
SECTION_PREFIX = "knowledge."


class KnowledgeItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Stable id, shared with the flawed student.")
    title: str
    text: str = Field(min_length=1, description="The prompt section that states the convention.")
    source: str = Field(description="Where the family's data states it (file, document, generator).")
    checks: list[str] = Field(min_length=1, description="Regexes (full match) over failed verifier checks.")
    use_pattern: str | None = Field(default=None, description="Regex that shows the model used the item (the "
                                    "section's `use_pattern`, for the trigger-rate scan).")

    @field_validator("checks")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for pattern in v:
            re.compile(pattern)
        return v

    @field_validator("use_pattern")
    @classmethod
    def _use_regex(cls, v: str | None) -> str | None:
        return checked_use_pattern(v)

    def explains(self, failed_check: str) -> bool:
        return any(re.fullmatch(p, failed_check) for p in self.checks)


class OutputRequirement(BaseModel):
    """An output the task needs: finishing without a successful call of `tool` fails `checks`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_\-]*$")
    tool: str = Field(description="Regex (full match) of the tool that produces the output.")
    checks: list[str] = Field(min_length=1, description="Regexes of the checks that fail without it.")
    message: str = Field(min_length=1, description="What the require hook tells the model.")

    def explains(self, failed_check: str) -> bool:
        return any(re.fullmatch(p, failed_check) for p in self.checks)


class KnowledgeCard(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    items: list[KnowledgeItem]
    outputs: list[OutputRequirement] = Field(default_factory=list)
    needed_tools: list[str] = Field(default_factory=list, description="Tools the library never hides.")

    @field_validator("items")
    @classmethod
    def _unique_keys(cls, v: list[KnowledgeItem]) -> list[KnowledgeItem]:
        keys = [i.key for i in v]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"duplicate knowledge key(s): {', '.join(dup)}")
        return v

    def item(self, key: str) -> KnowledgeItem:
        for i in self.items:
            if i.key == key:
                return i
        raise KeyError(f"{self.family} has no knowledge item '{key}'; keys: {', '.join(self.keys())}")

    def keys(self) -> list[str]:
        return [i.key for i in self.items]


def section_id(key: str) -> str:
    """The prompt-section id under which a harness states knowledge item `key`."""
    return f"{SECTION_PREFIX}{key}"


def stated_keys(h: Harness) -> set[str]:
    """Knowledge keys a harness states (sections named `knowledge.<key>`)."""
    return {s.id.removeprefix(SECTION_PREFIX) for s in h.sections if s.id.startswith(SECTION_PREFIX)}


def card_families() -> list[str]:
    return sorted(p.stem for p in CARD_DIR.glob("*.yaml"))


@functools.cache
def load_card(family: str) -> KnowledgeCard | None:
    """The family's card, or None when it has none. Raises ValueError naming the file and field on a bad card."""
    path = CARD_DIR / f"{family}.yaml"
    if not path.exists():
        return None
    return read_family_yaml(path, KnowledgeCard, family, "knowledge card")


def read_family_yaml(path: Path, model: type[FamilyRecord], family: str, what: str) -> FamilyRecord:
    """`path` (YAML) validated as `model`, a record with a `family` field that must be `family`. Raises ValueError
    naming the file on a YAML or field error, or on a family that is not the file's ("<what>": e.g. "knowledge
    card", whose last word names the record in that message)."""
    try:
        record = model.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as e:
        raise ValueError(f"{path}: invalid {what}:\n{e}") from None
    if record.family != family:
        raise ValueError(f"{path}: {what.split()[-1]} says family '{record.family}', file name says '{family}'")
    return record
