"""Data mixing: which corrections, imitation rows and own successes go into one training set.

    items = [correction_item(rec, rec.instance_id, rec.t_star, call_key(rec.chosen_calls)), ...,
             success_item(t, "self_success")]
    mixed = mix(items, pass_rates(student_rollouts), MixConfig.preset("paper"), random.Random(0))
    rows = [m.value for m in mixed.items]

Generic over what it mixes: a `MixItem` wraps any value (a `Correction` record, a `Trajectory`) with the
instance it came from, its kind and its dedup key, so the correction arm's records plug in as they are.

Rules (the paper's recipe, counts configurable):
- Targets per kind: `MixConfig.corrections` (paper ~400), `self_successes` (~50; or `self_success_ratio`
  x the corrections actually taken), `imitation` (None = all). Presets: `paper` and `embedded` (scaled down).
- Priority by the student's pass rate p over its samples of the instance: capability-boundary instances
  first (0 < p < 1), then the hardest (lowest p first; p = 0 before any p = 1), instances with no rate last.
  Within a tier instances take turns (round robin: every instance gives its first item before any gives a
  second), and the seeded RNG breaks ties, so a few instances with many failures do not fill the set.
- Dedup: corrections by (instance, t*, corrected call); other kinds by (instance, kind, item key).
  The first item of a key (in the caller's order) wins; later ones are counted as duplicates.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

Kind = Literal["correction", "self_success", "imitation"]
KINDS: tuple[Kind, ...] = ("correction", "self_success", "imitation")
V = TypeVar("V")


@dataclass(frozen=True)
class MixItem(Generic[V]):
    """One candidate row: `value` is the caller's record; the rest is what mixing decides on."""

    value: V = field(compare=False)
    instance_id: str
    kind: Kind
    dedup_key: tuple[Hashable, ...]


def call_key(calls: Sequence[Any]) -> str:
    """A canonical text for corrected tool call(s): name + arguments, key order and call ids ignored.

    Accepts `tasks.records.ToolCall`s, OpenAI `tool_calls` dicts or {name, arguments} dicts."""
    out = []
    for c in calls:
        if hasattr(c, "name"):
            name, args = c.name, c.arguments
        else:
            fn = c.get("function", c)
            name, args = fn.get("name"), fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        out.append([name, args])
    return json.dumps(out, sort_keys=True)


def correction_item(value: V, instance_id: str, t_star: int, corrected_call: str) -> MixItem[V]:
    """A correction, deduplicated by (instance, t*, corrected call) (`corrected_call`: e.g. `call_key(...)`)."""
    return MixItem(value=value, instance_id=instance_id, kind="correction", dedup_key=(instance_id, t_star, corrected_call))


def success_item(value: Any, kind: Literal["self_success", "imitation"], key: str | None = None) -> MixItem[Any]:
    """A whole successful trajectory (anything with `.id` and `.instance.id`), deduplicated by its id or `key`."""
    iid = value.instance.id
    return MixItem(value=value, instance_id=iid, kind=kind, dedup_key=(iid, kind, key if key is not None else value.id))


def pass_rates(rollouts: Iterable[Any]) -> dict[str, float]:
    """The student's pass rate per instance over its samples (anything with `.instance.id` and `.passed`)."""
    n: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    for t in rollouts:
        n[t.instance.id] += 1
        ok[t.instance.id] += bool(t.passed)
    return {i: ok[i] / n[i] for i in n}


