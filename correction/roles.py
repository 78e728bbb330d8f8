"""Small shared helpers: a role for a family, the job for a prefix continuation, a turn's effect, a trajectory's
actions as one key (two samples that act alike are one row)."""

from __future__ import annotations

import json
from typing import Any

from agents.jobs import Limits, RolloutJob
from agents.prefix import Prefix
from agents.records import ModelRole, Trajectory, TurnRecord
from harness.program import Harness


def family_role(role: ModelRole, family: str) -> ModelRole:
    """`role` with `{family}` in its model string filled (oracle/{family} -> oracle/stock_alert)."""
    return role.model_copy(update={"model": role.model.format(family=family)})


def continuation(traj: Trajectory, harness: Harness, role: ModelRole, prefix: Prefix, seed: int, tag: str,
                 extra_turns: int, wall_s: float = 600.0) -> RolloutJob:
    """A job that continues `prefix` (turns of `traj`) with `role` for at most `extra_turns` more turns."""
    done = sum(m.get("role") == "assistant" for m in prefix.messages)
    limits = Limits(max_turns=done + extra_turns, wall_s=wall_s, max_tokens_per_turn=role.max_tokens)
    return RolloutJob(instance=traj.instance, harness=harness, model=family_role(role, traj.family), seed=seed,
                      limits=limits, tag=tag, prefix=prefix)


def effect(turn: TurnRecord | dict[str, Any]) -> tuple[Any, ...]:
    """What a turn does, ignoring call ids: its (tool, arguments) calls, or ('finish', text) without calls."""
    msg = turn.assistant if isinstance(turn, TurnRecord) else turn
    calls = msg.get("tool_calls") or []
    if not calls:
        return ("finish", str(msg.get("content") or "").strip())
    out = []
    for c in calls:
        fn = c.get("function") or {}
        args = fn.get("arguments")
        try:
            args = json.dumps(json.loads(args) if isinstance(args, str) else args, sort_keys=True)
        except (TypeError, ValueError):
            args = str(args)
        out.append((fn.get("name"), args))
    return tuple(out)


def describe(msg: dict[str, Any]) -> str:
    """A short human form of an assistant turn: `tool({...})` calls or `finish: text`."""
    e = effect(msg)
    if e and e[0] == "finish":
        return f"finish ({str(e[1])[:80]!r})"
    return ", ".join(f"{name}({args[:80]})" for name, args in e)


def effect_key(msg: TurnRecord | dict[str, Any]) -> str:
    """`effect` as text: a corrected turn's dedup key (its calls; a text-only turn, its text)."""
    return json.dumps(effect(msg), default=str)


def actions_key(traj: Trajectory) -> str:
    """What a trajectory does, turn by turn (`effect` of each, call ids ignored): the dedup key of an own success,
    so samples that acted alike count once."""
    return json.dumps([effect(t) for t in traj.turns], default=str)
