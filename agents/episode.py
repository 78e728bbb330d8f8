"""The mutable state of one episode, shared by the rollout loop (agents/rollout.py) and prefix continuation
(agents/prefix.py). It lives outside the loop so a timeout or an error still leaves a full record."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agents.records import InjectedFault, TriggerRecord, TurnRecord
from harness.helpers import HelperState
from harness.hooks import HookState


@dataclass
class EpisodeState:
    messages: list[dict[str, Any]] = field(default_factory=list)  # the full conversation (tool results as shown)
    turns: list[TurnRecord] = field(default_factory=list)
    cost: float = 0.0
    fires: Counter[str] = field(default_factory=Counter)  # hook id -> firings
    call_counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, arguments JSON) -> calls
    succeeded: set[str] = field(default_factory=set)  # tool names that ran without error
    helpers: HelperState = field(default_factory=HelperState)
    summary: str | None = None
    summarized_turns: int = 0
    pending_cost: float = 0.0  # summarizer cost, charged to the next turn
    pending_triggers: list[TriggerRecord] = field(default_factory=list)  # fired before a model call: that turn's
    injected: list[InjectedFault] = field(default_factory=list)  # simulated students' ground truth, per turn
    last_ids: list[int] = field(default_factory=list)  # previous turn's prompt + completion ids (delta base)
    prefix_turns: int = 0

    def hook_state(self) -> HookState:
        return HookState(fires=dict(self.fires), succeeded=frozenset(self.succeeded))
