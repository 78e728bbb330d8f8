"""What the correction arm trains on: the kept corrections, each deduplicated by (instance, t*, corrected turn: its
calls, or its text when it has none), and the student's own successes on the same train samples (converted to
the student's form, token ids kept), deduplicated by what they do (`correction.roles.actions_key`): samples of
one instance that acted alike count once.

    items = correction_arm_items(result.corrections, result.corrected, samples)
    mixed = mix(items, pass_rates(samples), MixConfig(...), rng)      # correction/mix.py: the arm's set

A correction counts only with status `corrected` and a located t*; a success the student's form cannot hold
(`training.convert.ConversionError`) is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.records import Trajectory
from correction.imitation import TAG_SELF, to_student
from correction.mix import MixItem, correction_item, success_item
from correction.records import Correction
from correction.roles import actions_key, effect_key
from training.convert import ConversionError


def correction_arm_items(corrections: Sequence[Correction], corrected: Sequence[Trajectory],
                         samples: Sequence[Trajectory]) -> list[MixItem[Trajectory]]:
    """The corrected rows (in `corrected`'s order), then the passing `samples` as own successes."""
    by_row = {c.corrected_trajectory_id: c for c in corrections if c.status == "corrected"}
    items: list[MixItem[Trajectory]] = []
    for row in corrected:
        corr = by_row.get(row.id)
        if corr is None or corr.t_star is None:
            continue
        chosen = corr.candidates[corr.chosen] if corr.chosen is not None else None
        key = effect_key(chosen.message) if chosen is not None else row.id
        items.append(correction_item(row, row.instance.id, corr.t_star, key))
    for t in samples:
        if t.passed:
            try:
                items.append(success_item(to_student(t, TAG_SELF, keep_token_ids=True), "self_success",
                                          key=actions_key(t)))
            except ConversionError:
                continue
    return items
