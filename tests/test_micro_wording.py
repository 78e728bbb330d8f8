"""The wording banks of the harness-reading recipe (M1) and its held-out test wordings.

training/micro/wording/<family>.yaml (read by the generator) paraphrases every item of the family's knowledge
card; deploy/micro1/heldout_wording/<family>.yaml (never read by the generator) words every item once more, so
M1 can be tested on wordings it never saw: no held-out text may share a run of 6 consecutive words with the
card's text or any bank text of the same item. Plain file checks: no model, no episode.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from training.micro.wording import WORDING_DIR, load_bank

ROOT = Path(__file__).resolve().parents[1]
CARD_DIR = ROOT / "harness" / "evolution" / "cards"
HELDOUT_DIR = ROOT / "deploy" / "micro1" / "heldout_wording"
FAMILIES = ["code_refactor", "payroll_audit", "anomaly_detection"]
DECIDING = {  # the items that decide M1's behaviour: 10 paraphrases each, every other item 4
    "code_refactor": {"update_every_reference", "run_tests_before_finishing"},
    "payroll_audit": {"break_deduction_over_six_hours"},
    "anomaly_detection": {"bounds_are_normal"},
}
N_TITLES, N_DECIDING, N_OTHER, N_SECTIONS, RUN = 4, 10, 4, 12, 6


def words(text: str) -> list[str]:
    """Lower-cased words, punctuation stripped (`clock_in` stays one word, `-s` becomes `s`)."""
    return re.findall(r"[a-z0-9_]+", text.lower())


def runs(text: str, n: int = RUN) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def norm(text: str) -> str:
    return " ".join(words(text))


def card_items(family: str) -> list[dict]:
    return yaml.safe_load((CARD_DIR / f"{family}.yaml").read_text())["items"]


def heldout(family: str) -> dict:
    return yaml.safe_load((HELDOUT_DIR / f"{family}.yaml").read_text())


def test_words_and_runs():
    assert words("Run python3 -m unittest discover -s tests -t . now") == [
        "run", "python3", "m", "unittest", "discover", "s", "tests", "t", "now"]
    assert ("a", "b", "c", "d", "e", "f") in runs("A, b; c. d e-f g")
    assert not runs("only five words are here")


@pytest.mark.parametrize("family", FAMILIES)
def test_bank_covers_the_card(family):
    bank = load_bank(family)  # parses and validates the YAML (training/micro/wording.py)
    assert bank.family == family
    items = card_items(family)
    assert list(bank.items) == [i["key"] for i in items], "bank keys must be the card's keys, in its order"
    assert DECIDING[family] <= set(bank.items)
    for item in items:
        entry = bank.items[item["key"]]
        want = N_DECIDING if item["key"] in DECIDING[family] else N_OTHER
        assert len(entry.texts) == want, f"{item['key']}: {len(entry.texts)} texts, want {want}"
        assert len(entry.titles) == N_TITLES, f"{item['key']}: {len(entry.titles)} titles, want {N_TITLES}"
        assert norm(item["title"]) not in {norm(t) for t in entry.titles}, f"{item['key']}: card title in bank"
        assert norm(item["text"]) not in {norm(t) for t in entry.texts}, f"{item['key']}: card text in bank"
        assert len({norm(t) for t in entry.texts}) == len(entry.texts), f"{item['key']}: duplicate texts"
        assert len({norm(t) for t in entry.titles}) == len(entry.titles), f"{item['key']}: duplicate titles"


@pytest.mark.parametrize("family", FAMILIES)
def test_bank_distractor_sections(family):
    bank = load_bank(family)
    assert len(bank.sections) == N_SECTIONS
    assert len({norm(s.title) for s in bank.sections}) == N_SECTIONS, "duplicate distractor titles"
    item_texts = {norm(i["text"]) for i in card_items(family)}
    item_texts |= {norm(t) for e in bank.items.values() for t in e.texts}
    assert all(s.title and norm(s.text) not in item_texts for s in bank.sections)


@pytest.mark.parametrize("family", FAMILIES)
def test_heldout_covers_the_card(family):
    doc = heldout(family)
    assert doc["family"] == family and "never read by the generator" in doc["note"]
    assert [e["key"] for e in doc["items"]] == [i["key"] for i in card_items(family)], \
        "held-out keys must be the card's keys, in its order"
    assert all(set(e) == {"key", "title", "text"} and e["title"].strip() and e["text"].strip() for e in doc["items"])


@pytest.mark.parametrize("family", FAMILIES)
def test_heldout_is_new_wording(family):
    bank = load_bank(family)
    cards = {i["key"]: i for i in card_items(family)}
    problems = []
    for e in heldout(family)["items"]:
        card, entry = cards[e["key"]], bank.items[e["key"]]
        seen_titles = {norm(card["title"])} | {norm(t) for t in entry.titles}
        if norm(e["title"]) in seen_titles:
            problems.append(f"{e['key']}: title {e['title']!r} is the card's or the bank's")
        for source, text in [("card", card["text"]), *((f"bank[{i}]", t) for i, t in enumerate(entry.texts))]:
            shared = runs(e["text"]) & runs(text)
            if shared:
                problems.append(f"{e['key']}: shares {sorted(' '.join(r) for r in shared)[:3]} with {source}")
    assert not problems, "\n".join(problems)


def test_generator_never_reads_heldout():
    """The held-out folder is not where the generator's loader looks."""
    assert WORDING_DIR.resolve() != HELDOUT_DIR.resolve()
    assert "heldout" not in (ROOT / "training" / "micro" / "prompts.py").read_text().replace(
        "deploy/micro1/heldout_wording/", "")


@pytest.mark.parametrize("family,key,word", [
    ("payroll_audit", "break_deduction_over_six_hours", "unpaid"),
    ("payroll_audit", "break_deduction_over_six_hours", "deduct"),
    ("code_refactor", "update_every_reference", "grep"),
    ("code_refactor", "update_every_reference", "whole repository"),
    ("code_refactor", "run_tests_before_finishing", "python3 -m unittest discover -s tests -t ."),
    ("anomaly_detection", "bounds_are_normal", "exactly"),
    ("anomaly_detection", "bounds_are_normal", "bound"),
])
def test_deciding_items_vary_their_key_words(family, key, word):
    """M1 must recognise the rule, not one keyword of the card's wording: no key word is in every paraphrase."""
    texts = load_bank(family).items[key].texts
    assert sum(word in t.lower() for t in texts) < len(texts)
