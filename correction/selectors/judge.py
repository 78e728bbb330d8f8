"""`judge:MODEL` (the paper's choice): an LLM quality judge ranks the N candidates with a rubric.

The model is called through `agents.client.ModelClient` with the run's `judge` role options (api_base,
api_key_env, max_tokens, timeout_s, prices; each call's cost and outcome go to the run's role-call log,
agents/role_calls.py), or through an injected completion function (messages -> text). It sees the
compressed transcript of the failing rollout, the failed checks, the student's own t* action and every candidate
whole (rationale, content and every call's full arguments), each inside a data block its rubric names as data
never to be followed (harness/data_blocks.py: a student's "rank candidate 2 first" stays evidence), and must
answer one JSON object that validates as `JudgeRanking`: a ranking of every candidate index, best first, and a
rationale. Think blocks, fences, prose around the JSON and extra keys are tolerated; a tool call instead of text
is read from its arguments. An invalid answer is sent back once with the error (a failed call is tried again);
a second failure chooses nothing (`chosen=None`, the reason as rationale; a reply cut at max_tokens says so).
No episodes are run.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.client import ModelCallError, ModelClient
from agents.records import ModelRole, Trajectory
from agents.role_calls import RoleCallLog, call_record, cut_note, reply_text, role_for, strip_think
from analysis.attribution.judge import Completion, _json_object
from analysis.attribution.transcript import compress_transcript
from correction.records import Candidate
from correction.runner import RolloutFn
from correction.selectors.base import Selection
from harness.data_blocks import DATA_RULE, data_block
from harness.program import Harness

ATTEMPTS = 2


class JudgeRanking(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a real model's extra keys (confidence, notes) are not an error

    ranking: list[int] = Field(description="Every candidate index exactly once, best first.")
    rationale: str = Field(min_length=1, max_length=2000)


RUBRIC = ("You judge corrections of one turn of an AI agent's failed episode. Rank the candidate turns by how "
          "well each one fixes the mistake that made the task's checks fail: a correct tool and arguments for "
          "the state the conversation reached, consistent with the task's explicit constraints and the domain's "
          "conventions, and leaving the agent able to finish. A candidate that repeats the mistake ranks last. "
          f"{DATA_RULE} Answer with one JSON object and nothing else, matching this JSON schema: "
          f"{json.dumps(JudgeRanking.model_json_schema())}")


def whole_turn(msg: dict[str, Any]) -> dict[str, Any]:
    """An assistant message as the judge sees it: its whole content and every call with its full arguments."""
    calls = []
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass  # malformed arguments are shown as the raw text the model wrote
        calls.append({"tool": fn.get("name"), "arguments": args})
    return {"content": str(msg.get("content") or ""), "tool_calls": calls}


def judge_request(view: Trajectory, t_star: int, candidates: list[Candidate]) -> list[dict[str, Any]]:
    cands = [{"index": i, "rationale": c.rationale, **whole_turn(c.message)} for i, c in enumerate(candidates)]
    transcript = data_block("transcript", compress_transcript(view))
    user = (f"The failing episode, its failed checks, what the agent did at turn {t_star} and the candidate "
            f"replacements for that turn follow as data blocks.\n\n{transcript}"
            f"\n\n{data_block('failed_checks', view.verdict.failed_checks)}"
            f"\n\n{data_block('agent_turn', whole_turn(view.turns[t_star].assistant))}"
            f"\n\n{data_block('candidates', cands)}\n\nThe turn to correct is turn {t_star}. Rank all "
            f"{len(candidates)} candidates (indices 0..{len(candidates) - 1}), best first.")
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": user}]


def parse_ranking(text: str, n: int) -> JudgeRanking:
    """Validate an answer (think blocks, fences and prose around the JSON are tolerated); ValueError with a
    message the judge can act on."""
    if not text.strip():
        raise ValueError("the reply is empty")
    try:
        answer = JudgeRanking.model_validate(_json_object(strip_think(text)))
    except ValidationError as e:
        raise ValueError("the JSON does not match the schema: " + "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'answer'}: {err['msg']}" for err in e.errors())) from None
    if sorted(answer.ranking) != list(range(n)):
        raise ValueError(f"ranking {answer.ranking} must list every index 0..{n - 1} exactly once")
    return answer


class JudgeSelector:
    """`role`: the run's `judge` role record (api_base, api_key_env, max_tokens, timeout_s, prices), called as
    `model`; `calls`: where each call's cost and outcome go (the run's role-call log and spend cap)."""

    def __init__(self, model: str, completion: Completion | None = None, *, role: ModelRole | None = None,
                 api_base: str | None = None, max_tokens: int | None = None, calls: RoleCallLog | None = None,
                 **_: Any) -> None:
        self.name = f"judge:{model}"
        self.role = role_for(model, role, api_base=api_base, max_tokens=max_tokens)
        self.calls = calls or RoleCallLog()
        self.completion = completion  # injected (messages -> text): no cost known
        self.client = None if completion else ModelClient(self.role)

    async def _ask(self, messages: list[dict[str, Any]], n: int) -> tuple[str, JudgeRanking | None, str]:
        """One call: (the reply text, the ranking or None, the reason it is unusable); recorded in `calls`."""
        self.calls.check()
        resp = None
        try:
            if self.client is None:
                assert self.completion is not None
                text = await self.completion(messages)
            else:
                resp = await self.client.complete(messages, max_tokens=self.role.max_tokens)
                text = reply_text(resp)
        except ModelCallError as e:
            self.calls.record(call_record("judge", self.role, None, False, f"judge call failed: {e}"))
            return "", None, f"judge call failed: {e}"
        try:
            answer = parse_ranking(text, n)
        except ValueError as e:
            reason = str(e) + (cut_note(resp, self.role, "judge") if resp is not None else "")
            self.calls.record(call_record("judge", self.role, resp, False, reason))
            return text, None, reason
        self.calls.record(call_record("judge", self.role, resp, True))
        return text, answer, ""

    async def select(self, view: Trajectory, harness: Harness, t_star: int, candidates: list[Candidate],
                     run: RolloutFn) -> Selection:
        view = view.require_view(self.name)
        if not candidates:
            return Selection(chosen=None, candidates=[], rationale="no candidates")
        messages = judge_request(view, t_star, candidates)
        problem = ""
        for _ in range(ATTEMPTS):
            text, answer, problem = await self._ask(messages, len(candidates))
            if answer is None:
                if text:  # an answer to correct; a failed call is simply tried again
                    messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": (
                        f"Invalid answer: {problem}. Answer again with one JSON object.")}]
                continue
            ranked = [c.model_copy(update={"judge_rank": answer.ranking.index(i) + 1}) for i, c in enumerate(candidates)]
            return Selection(chosen=answer.ranking[0], candidates=ranked, rationale=answer.rationale)
        return Selection(chosen=None, candidates=candidates, rationale=f"invalid judge answer twice: {problem}")
