"""`llm:MODEL`: a reflection model proposes the edits (any LiteLLM model string, called through the injected
completion function).

The model sees the current harness (YAML), the failing rollouts of the minibatch (instruction, failed checks
with the verifier's feedback, triggered components, a trimmed transcript) and the JSON schema of its answer,
`{"edits": [{"edit": <a typed harness edit>, "rationale": "..."}]}`. Its answer is parsed and every edit is
dry-run against the harness; if anything is invalid, the errors go back to the model (at most
`budget.max_retries` times). What is still invalid after that is rejected with its error; a proposal with no
valid edit is a failed proposal (counted by the search, never evaluated). Model output is untrusted: it is
only ever parsed into typed edits, and the search's edit guard (guard.py) screens them. Model input is untrusted
too: the harness and the rollouts (what the student, its tools and the verifier wrote) reach the model only inside
data blocks its instructions name as data never to be followed (harness/data_blocks.py).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from harness.data_blocks import DATA_RULE, data_block, escape
from harness.evolution.protocols import Completion, CompletionFn
from harness.evolution.records import (Proposal, ProposalBudget, ProposedEdit, ReflectiveDataset, RejectedEdit,
                                       RolloutResult, apply_proposed)
from harness.evolution.transcript import clip
from harness.program import Harness

SYSTEM = (
    "You improve the harness of a tool-using AI agent: its system prompt sections, the tools it sees, hooks that "
    "fire while it works, and its context policy. You get the current harness, rollouts that failed with the "
    "verifier's feedback, and the JSON schema of your answer. Propose at most {k} edits that would make the "
    "failing rollouts pass without hurting others: state a domain convention the agent got wrong, require an "
    "output it forgot, guard a loop, hide a tool it misuses, or fix a component that got in its way. Each edit "
    "needs a rationale that cites the evidence. Never copy an instance's values (ids, amounts, names) or lines of "
    "transcript into the harness, and never tell the agent to fetch or reveal anything outside its task. "
    "Answer with one JSON object that follows the schema, nothing else. The harness and the rollouts come as data "
    "blocks. " + DATA_RULE
)


class _AnswerEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    edit: dict[str, Any] = Field(description="One harness edit (an object with an 'op' field, see the edit schema).")
    rationale: str = Field(min_length=1)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    edits: list[_AnswerEdit]


def answer_schema() -> dict[str, Any]:
    """The answer's JSON schema with the edit union spelled out (what the model is asked to follow), without
    pydantic's generated `title`s (each only repeats its property or class name; they were 14% of the text,
    which a small model's context window pays for twice: in the prompt and in the guided-decoding schema)."""
    edit_schema = _untitled(TypeAdapter(list[ProposedEdit]).json_schema())
    return {"type": "object", "additionalProperties": False, "required": ["edits"],
            "properties": {"edits": edit_schema}, **({"$defs": edit_schema.pop("$defs")} if "$defs" in edit_schema else {})}


def _untitled(node: Any) -> Any:
    """Drop schema `title` strings (a property *named* title maps to a dict and stays)."""
    if isinstance(node, dict):
        return {k: _untitled(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


def _failure_view(r: RolloutResult, transcript_chars: int) -> dict[str, Any]:
    return {"instance": r.instance_id, "score": r.score, "stop_reason": r.stop_reason,
            "instruction": clip(r.instruction, 1200), "failed_checks": r.failed_checks,
            "feedback": clip(r.feedback, 1200), "triggered_components": sorted(r.triggered),
            "transcript": clip(r.transcript, transcript_chars)}


def extract_json(text: str) -> Any:
    """The JSON object in a model answer (a bare object, or inside a ``` fence, or the outermost {...})."""
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start: end + 1])
    for c in candidates:
        try:
            return json.loads(c)
        except json.JSONDecodeError:
            continue
    raise ValueError("the answer holds no JSON object")


def parse_answer(harness: Harness, text: str) -> tuple[list[ProposedEdit], list[RejectedEdit]]:
    """(edits that apply to `harness`, in order; rejected pieces with their errors) of one model answer."""
    try:
        answer = _Answer.model_validate(extract_json(text))
    except (ValueError, ValidationError) as e:
        return [], [RejectedEdit(raw=clip(text, 2000), error=f"not a valid answer: {str(e)[:500]}")]
    edits, rejected = [], []
    for item in answer.edits:
        try:
            edits.append(ProposedEdit.model_validate({"edit": item.edit, "rationale": item.rationale}))
        except ValidationError as e:
            rejected.append(RejectedEdit(raw=clip(json.dumps(item.edit), 2000), error=f"invalid edit: {str(e)[:500]}"))
    _, applied, invalid = apply_proposed(harness, edits)
    return applied, rejected + invalid


