"""Which knowledge items a harness states, read from the system prompt the student receives.

A family's knowledge items are the harness search's knowledge cards (`harness/evolution/cards/<family>.yaml`,
keys shared with the fault menus here). A harness states item K with a prompt section whose id is
`knowledge.K` and whose text is the card's text for K (the library reflector writes exactly that);
`harness/render.py` renders sections as `## title` + text and does not show ids, so the student recognises
K by the card text appearing in its system prompt (whitespace-normalised, case-insensitive). A reworded
statement of the same convention is not recognised: the simulated student reacts to the card's statement.

Convention the cards must keep: an item's `text` is what the stating section says, verbatim.
"""

from __future__ import annotations

import functools
import logging
import re

log = logging.getLogger(__name__)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


@functools.cache
def card_texts(family: str) -> dict[str, str]:
    """Knowledge key -> normalised card text for `family` ({} when the family or the card module has none)."""
    try:
        from harness.evolution.cards import load_card  # the harness search's cards (its own package)
    except ImportError:
        log.warning("harness.evolution.cards is not installed: no knowledge section is recognised")
        return {}
    card = load_card(family)
    return {} if card is None else {item.key: _norm(item.text) for item in card.items}


def stated_keys(family: str, system_prompt: str) -> frozenset[str]:
    prompt = _norm(system_prompt)
    return frozenset(k for k, text in card_texts(family).items() if text and text in prompt)