class MixConfig(BaseModel):
    """How many rows of each kind (None = all); see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    corrections: int | None = Field(default=400, ge=0, description="Expert-corrected failing turns (paper: ~400).")
    self_successes: int | None = Field(default=50, ge=0, description="The student's own successes (paper: ~50).")
    self_success_ratio: float | None = Field(
        default=None, ge=0.0, description="If set, own successes = round(ratio x corrections taken), capped by "
                                          "self_successes (paper: 50/400 = 0.125).")
    imitation: int | None = Field(default=None, ge=0, description="Expert successes (imitation arm); None = all.")

    @model_validator(mode="after")
    def _ratio_needs_corrections(self) -> "MixConfig":
        if self.self_success_ratio is not None and self.corrections == 0:
            raise ValueError("self_success_ratio is relative to the corrections taken, but corrections is 0")
        return self

    @classmethod
    def preset(cls, name: str) -> "MixConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown mix preset {name!r}; choose one of {', '.join(PRESETS)}")
        return PRESETS[name]

    def target(self, kind: Kind, corrections_taken: int) -> int | None:
        if kind == "correction":
            return self.corrections
        if kind == "imitation":
            return self.imitation
        if self.self_success_ratio is None:
            return self.self_successes
        n = round(self.self_success_ratio * corrections_taken)
        return n if self.self_successes is None else min(n, self.self_successes)


PRESETS: dict[str, MixConfig] = {
    "paper": MixConfig(corrections=400, self_successes=50),
    # the embedded default (2 cores, 20 train instances per family): the paper's 8:1 ratio, scaled down
    "embedded": MixConfig(corrections=40, self_successes=5),
}


class MixCard(BaseModel):
    """What `mix` chose: counts per kind, the boundary share, what was dropped and why."""

    model_config = ConfigDict(extra="forbid")

    available: dict[str, int] = Field(description="Candidates per kind after dedup.")
    taken: dict[str, int] = Field(description="Rows per kind in the mix.")
    targets: dict[str, int | None]
    duplicates: dict[str, int] = Field(description="Candidates dropped as duplicates, per kind.")
    boundary_share: float = Field(description="Share of taken rows whose instance is on the capability boundary.")
    instances: int = Field(description="Distinct instances among the taken rows.")


@dataclass
class Mixed(Generic[V]):
    items: list[MixItem[V]]
    card: MixCard


def tier(rate: float | None) -> tuple[int, float]:
    """Sort key of an instance: boundary (0 < p < 1) first, then hardest first, unknown last."""
    if rate is None:
        return (2, 0.0)
    if 0.0 < rate < 1.0:
        return (0, rate)
    return (1, rate)


def order(items: Sequence[MixItem[V]], rates: Mapping[str, float], rng: random.Random) -> list[MixItem[V]]:
    """Priority order: tier, then round robin across the tier's instances, the RNG breaking ties."""
    by_instance: dict[str, list[MixItem[V]]] = defaultdict(list)
    for it in items:
        by_instance[it.instance_id].append(it)
    noise = {iid: rng.random() for iid in sorted(by_instance)}
    keyed = []
    for iid in sorted(by_instance):
        group = list(by_instance[iid])
        rng.shuffle(group)
        t, r = tier(rates.get(iid))
        keyed += [((t, k, r, noise[iid]), it) for k, it in enumerate(group)]
    keyed.sort(key=lambda x: x[0])
    return [it for _, it in keyed]


def dedup(items: Iterable[MixItem[V]]) -> tuple[list[MixItem[V]], Counter[str]]:
    seen: set[tuple[Hashable, ...]] = set()
    out: list[MixItem[V]] = []
    dups: Counter[str] = Counter()
    for it in items:
        if it.dedup_key in seen:
            dups[it.kind] += 1
            continue
        seen.add(it.dedup_key)
        out.append(it)
    return out, dups


def mix(items: Iterable[MixItem[V]], rates: Mapping[str, float], config: MixConfig, rng: random.Random) -> Mixed[V]:
    """Dedup, order each kind by priority, take each kind's target; see the module docstring."""
    unique, dups = dedup(items)
    taken: dict[str, list[MixItem[V]]] = {}
    targets: dict[str, int | None] = {}
    for kind in KINDS:  # corrections first: the own-success ratio is relative to them
        pool = order([it for it in unique if it.kind == kind], rates, rng)
        n_corr = len(taken.get("correction", []))
        targets[kind] = config.target(kind, n_corr)
        taken[kind] = pool if targets[kind] is None else pool[: targets[kind]]
    chosen = [it for kind in KINDS for it in taken[kind]]
    boundary = sum(tier(rates.get(it.instance_id))[0] == 0 for it in chosen)
    card = MixCard(available={k: sum(it.kind == k for it in unique) for k in KINDS},
                   taken={k: len(taken[k]) for k in KINDS}, targets=targets,
                   duplicates={k: dups[k] for k in KINDS},
                   boundary_share=boundary / len(chosen) if chosen else 0.0,
                   instances=len({it.instance_id for it in chosen}))
    return Mixed(items=chosen, card=card)
