"""The harness generator of the harness-reading recipe (M1): typed harnesses whose prompts vary widely around
the knowledge items they state, and minimal pairs that differ in one item only.

A generated harness is h0 (its role section, tools, context) plus:
- a random subset of the family's knowledge items (card: harness/evolution/cards/<family>.yaml), each a
  `domain_recipe` section `knowledge.<key>` worded either as the card words it (probability `p_card`: the
  wording the harness search's library reflector writes) or as one of the bank's paraphrases, under the card's
  title or one of the bank's (training/micro/wording.py). How many items: a share drawn per harness from
  U(0, 1), so prompts range from h0's length to hK's;
- sometimes one or two guidance sections that state no item (distractors);
- the sections in random order (the role section first most of the time);
- for full demonstrations (`extras`): sometimes the card's output-requirement hooks and a context policy that
  truncates long tool results, the other edits the search proposes.

`generate` returns the harness and the set of items it states (the demonstration policy's ground truth:
training/micro/policies.py applies a stated item always, an unstated one with the recipe's probability).
`minimal_pair` returns two harnesses that differ only in whether one item is stated (same other sections, same
wording, same order, the item at a random place). Everything is drawn from the injected `random.Random`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from harness.baseline import baseline
from harness.context import ContextPolicy
from harness.evolution.cards import KnowledgeItem, load_card, section_id
from harness.hooks import Hook, OnFinish, Require
from harness.program import Harness, PromptSection
from training.micro.wording import load_bank

P_CARD = 0.35  # share of stated items worded as the card words them
P_ROLE_FIRST = 0.85


def item_section(family: str, item: KnowledgeItem, rng: random.Random, p_card: float = P_CARD) -> PromptSection:
    """The section that states `item`, worded by the card or by a paraphrase of the bank."""
    bank = load_bank(family).items.get(item.key)
    use_card = bank is None or rng.random() < p_card
    title = item.title if bank is None or rng.random() < p_card else rng.choice(bank.titles)
    text = item.text if use_card else rng.choice(bank.texts)
    return PromptSection(id=section_id(item.key), kind="domain_recipe", title=title, text=text)


def _distractors(family: str, rng: random.Random) -> list[PromptSection]:
    pool = load_bank(family).sections
    n = rng.choice((0, 0, 1, 1, 2)) if pool else 0
    return [PromptSection(id=f"guidance.g{i}", kind="task_guidance", title=g.title, text=g.text)
            for i, g in enumerate(rng.sample(pool, min(n, len(pool))))]


def _order(role: list[PromptSection], rest: list[PromptSection], rng: random.Random) -> list[PromptSection]:
    rng.shuffle(rest)
    if not role or rng.random() < P_ROLE_FIRST:
        return role + rest
    at = rng.randint(0, len(rest))
    return rest[:at] + role + rest[at:]


def _extras(family: str, h: Harness, rng: random.Random) -> Harness:
    card = load_card(family)
    hooks = list(h.hooks)
    if card and rng.random() < 0.3:
        hooks += [Hook(id=f"require-{r.id}", when=OnFinish(), then=Require(tool=r.tool, message=r.message),
                       max_fires=2, note="generated: output requirement") for r in card.outputs]
    context = h.context
    if rng.random() < 0.15:
        context = ContextPolicy(**{**h.context.model_dump(), "max_tool_result_chars": rng.choice([4000, 8000])})
    return h.model_copy(update={"hooks": hooks, "context": context})


def _base(family: str, rng: random.Random, forced: Mapping[str, bool],
          p_card: float) -> tuple[list[PromptSection], list[PromptSection], set[str]]:
    """(role sections, the other sections, stated keys) before ordering."""
    h0 = baseline(family)
    card = load_card(family)
    share = rng.random()
    role = [s for s in h0.sections if s.kind == "role"]
    rest = [s for s in h0.sections if s.kind != "role"]
    stated: set[str] = set()
    for item in card.items if card else []:
        if forced.get(item.key, rng.random() < share):
            rest.append(item_section(family, item, rng, p_card))
            stated.add(item.key)
    return role, rest + _distractors(family, rng), stated


def _harness(family: str, sections: list[PromptSection], name: str) -> Harness:
    return baseline(family).model_copy(update={"name": name, "sections": sections})


def generate(family: str, rng: random.Random, *, forced: Mapping[str, bool] | None = None, p_card: float = P_CARD,
             extras: bool = False) -> tuple[Harness, frozenset[str]]:
    """A generated harness and the knowledge keys it states; `forced` fixes some items stated (True) or not."""
    role, rest, stated = _base(family, rng, forced or {}, p_card)
    h = _harness(family, _order(role, rest, rng), f"generated/{family}")
    if extras:
        h = _extras(family, h, rng)
    return Harness.model_validate(h.model_dump()), frozenset(stated)


def minimal_pair(family: str, key: str, rng: random.Random, *, forced: Mapping[str, bool] | None = None,
                 p_card: float = P_CARD) -> tuple[Harness, Harness]:
    """(harness stating `key`, the same harness without it): one random base, the item's section inserted at a
    random place; `forced` fixes other items."""
    card = load_card(family)
    if card is None:
        raise ValueError(f"{family} has no knowledge card: no item to pair on")
    item = card.item(key)
    role, rest, _ = _base(family, rng, {**(forced or {}), key: False}, p_card)
    without = _order(role, rest, rng)
    at = rng.randint(1 if without and without[0].kind == "role" else 0, len(without))
    with_item = without[:at] + [item_section(family, item, rng, p_card)] + without[at:]
    return (Harness.model_validate(_harness(family, with_item, f"generated/{family}").model_dump()),
            Harness.model_validate(_harness(family, without, f"generated/{family}").model_dump()))
