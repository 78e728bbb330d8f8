"""`library`: the offline reflector (the embedded default). Evidence -> edits from the component library.

It collects every rule's suggestions (library_rules.py), keeps one per component, and draws up to
`budget.max_edits` of them by weight without replacement using the injected `random.Random`, so different
search seeds explore different edits and the same seed always proposes the same ones. Costs nothing.
"""

from __future__ import annotations

import random

from harness.evolution.cards import load_card
from harness.evolution.records import Proposal, ProposalBudget, ProposedEdit, ReflectiveDataset
from harness.evolution.reflectors.library_rules import Suggestion, suggestions
from harness.program import Harness


def draw(pool: list[Suggestion], k: int, rng: random.Random) -> list[Suggestion]:
    """Up to k suggestions with distinct targets, weighted sampling without replacement (Efraimidis-Spirakis)."""
    best: dict[str, Suggestion] = {}
    for s in pool:
        if s.target not in best or s.weight > best[s.target].weight:
            best[s.target] = s
    keyed = sorted(best.values(), key=lambda s: (s.rule, s.target))
    ranked = sorted(keyed, key=lambda s: rng.random() ** (1.0 / s.weight), reverse=True)
    return ranked[:k]


class LibraryReflector:
    """See the module docstring; `family` picks the knowledge card."""

    name = "library"

    def __init__(self, family: str) -> None:
        self.family = family
        self.card = load_card(family)

    def propose(self, harness: Harness, dataset: ReflectiveDataset, budget: ProposalBudget,
                rng: random.Random) -> Proposal:
        if not dataset.failures:
            return Proposal()
        chosen = draw(suggestions(harness, dataset, self.card), budget.max_edits, rng)
        return Proposal(edits=[ProposedEdit(edit=s.edit, rationale=f"[{s.rule}] {s.rationale}") for s in chosen])
