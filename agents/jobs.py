"""What to run: episode limits and the serialisable rollout job (built by flows, run by the pool's actors)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.prefix import Prefix
from agents.records import ModelRole, ToolChoice, trajectory_key
from harness.program import Harness
from tasks.records import TaskInstance

OnDivergence = Literal["raise", "record"]


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(default=30, ge=1, description="Assistant turns (model calls) per episode, prefix included.")
    wall_s: float = Field(default=600.0, gt=0, description="Wall-clock seconds for the whole episode.")
    cost_usd: float = Field(default=20.0, ge=0, description="Stop once the episode's model cost reaches this.")
    max_tokens_per_turn: int = Field(default=512, ge=1, description="Max generated tokens per model call.")
    max_tool_calls_per_turn: int = Field(
        default=32, ge=1, description="Tool calls run per assistant turn; the rest are answered with one message naming the cap.")


class RolloutJob(BaseModel):
    """One episode to run: serialisable (no handles), so it travels to any actor on any node.

    With `prefix`, the episode continues that conversation (agents/prefix.py); a replay that diverges ends
    it with stop reason `replay_divergence` (the pool never raises for one job). The prefix is part of the key.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance: TaskInstance
    harness: Harness
    model: ModelRole
    seed: int
    limits: Limits = Limits()
    tag: str = "rollout"
    tool_choice: ToolChoice | None = None
    prefix: Prefix | None = None

    @property
    def key(self) -> str:
        return trajectory_key(self.instance.id, self.harness.id, self.model.id, self.seed, self.tag,
                              self.prefix.key if self.prefix else "")
