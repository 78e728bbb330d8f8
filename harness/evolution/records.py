"""Records of the harness search: what one rollout tells the search, proposals, and the lineage.

Everything here is data (pydantic v2, frozen): the evaluator `flows/` injects returns `RolloutResult`s, the
adapter turns them into a `ReflectiveDataset`, a reflector answers a `Proposal` of typed edits, and every
candidate the search tried ends up as one `EvolutionCandidate` in the lineage.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from harness.edits import EditError, HarnessEdit, apply_edit
from harness.program import Harness
from tasks.records import TaskInstance


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvalItem(_Frozen):
    """One unit the search evaluates: a task instance under one rollout seed (a GEPA data instance)."""

    instance: TaskInstance
    seed: int = Field(ge=0)

    @property
    def label(self) -> str:
        return f"{self.instance.id}#s{self.seed}"


def cache_key(harness_id: str, instance_id: str, seed: int, signature: str) -> str:
    """Content key of one evaluation: harness, instance, rollout seed and the evaluator's signature (model,
    sampling, limits). Equal keys are the same rollout; the server URL is never part of it."""
    raw = json.dumps([harness_id, instance_id, seed, signature])
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


class CallSummary(_Frozen):
    """One tool call of a rollout, trimmed for reflection."""

    turn: int = Field(ge=0)
    name: str
    arguments: str = Field(default="", description="The arguments as JSON text (trimmed).")
    is_error: bool = False
    blocked: bool = Field(default=False, description="A harness hook answered instead of the environment.")
    result_chars: int = Field(default=0, ge=0, description="Length of what the tool returned.")
    result_head: str = Field(default="", description="The start of what the tool returned.")

    def same_call(self, other: "CallSummary") -> bool:
        return self.name == other.name and self.arguments == other.arguments


class TriggerEvent(_Frozen):
    """A harness component that fired (from the runtime's trigger records)."""

    component: str = Field(description="Component id as in Harness.components(): 'hook:<id>', 'context', ...")
    turn: int = Field(ge=0)
    kind: str
    detail: str = ""


class RolloutResult(_Frozen):
    """What one rollout tells the search: the verifier's score and the evidence a reflector reads.

    `score` is the verifier score in [0, 1] (success = 1.0). A rollout that failed for any reason (model
    error, crash) is a result with its score (usually 0) and `error`, never an exception.
    """

    key: str = Field(description="cache_key(harness id, instance id, seed, evaluator signature).")
    harness_id: str
    instance_id: str
    seed: int
    score: float = Field(ge=0.0, le=1.0)
    passed: bool
    instruction: str = Field(default="", description="The task prompt (trimmed).")
    failed_checks: list[str] = Field(default_factory=list)
    feedback: str = Field(default="", description="The verifier's feedback on the failed checks.")
    stop_reason: str = ""
    error: str = ""
    n_turns: int = Field(default=0, ge=0, description="Model calls the rollout made (what a server counts).")
    calls: list[CallSummary] = Field(default_factory=list)
    triggers: list[TriggerEvent] = Field(default_factory=list)
    context_chars: int = Field(default=0, ge=0, description="Size of the final conversation (characters).")
    transcript: str = Field(default="", description="A trimmed text view of the conversation.")
    trajectory_id: str = Field(default="", description="Where the full trajectory is stored (run store).")
    wall_s: float = 0.0

    @property
    def triggered(self) -> set[str]:
        return {t.component for t in self.triggers}

    def summary(self) -> dict[str, Any]:
        """The small JSON view GEPA keeps as a rollout's output."""
        return {"instance_id": self.instance_id, "seed": self.seed, "score": self.score, "passed": self.passed}


class ReflectiveDataset(_Frozen):
    """The minibatch evidence a reflector reads: every rollout of the parent harness on the minibatch."""

    family: str
    harness_id: str
    records: list[RolloutResult]

    @property
    def failures(self) -> list[RolloutResult]:
        return [r for r in self.records if not r.passed]

    @property
    def successes(self) -> list[RolloutResult]:
        return [r for r in self.records if r.passed]

    def by_component(self, components: list[str]) -> dict[str, list[RolloutResult]]:
        """Per harness component: the failing rollouts in which it fired (GEPA's per-component view)."""
        return {c: [r for r in self.failures if c in r.triggered] for c in components}


class ProposedEdit(_Frozen):
    """One typed edit and why the reflector proposes it."""

    edit: HarnessEdit
    rationale: str = Field(min_length=1)


class RejectedEdit(_Frozen):
    """An edit (or an answer) that did not validate: never evaluated, counted."""

    raw: str = Field(description="The edit or answer as proposed (JSON text, trimmed).")
    error: str


class Proposal(_Frozen):
    """A reflector's answer: edits to apply in order, what it rejected itself, and what it cost."""

    edits: list[ProposedEdit] = Field(default_factory=list)
    rejected: list[RejectedEdit] = Field(default_factory=list)
    cost_usd: float = Field(default=0.0, ge=0.0)
    attempts: int = Field(default=1, ge=0, description="Model answers it took (1 for offline reflectors).")


class ProposalBudget(_Frozen):
    """What one proposal may spend."""

    max_edits: int = Field(default=2, ge=1, description="At most this many edits in one proposal.")
    max_cost_usd: float | None = Field(default=None, ge=0.0, description="Reflector dollars left (None = no cap).")
    max_retries: int = Field(default=2, ge=0, description="Times an invalid answer is sent back with its error.")


class EvolutionCandidate(_Frozen):
    """One candidate the search tried: where it came from, what changed, and how it scored.

    Accepted candidates (`accepted`) entered GEPA's pool and have validation scores; rejected ones have only
    their minibatch scores. The seed candidate h0 has no parent and no edits.
    """

    search_seed: int
    iteration: int = Field(description="GEPA iteration that proposed it (0 = the seed candidate).")
    harness_id: str
    parent_id: str | None
    edits: list[ProposedEdit] = Field(default_factory=list)
    rejected_edits: list[RejectedEdit] = Field(default_factory=list)
    accepted: bool
    minibatch: list[str] = Field(default_factory=list, description="EvalItem labels of the minibatch.")
    parent_minibatch_scores: list[float] = Field(default_factory=list)
    minibatch_scores: list[float] = Field(default_factory=list)
    val_scores: dict[str, float] = Field(default_factory=dict, description="EvalItem label -> score.")
    val_mean: float | None = None
    rollouts_at_discovery: int = Field(default=0, description="Search evaluations spent when it was found.")
    reflector_cost_usd: float = 0.0


class ProposalLog(_Frozen):
    """What the proposer did in one iteration (the ledger the lineage is built from)."""

    search_seed: int
    iteration: int
    task: int = Field(default=0, ge=0, description="Which proposal of the iteration (multi-proposal sampling).")
    parent_id: str
    minibatch: list[str] = Field(default_factory=list, description="EvalItem labels the reflector saw.")
    child_id: str | None
    edits: list[ProposedEdit] = Field(default_factory=list)
    rejected: list[RejectedEdit] = Field(default_factory=list)
    cost_usd: float = 0.0
    attempts: int = Field(default=0, ge=0, description="Reflection-model answers this proposal took.")
    status: Literal["proposed", "no_valid_edit", "reflector_error"] = "proposed"
    error: str = ""


_EDIT_ADAPTER: TypeAdapter[Any] = TypeAdapter(HarnessEdit)


def edit_json(edit: Any) -> str:
    """An edit as canonical JSON (what lineage files and rejections store)."""
    return json.dumps(_EDIT_ADAPTER.dump_python(edit, mode="json"), sort_keys=True)


def apply_proposed(h: Harness, edits: list[ProposedEdit]) -> tuple[Harness, list[ProposedEdit], list[RejectedEdit]]:
    """Apply edits one by one: each that does not validate (or changes nothing) is rejected with its error and
    skipped; the others apply in order. Returns (harness, applied, rejected); `h` never changes."""
    out, applied, rejected = h, [], []
    for pe in edits:
        try:
            nxt = apply_edit(out, pe.edit)
        except EditError as e:
            rejected.append(RejectedEdit(raw=edit_json(pe.edit)[:2000], error=e.reason))
            continue
        if nxt.id == out.id:
            rejected.append(RejectedEdit(raw=edit_json(pe.edit)[:2000], error="the edit changes nothing"))
            continue
        out = nxt
        applied.append(pe)
    return out, applied, rejected
