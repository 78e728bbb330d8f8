"""Records the agents package owns: model roles, per-turn records and trajectories."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.records import TaskInstance, ToolCall, ToolResult, Verdict

ToolChoice = str | dict[str, Any]  # 'auto' | 'required' | 'none', or {"type": "function", "function": {"name": ...}}
StopReason = Literal["submitted", "max_turns", "timeout", "cost_cap", "context_overflow", "model_error", "error"]
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]


class ModelRole(BaseModel):
    """A model as a role sees it: a LiteLLM model string plus how to call it.

    `hosted_vllm/<served-name>` with `api_base` for our vLLM servers, `oracle/<family>` for the task's
    reference policy, or any hosted provider string for an API expert.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="LiteLLM model string, e.g. 'hosted_vllm/student' or 'oracle/stock_alert'.")
    api_base: str | None = Field(default=None, description="Server URL ending in /v1 for hosted_vllm models.")
    api_key: str | None = Field(default=None, description="Key for hosted providers; vLLM accepts any.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=512, gt=0, description="Max generated tokens per call (per turn).")
    timeout_s: float = Field(default=120.0, gt=0, description="Per-call timeout in seconds.")
    retries: int = Field(default=3, ge=0, description="Retries with exponential backoff on transient errors.")
    input_cost_per_token: float = Field(default=0.0, ge=0.0, description="USD; 0 for local models.")
    output_cost_per_token: float = Field(default=0.0, ge=0.0, description="USD; 0 for local models.")
    return_token_ids: bool = Field(default=True, description="Ask vLLM for prompt/completion token ids.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Passed through to the server.")
    strict_tools: bool = Field(
        default=False,
        description="Send tools with `strict: true`: servers that support it (vLLM, OpenAI) constrain the "
                    "arguments to each tool's JSON schema, so even a weak model's calls parse.")

    @field_validator("model")
    @classmethod
    def _has_provider(cls, v: str) -> str:
        if "/" not in v:
            raise ValueError(f"model '{v}' needs a provider prefix, e.g. 'hosted_vllm/{v}' or 'oracle/<family>'")
        return v

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0]

    @property
    def id(self) -> str:
        """What trajectories record as the model id (the string plus the server it ran on)."""
        return self.model if not self.api_base else f"{self.model}@{self.api_base}"


class InjectedFault(BaseModel):
    """Ground truth of a simulated student (`flawed/<family>`): a fault it injected on purpose.

    Only measurement code (localization / attribution accuracy) may read these. Locators, attributors and
    reflectors get `Trajectory.view()`, which has none, and refuse a trajectory that still carries them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: int = Field(ge=0, description="Assistant turn the fault was injected in.")
    category: str = Field(description="Failure-ontology category, e.g. 'tool_use', 'planning'.")
    kind: str = Field(description="The concrete fault, e.g. 'mistyped_argument', 'skip_page'.")
    detail: str = Field(default="", description="What was changed, for humans.")


class TriggerRecord(BaseModel):
    """A harness component that fired during a turn (for component trigger rates and attribution)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    component_id: str
    turn: int
    kind: str = Field(description="e.g. 'hook', 'context_truncate', 'context_summarize', 'helper_tool'.")
    detail: str = ""


class TurnRecord(BaseModel):
    """One assistant turn: what the model said, which tools it called and what came back."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0, description="Assistant turn number, 0-based.")
    assistant: dict[str, Any] = Field(description="The assistant message in OpenAI format.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)
    malformed_tool_calls: int = Field(default=0, ge=0)
    triggers: list[TriggerRecord] = Field(default_factory=list)
    latency_s: float = Field(default=0.0, ge=0.0, description="Model call wall time.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None


class Trajectory(BaseModel):
    """A whole episode: model x harness x task instance x seed, with the verifier's verdict."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default="", description="Content hash of (instance, harness, model, seed, tag); set by make_id.")
    instance: TaskInstance
    harness_id: str
    model_id: str
    seed: int
    messages: list[dict[str, Any]] = Field(description="The full OpenAI-format conversation.")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool schemas the model saw.")
    turns: list[TurnRecord] = Field(default_factory=list)
    stop_reason: StopReason
    verdict: Verdict
    error: str = ""
    wall_s: float = 0.0
    tag: str = Field(default="", description="Free label: 'rollout', 'correction', 'imitation', ...")
    injected_faults: list[InjectedFault] = Field(
        default_factory=list, description="Simulation ground truth (flawed students only); see `view()`.")

    def view(self) -> "Trajectory":
        """The trajectory as the pipeline may see it: without simulation ground truth."""
        return self.model_copy(update={"injected_faults": []})

    def require_view(self, who: str) -> "Trajectory":
        """Raise if simulation ground truth is still attached (a caller forgot `view()`); else return self."""
        if self.injected_faults:
            raise ValueError(f"{who} must not read injected-fault ground truth: pass trajectory.view()")
        return self

    @property
    def family(self) -> str:
        return self.instance.family

    @property
    def score(self) -> float:
        return self.verdict.score

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd for t in self.turns)

    def with_id(self) -> "Trajectory":
        return self.model_copy(update={"id": trajectory_key(self.instance.id, self.harness_id, self.model_id, self.seed, self.tag)})


def trajectory_key(instance_id: str, harness_id: str, model_id: str, seed: int, tag: str = "") -> str:
    """The job key: a re-run of the same job finds the stored trajectory under this id."""
    raw = json.dumps([instance_id, harness_id, model_id, seed, tag])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
