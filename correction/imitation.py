"""The imitation arm: the expert's successful trajectories under a harness h, in the student's format, mixed with
the student's own successes under h, every assistant turn trained (the paper's control arm).

    out = build_imitation_set(expert_rollouts, student_rollouts, harness_of, MixConfig(...), random.Random(0))
    write_trajectories(dir / "imitation.parquet", out.trajectories)   # `coevo train --data dir` takes them

Steps, in order:
1. Keep score 1.0 only (`successes`; the one `passed` filter the flows use too).
2. The leakage guard (correction/leakage.py) on every kept row: a val or test instance is an error.
3. Same harness: every kept trajectory must have run under h for its family (`harness_of(family)`), and its
   system message must be h's rendered prompt; tools are those h exposed to the model (stored with the
   trajectory by the rollout runtime) and must not include a tool h hides. Anything else is an error that
   names the trajectory: a row under another harness teaches the student a context it will not see.
4. To the student's format (`to_student`): the conversation through `training.convert.to_student_messages`
   (the expert's tool-call format -> canonical calls; fields the student cannot render dropped), harness-
   injected user messages kept as they are. Expert token ids and logprobs are dropped (another tokenizer);
   the student's own successes keep theirs. A conversation that cannot be converted is dropped and counted.
5. Every assistant turn is marked trained (a `train_turn` trigger naming the source trajectory), so the rows
   train the same with `--mask assistant` or `--mask turns`; the tag is `imitation` or `self_success`.
6. Mix (correction/mix.py): imitation rows (default all) plus own successes (default `self_successes`),
   capability-boundary instances first; own successes that acted alike on one instance count once
   (`correction.roles.actions_key`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory, TriggerRecord
from correction.leakage import check_no_leakage
from correction.mix import MixCard, MixConfig, mix, pass_rates, success_item
from correction.roles import actions_key
from harness.program import Harness
from harness.render import system_prompt
from training.convert import ConversionError, to_student_messages
from training.dataset import TRAIN_TURN_TRIGGER

MASK = "assistant"
DATA_FILTER = "passed"  # what `successes` keeps (verifier score 1.0); part of the flows' dataset key
TAG_IMITATION = "imitation"
TAG_SELF = "self_success"
# Imitation sets only mix the student's successes; the paper's ~400 corrections belong to the correction arm.
DEFAULT_MIX = MixConfig(corrections=0, self_successes=50, imitation=None)


class HarnessMismatch(ValueError):
    """A trajectory did not run under the harness the set is built for (names trajectory and both ids)."""


class ImitationCard(BaseModel):
    """What went into an imitation set and what was left out."""

    model_config = ConfigDict(extra="forbid")

    expert_read: int
    expert_successes: int
    student_read: int
    student_successes: int
    dropped: dict[str, int] = Field(description="Successes that could not be converted, per reason.")
    mix: MixCard
    sources: dict[str, str] = Field(description="Row trajectory id -> source trajectory id (lineage).")


class ImitationSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectories: list[Trajectory]
    card: ImitationCard


def successes(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """Verifier score 1.0 only: the trajectories an imitation set may learn from."""
    return [t for t in trajectories if t.verdict.score >= 1.0]


def check_harness(t: Trajectory, h: Harness) -> None:
    """Raise HarnessMismatch unless `t` ran under `h` as `h` renders it (see the module docstring, step 3)."""
    who = f"trajectory {t.id} ({t.instance.id}, {t.model_id})"
    if t.harness_id != h.id:
        raise HarnessMismatch(f"{who} ran under harness {t.harness_id}, not {h.id} ({h.name or 'unnamed'}); "
                              "imitation rows must come from the harness the student is trained under")
    first = t.messages[0] if t.messages else {}
    if first.get("role") != "system" or first.get("content") != system_prompt(h):
        raise HarnessMismatch(f"{who}: its system message is not harness {h.id}'s rendered prompt")
    names = {(x.get("function") or {}).get("name") for x in t.tools}
    hidden = sorted(names & set(h.tools.hidden))
    if hidden:
        raise HarnessMismatch(f"{who}: its tools include {hidden}, which harness {h.id} hides")


def to_student(t: Trajectory, tag: str, keep_token_ids: bool) -> Trajectory:
    """`t` in the student's format with every assistant turn marked trained; raises ConversionError."""
    messages = to_student_messages(t.messages)
    n_assistant = sum(m["role"] == "assistant" for m in messages)
    if n_assistant != len(t.turns):
        raise ConversionError("turn_records_mismatch", f"{n_assistant} assistant messages but {len(t.turns)} turn records")
    turns = []
    for turn in t.turns:
        mark = TriggerRecord(component_id=f"source:{t.id}", turn=turn.index, kind=TRAIN_TURN_TRIGGER, detail=tag)
        update: dict[str, object] = {"triggers": [*turn.triggers, mark]}
        if not keep_token_ids:
            update.update(prompt_ids_reused=0, prompt_ids_added=None, prompt_ids_copy=None, completion_token_ids=None,
                          logprobs=None)
        turns.append(turn.model_copy(update=update))
    out = t.model_copy(update={"messages": messages, "turns": turns, "tag": tag, "injected_faults": []})
    return out.with_id(prefix_key=f"{tag}:{t.id}")