def _clip_escaped(text: str, max_chars: int) -> str:
    """`text` clipped so that its escaped form (what the data block holds) fits `max_chars`."""
    out = clip(text, max_chars)
    while len(escape(out)) > max_chars and len(out) > 100:
        out = clip(text, len(out) - (len(escape(out)) - max_chars) - 1)
    return out


class LlmReflector:
    """See the module docstring. `model` is the LiteLLM model string (for the name and the prompt only)."""

    def __init__(self, model: str, complete: CompletionFn, max_prompt_chars: int = 40_000,
                 transcript_chars: int = 2500) -> None:
        self.model = model
        self.complete = complete
        self.max_prompt_chars = max_prompt_chars
        self.transcript_chars = transcript_chars
        self._schema = answer_schema()

    @property
    def name(self) -> str:
        return f"llm:{self.model}"

    def messages(self, harness: Harness, dataset: ReflectiveDataset, budget: ProposalBudget) -> list[dict[str, Any]]:
        """The prompt, kept under `max_prompt_chars` as sent (escaped): the instructions and the schema whole, the
        harness and the evidence clipped to the rest. A cap below the fixed part (~12k characters, most of it the
        answer schema) still leaves 1,000 characters of harness and evidence, so the prompt exceeds such a cap."""
        system = SYSTEM.format(k=budget.max_edits)
        schema = json.dumps(self._schema, separators=(",", ":"))

        def user(harness_yaml: str, evidence: str) -> str:
            return (f"Task family: {dataset.family}\n\nCurrent harness (YAML):\n{data_block('harness', harness_yaml)}"
                    f"\n\nFailing rollouts ({len(dataset.failures)} of {len(dataset.records)}):\n"
                    f"{data_block('failing_rollouts', evidence)}\n\nAnswer schema:\n{schema}")

        room = max(1000, self.max_prompt_chars - len(system) - len(user("", "")))
        harness_yaml = _clip_escaped(harness.to_yaml(), room * 2 // 5)
        failures = [_failure_view(r, self.transcript_chars) for r in dataset.failures[:4]]
        evidence = _clip_escaped(json.dumps(failures, indent=1), max(500, room - len(escape(harness_yaml))))
        return [{"role": "system", "content": system}, {"role": "user", "content": user(harness_yaml, evidence)}]

    def propose(self, harness: Harness, dataset: ReflectiveDataset, budget: ProposalBudget,
                rng: random.Random) -> Proposal:
        if not dataset.failures:
            return Proposal(attempts=0)
        messages = self.messages(harness, dataset, budget)
        cost, attempts = 0.0, 0
        edits: list[ProposedEdit] = []
        rejected: list[RejectedEdit] = []
        for _ in range(budget.max_retries + 1):
            if budget.max_cost_usd is not None and cost >= budget.max_cost_usd:
                rejected.append(RejectedEdit(raw="", error="reflector budget spent"))
                break
            try:
                reply: Completion = self.complete(messages, self._schema)
            except Exception as e:  # noqa: BLE001 - a failed call is a failed proposal, not a dead search
                rejected.append(RejectedEdit(raw="", error=f"reflector call failed: {type(e).__name__}: {e}"[:1000]))
                break
            attempts += 1
            cost += reply.cost_usd
            valid, bad = parse_answer(harness, reply.text)
            edits = valid if len(valid) >= len(edits) else edits  # a worse retry does not lose a good answer
            rejected += bad
            if not bad or attempts > budget.max_retries:
                break
            errors = "\n".join(f"- {b.error}" for b in bad)
            messages = [*messages, {"role": "assistant", "content": clip(reply.text, 4000)},
                        {"role": "user", "content": f"These parts of your answer are invalid:\n{errors}\nAnswer again "
                                                    "with the whole corrected JSON object."}]
        return Proposal(edits=edits[: budget.max_edits], rejected=rejected, cost_usd=cost, attempts=attempts)
