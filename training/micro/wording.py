"""The wording bank the harness-reading recipe (M1) states knowledge items with: `training/micro/wording/<family>.yaml`.

Per knowledge item of the family's card (harness/evolution/cards/<family>.yaml), hand-written paraphrases of its
text and alternative titles; per family, generic guidance sections that state no item (distractors). The card's
own title and text are not in the bank: the generator (training/micro/prompts.py) adds them, so the wording the
harness search writes is one of the wordings M1 saw. The held-out wordings M1 is tested with
(deploy/micro1/heldout_wording/) are never read here.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.evolution.cards import read_family_yaml

WORDING_DIR = Path(__file__).resolve().parent / "wording"


class ItemWording(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    titles: list[str] = Field(min_length=1)
    texts: list[str] = Field(min_length=1)


class Guidance(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str
    text: str = Field(min_length=1)


class WordingBank(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    items: dict[str, ItemWording]
    sections: list[Guidance] = Field(default_factory=list)


@functools.cache
def load_bank(family: str) -> WordingBank:
    """The family's bank; a missing file or a bad field is a ValueError naming the file."""
    path = WORDING_DIR / f"{family}.yaml"
    if not path.exists():
        raise ValueError(f"{path}: no wording bank for {family} (the harness-reading recipe needs one per family)")
    return read_family_yaml(path, WordingBank, family, "wording bank")
