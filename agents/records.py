"""Records the agents package owns: model roles, per-turn records, trajectories, and the stop reasons.

Token ids: a turn stores its prompt ids by delta (see `agents.token_ids`); read them back with
`Trajectory.token_ids()` (every turn's exact prompt and completion ids, one pass) or
`Trajectory.prompt_token_ids(i)`. The exact messages the model was sent on turn i are
`Trajectory.model_messages(i)` (the context policy's cut is stored per turn).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.token_ids import turn_token_ids
from agents.tool_args import parse_arguments
from harness.context import ContextCut, apply_cut
from tasks.records import TaskInstance, ToolCall, ToolResult, Verdict

ToolChoice = str | dict[str, Any]  # 'auto' | 'required' | 'none', or {"type": "function", "function": {"name": ...}}

# --- stop reasons: the one list (docs/rollout.md repeats it) ----------------------------------------
StopReason = Literal["submitted", "max_turns", "timeout", "cost_cap", "context_overflow", "harness_stop", "truncated",
                     "replay_divergence", "model_error", "error"]
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]
STOP_REASON_MEANINGS: dict[str, str] = {
    "submitted": "The model answered without a tool call, no on_finish hook refused, and the text went to "
                 "env.submit as the final answer.",
    "max_turns": "Limits.max_turns assistant turns ran (a prefix's turns count).",
    "timeout": "The episode passed Limits.wall_s seconds (model calls and tools included).",
    "cost_cap": "The episode's model cost (summarizer included) reached Limits.cost_usd; checked before each call.",
    "context_overflow": "The server refused the prompt as longer than its context window.",
    "harness_stop": "A hook's `stop` action ended the episode; error = \"stopped by hook '<id>': <message>\".",
    "truncated": "The model's reply was cut by the token limit (finish_reason 'length') and had no tool call: "
                 "it is recorded, not submitted. A cut reply with tool calls runs them and goes on.",
    "replay_divergence": "Continuing a prefix, a replayed tool result differed from the recorded one "
                         "(run_episode(on_divergence='record')); nothing was generated, score 0, the error names "
                         "the turn and both results.",
    "model_error": "The model call failed after the client's retries (connection refused, 5xx, a bad request).",
    "error": "Anything else: the environment or the runtime raised, or the pool gave up on the job; text in error.",
}


def parse_tool_calls(raw_calls: list[dict[str, Any]] | None) -> list[ToolCall]:
    """OpenAI tool_calls -> ToolCall; arguments stay a raw string when they are not a JSON object (or are
    nested deeper than `agents.tool_args.MAX_ARGS_DEPTH`): the runtime answers those as malformed calls."""
    out = []
    for i, tc in enumerate(raw_calls or []):
        fn = tc.get("function") or {}
        out.append(ToolCall(id=tc.get("id") or f"call_{i}", name=str(fn.get("name") or ""),
                            arguments=parse_arguments(fn.get("arguments"))))
    return out


class ModelRole(BaseModel):
    """A model as a role sees it: a LiteLLM model string plus how to call it.

    `hosted_vllm/<served-name>` with `api_base` for our vLLM servers, `oracle/<family>` for the task's
    reference policy, or any hosted provider string for an API expert.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)  # a refused key is not echoed

    model: str = Field(description="LiteLLM model string, e.g. 'hosted_vllm/student' or 'oracle/stock_alert'.")
    api_base: str | None = Field(default=None, description="Server URL ending in /v1 for hosted_vllm models.")
    api_key_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the key (e.g. OPENAI_API_KEY), read at call time. "
                    "A role never holds a key itself: configs, run stores and Prefect parameters only see the name.")
    api_key_secret: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the key, loaded at call time "
                                  "(agents.client); an alternative to api_key_env.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
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

    @model_validator(mode="before")
    @classmethod
    def _no_literal_key(cls, data: Any) -> Any:
        """A literal key would be saved with the run and shown as a Prefect parameter: refuse it by name."""
        if isinstance(data, dict) and "api_key" in data:
            if data["api_key"] not in (None, ""):
                raise ValueError("api_key: a literal key is not accepted (it would be saved in the run's config.yaml "
                                 "and shown as a Prefect parameter); put it in an environment variable and name that "
                                 "variable with `api_key_env: OPENAI_API_KEY` (or a Prefect Secret block: `api_key_secret`)")
            data = {k: v for k, v in data.items() if k != "api_key"}  # `api_key: null` in configs stored before
        return data

    @model_validator(mode="after")
    def _one_key_source(self) -> "ModelRole":
        if self.api_key_env and self.api_key_secret:
            raise ValueError("api_key_env and api_key_secret: give one source for the key, not both")
        return self

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
    tool_results: list[ToolResult] = Field(default_factory=list, description="What actually came back (before truncation).")
    malformed_tool_calls: int = Field(default=0, ge=0)
    triggers: list[TriggerRecord] = Field(default_factory=list)
    latency_s: float = Field(default=0.0, ge=0.0, description="Model call wall time.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    finish_reason: str | None = Field(default=None, description="The provider's: 'stop', 'tool_calls', 'length', ...")
    prompt_ids_reused: int = Field(
        default=0, ge=0, description="Leading prompt ids equal to the previous turn's prompt + completion ids (not stored).")
    prompt_ids_added: list[int] | None = Field(
        default=None, description="The prompt ids after the reused ones (all of them when none are reused); None: no ids.")
    prompt_ids_copy: list[int] | None = Field(
        default=None, description="[at, start, length]: previous prompt + completion ids [start:start+length], "
                                  "inserted at `at` into the added ids (a context window keeping later turns).")
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(default=None, description="The sampled tokens' logprobs (None: provider has none).")
    context_messages: int | None = Field(
        default=None, ge=0, description="The model's view of this turn was built from Trajectory.messages[:n] "
                                        "(None: the turn was produced elsewhere, e.g. a prefix given as messages).")
    context_cut: ContextCut | None = Field(default=None, description="What the context window replaced in that view.")


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
    prefix_turns: int = Field(default=0, ge=0, description="Turns 0..n-1 came from a prefix (replayed, not generated here).")

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

    def with_id(self, prefix_key: str = "") -> "Trajectory":
        key = trajectory_key(self.instance.id, self.harness_id, self.model_id, self.seed, self.tag, prefix_key)
        return self.model_copy(update={"id": key})

    # --- what the model saw and produced -------------------------------------------------------
    def token_ids(self) -> list[tuple[list[int], list[int] | None] | None]:
        """Every turn's exact (prompt ids, completion ids) as the server saw and produced them; None for a
        turn without ids. One pass over the turns (prompt ids are stored by delta)."""
        return turn_token_ids(self.turns)

    def prompt_token_ids(self, turn: int) -> list[int] | None:
        """The exact prompt ids of one turn (None when the provider returned none)."""
        ids = turn_token_ids(self.turns[: turn + 1])[turn]
        return None if ids is None else ids[0]

    def model_messages(self, turn: int) -> list[dict[str, Any]]:
        """The exact messages the model was sent on `turn` (the context policy's view, tool results as shown)."""
        t = self.turns[turn]
        if t.context_messages is None:
            raise ValueError(f"turn {turn} of {self.id or self.instance.id} was not generated in this episode "
                             "(a prefix turn given as messages): its view is unknown")
        return apply_cut(self.messages[: t.context_messages], t.context_cut)


def trajectory_key(instance_id: str, harness_id: str, model_id: str, seed: int, tag: str = "", prefix_key: str = "") -> str:
    """The job key: a re-run of the same job finds the stored trajectory under this id. `prefix_key`
    (`Prefix.key`) tells apart continuations of different prefixes; empty for a fresh episode."""
    parts: list[object] = [instance_id, harness_id, model_id, seed, tag]
    raw = json.dumps(parts + [prefix_key] if prefix_key else parts)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
