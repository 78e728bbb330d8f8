"""The training row of a correction: the student's own prefix, untouched, plus the corrected turn, marked.

    row = corrected_trajectory(view, t_star, replay)   # replay: prefix + chosen candidate + a student continuation

The row keeps turns 0..t*-1 exactly as the student produced them (messages and turn records, token ids and
logprobs included: the context is the student's own) and turn t* as the expert rewrote it, with the tool
results it got; the student's continuation after t* is cut off. Turn t* carries a trigger of kind
`training.dataset.TRAIN_TURN_TRIGGER`, so `build_dataset(..., mask="turns")` trains on it and nothing else.
"""

from __future__ import annotations

from agents.prefix import Prefix
from agents.records import Trajectory, TriggerRecord, trajectory_key
from training.dataset import TRAIN_TURN_TRIGGER

CORRECTION_TAG = "correction"


def _cut(messages: list[dict], turns: int) -> list[dict]:
    """Messages before the assistant message of turn `turns` (all of them when there is none)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return messages[:starts[turns]] if turns < len(starts) else list(messages)


def corrected_trajectory(view: Trajectory, t_star: int, replay: Trajectory, tag: str = CORRECTION_TAG,
                         trained: int = 1) -> Trajectory:
    """The corrected trajectory of `view` at `t_star`, from `replay` (which continued `prefix_of(view, t*)` with
    the corrected turn(s)); turns t*..t*+trained-1 are marked and kept (suffix mode: trained > 1). Raises
    ValueError when `replay` does not hold the student's prefix unchanged."""
    view = view.require_view("corrected_trajectory")
    if len(replay.turns) < t_star + trained:
        raise ValueError(f"replay {replay.id} has {len(replay.turns)} turns, needs turns {t_star}..{t_star + trained - 1}")
    if _cut(replay.messages, t_star) != _cut(view.messages, t_star) or \
            [t.model_dump() for t in replay.turns[:t_star]] != [t.model_dump() for t in view.turns[:t_star]]:
        raise ValueError(f"replay {replay.id} does not start with the student's first {t_star} turns of {view.id}")
    messages = _cut(replay.messages, t_star + trained)
    turns = [t.model_copy(deep=True) for t in replay.turns[:t_star + trained]]
    for k in range(t_star, t_star + trained):
        mark = TriggerRecord(component_id="correction", turn=k, kind=TRAIN_TURN_TRIGGER,
                             detail=f"expert-corrected turn of {view.id}")
        turns[k] = turns[k].model_copy(update={"triggers": [*turns[k].triggers, mark]})
    key = Prefix(messages=messages).key
    out = replay.model_copy(update={
        "messages": messages, "turns": turns, "tag": tag, "prefix_turns": t_star, "injected_faults": [],
        "model_id": view.model_id, "seed": view.seed,
    })
    return out.model_copy(update={"id": trajectory_key(view.instance.id, view.harness_id, view.model_id, view.seed,
                                                       tag, key)})
