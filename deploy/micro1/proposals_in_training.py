"""How many of the harness texts a round's search proposed also occur verbatim in M1's training prompts.

M1's training prompts state knowledge items in the card's words (the generator's `p_card` share) or in the
bank's paraphrases (training/micro/wording/); the library reflector proposes the card's words. This counts, over
every section text the search's candidates proposed (runs/<run_id>/.../lineage.jsonl), how many are one of the
texts the generator can write (the card's item texts and titles, the bank's texts and guidance sections): those
the student saw in training, as opposed to wordings it never saw.

    PYTHONPATH=$PWD .venv/bin/python deploy/micro1/proposals_in_training.py runs/<run_id>
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from harness.evolution.cards import load_card
from training.micro.wording import load_bank


def generator_texts(family: str) -> set[str]:
    card, bank = load_card(family), load_bank(family)
    texts = {i.text for i in card.items} if card else set()
    texts |= {t for w in bank.items.values() for t in w.texts} | {g.text for g in bank.sections}
    return {" ".join(t.split()) for t in texts}


def proposed_sections(lineage: Path) -> list[tuple[str, bool, str]]:
    """(family-less) every section text an edit of a candidate proposed: (section id, accepted, text)."""
    out = []
    for line in lineage.read_text().splitlines():
        cand = json.loads(line)
        for e in cand.get("edits", []):
            edit = e.get("edit", {})
            section = edit.get("section") or {}
            text = section.get("text") or (edit.get("text") if edit.get("op") == "set_section" else None)
            if text:
                out.append((section.get("id") or edit.get("id", ""), bool(cand.get("accepted")), text))
    return out


def main(run: Path) -> None:
    totals: Counter[str] = Counter()
    for lineage in sorted(run.rglob("lineage.jsonl")):
        family = next((p for p in lineage.parts if load_card(p) is not None), None)
        if family is None:
            continue
        seen = generator_texts(family)
        for sid, accepted, text in proposed_sections(lineage):
            verbatim = " ".join(text.split()) in seen
            totals["proposed"] += 1
            totals["verbatim"] += verbatim
            totals["accepted"] += accepted
            totals["accepted_verbatim"] += accepted and verbatim
            print(f"{family}: {sid} accepted={accepted} in_training_prompts={verbatim}")
    print(f"proposed section texts {totals['proposed']}, of which in M1's training prompts verbatim "
          f"{totals['verbatim']}; accepted {totals['accepted']}, of which verbatim {totals['accepted_verbatim']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
