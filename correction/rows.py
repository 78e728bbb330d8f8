"""The training row of a correction: the student's own turns, untouched, around the corrected turn, marked.

    row = corrected_trajectory(view, t_star, replay, suffix="none", loss_on="corrected")

`replay` continued `prefix_of(view, t*)` with the corrected turn(s) (and, for a verifier replay, with the
student's own continuation). The row keeps turns 0..t*-1 exactly as the student produced them (messages and
turn records, token ids and logprobs included: the context is the student's own) and turn t* as the expert
rewrote it, with the tool results it got. What comes after t* is `suffix`:

    none      nothing: the row ends after the corrected turn's tool results (the default)
    replay    the student's own continuation from the corrected turn in `replay` (on-policy, and consistent
              with the corrected turn's tool results)
    original  the student's original turns after t* (the literal reading of "every other step kept as the
              student wrote it"; their tool results followed the wrong turn, not the corrected one)

Loss (`loss_on`): `corrected` marks turn t* (t*..t*+m in suffix mode) and nothing else; `all_student` also
marks every student turn kept: the prefix, and the suffix unless it comes from a replay that did not pass
(a failed continuation carries no loss). Marks are triggers of kind `training.dataset.TRAIN_TURN_TRIGGER`,
so `build_dataset(..., mask="turns")` trains on exactly the marked turns.
"""

from __future__ import annotations

from typing import Literal

from agents.prefix import Prefix
from agents.records import Trajectory, TriggerRecord, TurnRecord, trajectory_key
from training.dataset import TRAIN_TURN_TRIGGER

CORRECTION_TAG = "correction"
Suffix = Literal["none", "replay", "original"]
LossOn = Literal["corrected", "all_student"]
SUFFIXES: tuple[Suffix, ...] = ("none", "replay", "original")
LOSS_ON: tuple[LossOn, ...] = ("corrected", "all_student")


def _cut(messages: list[dict], turns: int) -> list[dict]:
    """Messages before the assistant message of turn `turns` (all of them when there is none)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return messages[:starts[turns]] if turns < len(starts) else list(messages)


def _after(messages: list[dict], turns: int) -> list[dict]:
    """Messages from the assistant message of turn `turns` on (none when there is no such turn)."""
    return list(messages[len(_cut(messages, turns)):])


def _mark(turn: TurnRecord, k: int, detail: str) -> TurnRecord:
    mark = TriggerRecord(component_id="correction", turn=k, kind=TRAIN_TURN_TRIGGER, detail=detail)
    return turn.model_copy(update={"triggers": [*turn.triggers, mark]})


def _spliced(view: Trajectory, replay: Trajectory, end: int, suffix: Suffix) -> tuple[list[dict], list[TurnRecord]]:
    """Messages and turn records: the replay's first `end` turns, then the chosen suffix."""
    head_msgs, head_turns = _cut(replay.messages, end), [t.model_copy(deep=True) for t in replay.turns[:end]]
    if suffix == "replay":
        return list(replay.messages), [t.model_copy(deep=True) for t in replay.turns]
    if suffix == "original":
        tail = [t.model_copy(deep=True) for t in view.turns[end:]]
        return head_msgs + _after(view.messages, end), head_turns + tail
    return head_msgs, head_turns


def _trains_suffix(suffix: Suffix, loss_on: LossOn, replay: Trajectory) -> bool:
    if loss_on != "all_student" or suffix == "none":
        return False
    return suffix == "original" or replay.passed


def corrected_trajectory(view: Trajectory, t_star: int, replay: Trajectory, tag: str = CORRECTION_TAG,
                         trained: int = 1, suffix: Suffix = "none", loss_on: LossOn = "corrected") -> Trajectory:
    """The corrected trajectory of `view` at `t_star`, from `replay` (which continued `prefix_of(view, t*)` with
    the corrected turn(s)); turns t*..t*+trained-1 are the corrected ones (suffix mode: trained > 1). See the
    module docstring for `suffix` and `loss_on`. Raises ValueError when `replay` does not hold the student's
    prefix unchanged."""
    view = view.require_view("corrected_trajectory")
    end = t_star + trained
    if len(replay.turns) < end:
        raise ValueError(f"replay {replay.id} has {len(replay.turns)} turns, needs turns {t_star}..{end - 1}")
    if _cut(replay.messages, t_star) != _cut(view.messages, t_star) or \
            [t.model_dump() for t in replay.turns[:t_star]] != [t.model_dump() for t in view.turns[:t_star]]:
        raise ValueError(f"replay {replay.id} does not start with the student's first {t_star} turns of {view.id}")
    messages, turns = _spliced(view, replay, end, suffix)
    marked = set(range(t_star, end))
    if loss_on == "all_student":
        marked |= set(range(t_star))
    if _trains_suffix(suffix, loss_on, replay):
        marked |= set(range(end, len(turns)))
    for k in sorted(marked):
        what = "expert-corrected" if t_star <= k < end else "student's own"
        turns[k] = _mark(turns[k], k, f"{what} turn of {view.id}")
    turns = [t.model_copy(update={"index": k}) for k, t in enumerate(turns)]
    key = Prefix(messages=messages).key
    kept_from = view if suffix == "original" else replay
    out = replay.model_copy(update={
        "messages": messages, "turns": turns, "tag": tag, "prefix_turns": t_star, "injected_faults": [],
        "model_id": view.model_id, "seed": view.seed, "verdict": kept_from.verdict,
        "stop_reason": kept_from.stop_reason,
    })
    return out.model_copy(update={"id": trajectory_key(view.instance.id, view.harness_id, view.model_id, view.seed,
                                                       tag, key)})
