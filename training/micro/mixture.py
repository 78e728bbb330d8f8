"""The harness mixture the micro student's demonstrations run under: h0 and random valid variations of it.

Each demonstration draws one harness from a seeded RNG:
- `h0` (the family's baseline harness), with probability `p_h0`;
- `hK` = h0 plus every knowledge item of the family's card as a prompt section (`knowledge.<key>`), with
  probability `p_hk`. This is the NAMED harness of the mixture that M0 is measured under beside h0;
- otherwise a random variation made with the typed edits (`harness.edits`): a random subset of the card's
  knowledge sections, maybe one of h0's sections dropped, maybe the card's output-requirement hooks
  (`Require` on finish), maybe a context policy that truncates long tool results.

The `native` flawed policy reacts to all of these (a stated knowledge item lowers that item's fault rate, a
hook's message is followed, a truncated result changes what it sees), so the demonstrations pair harness
text with behaviour: that is what should make M0 read its harness.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from harness.baseline import baseline
from harness.edits import AddHook, HarnessEdit, InsertSection, RemoveSection, SetContextPolicy, apply_edits
from harness.evolution.cards import load_card, section_id
from harness.hooks import Hook, OnFinish, Require
from harness.program import Harness, PromptSection

NAMED = "hK"  # h0 + every knowledge item of the card


def knowledge_sections(family: str, keys: list[str] | None = None) -> list[InsertSection]:
    card = load_card(family)
    items = [i for i in (card.items if card else []) if keys is None or i.key in keys]
    return [InsertSection(section=PromptSection(id=section_id(i.key), kind="domain_recipe", title=i.title,
                                                text=i.text, use_pattern=i.use_pattern)) for i in items]


def named_harness(family: str) -> Harness:
    """`hK`: h0 with every knowledge item of the family's card stated (the mixture's named harness)."""
    return apply_edits(baseline(family), knowledge_sections(family))


def write_named_harnesses(out: Path, families: Sequence[str]) -> Path:
    """`out/<family>.yaml` = hK of each family: a harness DIR for `--harness` (`coevo rollout`, run configs)."""
    for family in families:
        named_harness(family).dump(Path(out) / f"{family}.yaml")
    return Path(out)


def _output_hooks(family: str) -> list[AddHook]:
    card = load_card(family)
    return [AddHook(hook=Hook(id=f"require-{r.id}", when=OnFinish(), then=Require(tool=r.tool, message=r.message),
                              max_fires=2, note="micro mixture: output requirement"))
            for r in (card.outputs if card else [])]


_GUIDANCE = (
    "Read every input the task names before you write anything; then write each output once.",
    "Work in small steps: one tool call per turn, and check each result before the next call.",
    "Before finishing, check that every output the instruction asks for exists and is complete.",
)


def random_variation(family: str, rng: random.Random) -> Harness:
    """h0 with a random, valid set of typed edits (see the module docstring)."""
    h0 = baseline(family)
    card = load_card(family)
    keys = [i.key for i in (card.items if card else []) if rng.random() < 0.5]
    edits: list[HarnessEdit] = list(knowledge_sections(family, keys))
    droppable = [s.id for s in h0.sections if s.kind not in ("role", "task")]
    if droppable and rng.random() < 0.3:
        edits.append(RemoveSection(id=rng.choice(droppable)))
    if rng.random() < 0.3:
        edits.append(InsertSection(section=PromptSection(id="guidance.method", kind="task_guidance",
                                                         title="Method", text=rng.choice(_GUIDANCE))))
    if rng.random() < 0.4:
        edits.extend(_output_hooks(family))
    if rng.random() < 0.2:
        edits.append(SetContextPolicy(changes={"max_tool_result_chars": rng.choice([4000, 8000])}))
    return apply_edits(h0, edits)


def draw(family: str, rng: random.Random, p_h0: float = 0.25, p_hk: float = 0.25) -> tuple[str, Harness]:
    """One harness of the mixture and its label (`h0`, `hK` or `var`)."""
    u = rng.random()
    if u < p_h0:
        return "h0", baseline(family)
    if u < p_h0 + p_hk:
        return NAMED, named_harness(family)
    return "var", random_variation(family, rng)
