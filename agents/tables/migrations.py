"""Stored trajectory tables of older versions -> today's records (read-time conversion).

Version 1 (one table, the whole Trajectory as `record_json`): every turn held its full `prompt_token_ids`,
now stored by delta; a hook's stop was recorded as stop reason `error` with "stopped by hook '<id>'" in the
error text, now `harness_stop`. Everything else reads as is (new fields take their defaults).
"""

from __future__ import annotations

import json
from typing import Any

from agents.records import Trajectory
from agents.token_ids import encode_prompt, next_base

HOOK_STOP_V1 = "stopped by hook '"


def from_v1(record_json: str) -> Trajectory:
    data: dict[str, Any] = json.loads(record_json)
    base: list[int] = []
    for turn in data.get("turns", []):
        prompt = turn.pop("prompt_token_ids", None)
        if prompt is not None:
            turn["prompt_ids_reused"], turn["prompt_ids_added"], turn["prompt_ids_copy"] = encode_prompt(base, prompt)
        base = next_base(prompt, turn.get("completion_token_ids"))
    if data.get("stop_reason") == "error" and str(data.get("error", "")).startswith(HOOK_STOP_V1):
        data["stop_reason"] = "harness_stop"
    return Trajectory.model_validate(data)
