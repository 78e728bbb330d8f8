"""Profiles of the simulated student: fault rates, recovery probabilities and limits, from `profiles.yaml`.

A model string names one: `flawed/<family>@<profile>`, optionally with overrides appended as `+key=value`
(`flawed/stock_alert@uniform+max_faults=1+planning=0.5+recovery.hook=1`). Override keys: a category name
(its rate), a fault kind (its rate), `recovery.<name>`, `max_faults` (an integer or `none`),
`long_context_chars`, `stated_rate`, `example_rate`. Unknown keys and profile fields are errors naming them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

PROFILE_FILE = Path(__file__).resolve().parent / "profiles.yaml"
CATEGORIES = ("tool_use", "instruction_following", "implicit_knowledge", "long_context", "planning")
PER_TURN_KINDS = ("finish_early", "loop", "skip_write", "requery")  # generic kinds with a rate per turn
Probability = float


class Recovery(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_error: Probability = Field(default=0.5, ge=0, le=1, description="Re-sync after an unexpected tool error.")
    hook: Probability = Field(default=0.7, ge=0, le=1, description="Follow a [harness] message naming the fault.")
    loop_exit: Probability = Field(default=0.1, ge=0, le=1, description="Leave a loop, per turn, unprompted.")


class Profile(BaseModel):
    """Fault rates per opportunity (see profiles.yaml for what an opportunity is) and reactions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    rates: dict[str, Probability] = Field(description="Category -> rate per opportunity (all five categories).")
    kinds: dict[str, Probability] = Field(default_factory=dict, description="Fault kind -> rate (overrides).")
    long_context_chars: dict[str, int] = Field(
        default_factory=lambda: {"default": 12_000},
        description="Context size (characters) past which long_context faults fire: 'default' and per-family values.")
    stated_rate: Probability = Field(default=0.05, ge=0, le=1)
    example_rate: Probability = Field(default=0.02, ge=0, le=1)
    recovery: Recovery = Field(default_factory=Recovery)
    max_faults: int | None = Field(default=None, ge=0)

    @field_validator("rates")
    @classmethod
    def _all_categories(cls, v: dict[str, float]) -> dict[str, float]:
        missing, extra = set(CATEGORIES) - set(v), set(v) - set(CATEGORIES)
        if missing or extra:
            raise ValueError(f"rates must name exactly {', '.join(CATEGORIES)} "
                             f"(missing: {sorted(missing)}, unknown: {sorted(extra)})")
        return _probabilities(v)

    @field_validator("kinds")
    @classmethod
    def _kind_rates(cls, v: dict[str, float]) -> dict[str, float]:
        return _probabilities(v)

    @field_validator("long_context_chars", mode="before")
    @classmethod
    def _per_family(cls, v: object) -> object:
        return {"default": v} if isinstance(v, int) else v

    @field_validator("long_context_chars")
    @classmethod
    def _has_default(cls, v: dict[str, int]) -> dict[str, int]:
        if "default" not in v or any(x < 0 for x in v.values()):
            raise ValueError(f"long_context_chars needs a 'default' and sizes >= 0, got {v}")
        return v

    def rate(self, category: str, kind: str) -> float:
        return self.kinds.get(kind, self.rates[category])

    def context_limit(self, family: str) -> int:
        return self.long_context_chars.get(family, self.long_context_chars["default"])


def _probabilities(v: dict[str, float]) -> dict[str, float]:
    bad = {k: x for k, x in v.items() if not 0.0 <= x <= 1.0}
    if bad:
        raise ValueError(f"rates must lie in [0, 1]: {bad}")
    return v


@functools.cache
def _raw_profiles() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(PROFILE_FILE.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{PROFILE_FILE}: expected a mapping of profile names")
    return data


def profile_names() -> list[str]:
    return sorted(_raw_profiles())


@functools.cache
def load_profile(name: str) -> Profile:
    """A named profile of profiles.yaml (`extends` copies another profile's fields first)."""
    raw = _raw_profiles()
    if name not in raw:
        raise ValueError(f"unknown flawed profile '{name}'; profiles: {', '.join(sorted(raw))}")
    body = dict(raw[name])
    parent = body.pop("extends", None)
    if parent is not None:
        body = {**load_profile(parent).model_dump(exclude={"name", "description"}), **body}
    try:
        return Profile.model_validate({"name": name, **body})
    except ValidationError as e:
        raise ValueError(f"{PROFILE_FILE}: profile '{name}' is invalid:\n{e}") from None


def parse_profile(spec: str, known_kinds: set[str]) -> Profile:
    """`name[+key=value...]` -> the profile with its overrides applied (validated; errors name the key)."""
    name, *overrides = spec.split("+")
    base = load_profile(name)
    data = base.model_dump()
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"profile override '{item}' must be key=value")
        _override(data, key.strip(), value.strip(), known_kinds)
    data["name"] = spec
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        raise ValueError(f"profile '{spec}' is invalid:\n{e}") from None


def _override(data: dict[str, Any], key: str, value: str, known_kinds: set[str]) -> None:
    if key == "max_faults":
        data["max_faults"] = None if value.lower() == "none" else int(value)
    elif key == "long_context_chars":
        data[key] = {"default": int(value)}
    elif key in ("stated_rate", "example_rate"):
        data[key] = float(value)
    elif key.startswith("recovery."):
        field = key.removeprefix("recovery.")
        if field not in Recovery.model_fields:
            raise ValueError(f"unknown recovery field '{field}' (known: {', '.join(Recovery.model_fields)})")
        data["recovery"][field] = float(value)
    elif key in CATEGORIES:
        data["rates"][key] = float(value)
    elif key in known_kinds:
        data["kinds"][key] = float(value)
    else:
        raise ValueError(f"unknown profile override '{key}': use a category ({', '.join(CATEGORIES)}), a fault "
                         f"kind ({', '.join(sorted(known_kinds))}), recovery.<field>, max_faults, "
                         "long_context_chars, stated_rate or example_rate")
