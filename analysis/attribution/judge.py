"""`judge:MODEL`: a model reads the rubric, the failed checks and a compressed transcript and names the category.

The model is reached through an injected completion function (messages -> text), so any LiteLLM model in
the `judge` role works: `completion_for(ModelRole(...))` wraps `agents.client.ModelClient`.

Structured output: the answer must be one JSON object that validates as `JudgeAnswer` (category in the
ontology, evidence turns that exist in the trajectory, a rationale, a confidence). An invalid answer is sent
back once with the validation error; a second invalid answer, or a failed model call, is recorded as
`unattributed` with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.records import ModelRole, Trajectory
from analysis.attribution.check_hints import hint_for
from analysis.attribution.ontology import CATEGORIES, DEFINITIONS, UNATTRIBUTED, Category
from analysis.attribution.records import Attribution
from analysis.attribution.transcript import TranscriptConfig, compress_transcript

Completion = Callable[[list[dict[str, Any]]], Awaitable[str]]
ATTEMPTS = 2  # the first answer and one retry


class JudgeAnswer(BaseModel):
    """What the judge must answer (as one JSON object)."""

    model_config = ConfigDict(extra="ignore")  # a real model's extra keys (severity, notes) are not an error

    category: Category
    evidence_turns: list[int] = Field(description="0-based turn numbers from the transcript.")
    rationale: str = Field(min_length=1, max_length=2000)
    confidence: float = Field(ge=0.0, le=1.0)


def rubric() -> str:
    cats = "\n".join(f"- {c}: {DEFINITIONS[c]}" for c in CATEGORIES)
    schema = json.dumps(JudgeAnswer.model_json_schema())
    return ("You attribute the failure of an AI agent's episode to exactly one category of this ontology:\n"
            f"{cats}\n\nPick the category of the root cause: the earliest mistake that made the verifier's checks "
            "fail (later failures that follow from it do not count). Cite the turns that show it.\n"
            f"Answer with one JSON object and nothing else, matching this JSON schema: {schema}")


def judge_request(trajectory: Trajectory, transcript: TranscriptConfig | None = None) -> list[dict[str, Any]]:
    """The messages sent to the judge for one trajectory (a view)."""
    t = trajectory.require_view("judge_request")
    hints = []
    for check in t.verdict.failed_checks:
        h = hint_for(t.family, check)
        hints.append(f"- {check}: usually points to {h.hint if h else 'no known category'}")
    user = (compress_transcript(t, transcript) + "\n\nCheck hints (a hint, not the answer; 'output' = a required "
            "output is missing):\n" + ("\n".join(hints) or "- (none)") + "\n\nWhich category caused this failure?")
    return [{"role": "system", "content": rubric()}, {"role": "user", "content": user}]


def _json_object(text: str) -> Any:
    body = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", text.strip())
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("the answer contains no JSON object") from None
        try:
            return json.loads(body[start:end + 1])
        except json.JSONDecodeError as e:
            raise ValueError(f"the answer is not valid JSON: {e}") from None


def parse_answer(text: str, n_turns: int) -> JudgeAnswer:
    """Validate a judge's answer; ValueError with a message the judge can act on."""
    from agents.role_calls import strip_think

    try:
        answer = JudgeAnswer.model_validate(_json_object(strip_think(text)))
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'answer'}: {err['msg']}" for err in e.errors())
        raise ValueError(f"the JSON does not match the schema: {problems}") from None
    bad = [i for i in answer.evidence_turns if not 0 <= i < n_turns]
    if bad:
        raise ValueError(f"evidence_turns {bad} do not exist; the transcript has turns 0..{n_turns - 1}")
    return answer


def completion_for(role: ModelRole) -> Completion:
    """A completion function over the project's model client (any LiteLLM model string)."""
    from agents.client import ModelClient

    client = ModelClient(role)

    async def complete(messages: list[dict[str, Any]]) -> str:  # think blocks dropped; a tool call's arguments
        from agents.role_calls import reply_text

        return reply_text(await client.complete(messages, max_tokens=role.max_tokens))

    return complete


class JudgeAttributor:
    """A model as attributor (module docstring). `completion` defaults to `completion_for(ModelRole(model))`."""

    def __init__(self, model: str, completion: Completion | None = None, *, api_base: str | None = None,
                 api_key_env: str | None = None, transcript: TranscriptConfig | None = None,
                 max_tokens: int = 512) -> None:
        self.name = f"judge:{model}"
        self.transcript = transcript
        self.completion = completion or completion_for(
            ModelRole(model=model, api_base=api_base, api_key_env=api_key_env, temperature=0.0, max_tokens=max_tokens,
                      return_token_ids=False))

    def _unattributed(self, t: Trajectory, why: str) -> Attribution:
        return Attribution(trajectory_id=t.id, category=UNATTRIBUTED, rationale=why, attributor=self.name, confidence=0.0)

    async def attribute(self, trajectory: Trajectory) -> Attribution:
        t = trajectory.require_view(self.name)
        if t.passed:
            raise ValueError(f"trajectory {t.id} passed: only failing rollouts are attributed")
        messages = judge_request(t, self.transcript)
        problem = ""
        for _ in range(ATTEMPTS):
            try:
                text = await self.completion(messages)
            except Exception as e:  # one trajectory's trouble: recorded, never raised (contract)
                return self._unattributed(t, f"judge call failed: {type(e).__name__}: {str(e)[:300]}")
            try:
                a = parse_answer(text, len(t.turns))
            except ValueError as e:
                problem = str(e)
                messages = [*messages, {"role": "assistant", "content": text},
                            {"role": "user", "content": f"Your answer is invalid: {problem}. Answer again with one "
                                                        "JSON object matching the schema, and nothing else."}]
                continue
            return Attribution(trajectory_id=t.id, category=a.category, evidence_turns=sorted(set(a.evidence_turns)),
                               rationale=a.rationale, attributor=self.name, confidence=a.confidence)
        return self._unattributed(t, f"judge answered invalidly {ATTEMPTS} times; last problem: {problem[:300]}")