def _convert(trajs: list[Trajectory], tag: str, keep_ids: bool, harness_of: Callable[[str], Harness],
             dropped: Counter[str]) -> list[Trajectory]:
    out = []
    for t in trajs:
        check_harness(t, harness_of(t.instance.family))
        try:
            out.append(to_student(t, tag, keep_ids))
        except ConversionError as e:
            dropped[e.reason] += 1
    return out


def build_imitation_set(expert: Iterable[Trajectory], student: Iterable[Trajectory],
                        harness_of: Callable[[str], Harness], config: MixConfig = DEFAULT_MIX,
                        rng: random.Random | None = None) -> ImitationSet:
    """The imitation set (see the module docstring). `student` holds all the student's rollouts under h (its
    pass rates order the mix); `harness_of(family)` is h for that family."""
    expert, student = list(expert), list(student)
    kinds: list[tuple[list[Trajectory], Literal["imitation", "self_success"], bool]] = [
        (check_no_leakage(successes(expert), "imitation set (expert successes)"), TAG_IMITATION, False),
        (check_no_leakage(successes(student), "imitation set (student successes)"), TAG_SELF, True),
    ]
    dropped: Counter[str] = Counter()
    items = [success_item(row, kind, key=actions_key(row) if kind == TAG_SELF else None) for trajs, kind, keep in kinds
             for row in _convert(trajs, kind, keep, harness_of, dropped)]
    mixed = mix(items, pass_rates(student), config, rng or random.Random(0))
    rows = check_no_leakage([it.value for it in mixed.items], "imitation set")
    sources = {r.id: r.turns[0].triggers[-1].component_id.removeprefix("source:") for r in rows if r.turns}
    card = ImitationCard(expert_read=len(expert), expert_successes=len(kinds[0][0]), student_read=len(student),
                         student_successes=len(kinds[1][0]), dropped=dict(sorted(dropped.items())), mix=mixed.card,
                         sources=sources)
    return ImitationSet(trajectories=rows, card=card)


ROWS_FILE = "imitation.parquet"
CARD_FILE = "card.json"


def write_imitation_set(built: ImitationSet, out_dir: str | Path) -> Path:
    """out_dir/imitation.parquet (+ its turn table; what `coevo train --data out_dir` reads) and card.json (last)."""
    from agents.tables.trajectories import write_trajectories

    out = Path(out_dir)
    write_trajectories(out / ROWS_FILE, built.trajectories)
    tmp = out / (CARD_FILE + ".tmp")
    tmp.write_text(built.card.model_dump_json(indent=2))
    tmp.replace(out / CARD_FILE)
    return out
