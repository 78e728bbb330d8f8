"""The API roles against realistic replies, and configured and priced like the expert and the reflector.

The paid API is a test double (tests/paid_api_double.py: a local OpenAI-compatible server on loopback) that
replays the corpus of tests/reply_corpus.py; the roles reach it through the real ModelClient and LiteLLM as
`openai/<name>` at its api_base, with a key variable, prices, max_tokens and timeout_s from their role record.
The failing rollouts are a SIMULATED flawed student's (real environments and runtime).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from correction_helpers import STUDENT, student_rollout
from paid_api_double import PaidApiDouble
from reply_corpus import ANSWER, ATTRIBUTOR, JUDGE, LOCATOR, Case, Reply, completion, replay

from agents.records import ModelRole
from agents.role_calls import RoleCallLog, RoleFailed, read_role_calls
from analysis.attribution.judge import JudgeAttributor
from correction.locators import make_locator
from correction.records import Candidate
from correction.selectors import make_selector
from flows.config import parse_config
from flows.round.correct import CorrectionConfig, correct_run
from flows.round.budget import spent_usd
from flows.round.data import correction_config
from flows.store import RunStore
from harness import baseline

KEY = "COEVO_TEST_PAID_KEY"
RESULTS: dict[str, Counter] = {}


@pytest.fixture(scope="module")
def rollout():
    t = asyncio.run(student_rollout("payroll_audit", 2, 0))  # a train instance: correction rows may come from it
    assert not t.passed and len(t.turns) >= 2 and t.injected_faults
    return t


@pytest.fixture(scope="module")
def failing(rollout):
    return rollout.view()


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "sk-test-double")


def role(api: PaidApiDouble, name: str, **extra: object) -> ModelRole:
    return ModelRole(model=f"openai/{name}", api_base=api.base, api_key_env=KEY, max_tokens=4096, timeout_s=30,
                     retries=0, input_cost_per_token=1e-6, output_cost_per_token=4e-6, **extra)


def candidates(t) -> list[Candidate]:
    fix = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file",
                                                      "arguments": json.dumps({"path": "x.csv"})}}]}
    return [Candidate(message=t.turns[-1].assistant, rationale="The student's own turn.", seed=0),
            Candidate(message=fix, rationale="Re-read the attendance file first.", seed=1)]


async def run_case(who: str, case: Case, view) -> tuple[str, str]:
    """(outcome, reason) of one corpus case: parsed, clear (no answer, a reason) or crash (an exception)."""
    log = RoleCallLog()
    with PaidApiDouble(replay(case.replies)) as api:
        try:
            if who == "judge":
                sel = make_selector("judge:openai/judge", role=role(api, "judge"), calls=log)
                out = await sel.select(view, baseline(view.family), len(view.turns) - 1, candidates(view), None)
                return ("parsed" if out.chosen == 1 else "clear"), out.rationale
            if who == "locator":
                loc = make_locator("mle_agent:openai/locator", role=role(api, "locator"), calls=log, max_steps=4)
                found = await loc.locate(view, baseline(view.family), None)
                return ("parsed" if found.t_star == ANSWER["t_star"] else "clear"), found.rationale
            att = JudgeAttributor("openai/judge", api_base=api.base, api_key_env=KEY)
            a = await att.attribute(view)
            return ("parsed" if a.category == "tool_use" else "clear"), a.rationale
        except Exception as e:  # noqa: BLE001 - the count of these is what the test is about
            return "crash", f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("who,corpus", [("judge", JUDGE), ("locator", LOCATOR), ("attributor", ATTRIBUTOR)])
def test_every_reply_is_parsed_or_a_clear_reason_and_nothing_crashes(failing, who: str, corpus: list[Case]) -> None:
    counts: Counter = Counter()
    wrong = []
    for case in corpus:
        outcome, reason = asyncio.run(run_case(who, case, failing))
        counts[outcome] += 1
        if outcome != case.expect or (case.expect == "clear" and case.why not in reason):
            wrong.append(f"{case.name}: {outcome} ({reason[:200]})")
    RESULTS[who] = counts
    print(f"\n{who}: parsed {counts['parsed']}, clear failure {counts['clear']}, crash {counts['crash']}")
    assert counts["crash"] == 0 and not wrong, wrong


def test_judge_and_locator_take_their_role_and_record_each_calls_cost(rollout, failing, tmp_path: Path) -> None:
    """Failures 3 and 4: the options of the `judge` / `locator` roles reach the calls (api_base, the key
    variable, max_tokens, timeout); every call's cost lands in the run's budget."""
    fault = {**ANSWER, "t_star": rollout.injected_faults[0].turn}  # the double names the SIMULATED fault's turn
    def answer(body: dict, headers: dict) -> tuple[int, dict]:
        if "tools" in body:  # the locator
            return completion(Reply(None, [("answer", json.dumps(fault))]), body["model"])
        n = int((re.findall(r"indices 0\.\.(\d+)", body["messages"][-1]["content"]) or ["0"])[-1]) + 1
        return completion(Reply(json.dumps({"ranking": list(range(n)), "rationale": "the first fixes it"})),
                          body["model"])

    with PaidApiDouble(answer) as api:
        models = {"student": {"model": "hosted_vllm/s", "api_base": "http://127.0.0.1:9/v1"},
                  "expert": {"model": "flawed/{family}@expert"},
                  "judge": role(api, "judge").model_dump(), "locator": role(api, "locator").model_dump()}
        config = parse_config({"models": models, "round": {"student_weights": "x", "correction": {
            "locator": "mle_agent:openai/locator", "selector": "judge:openai/judge", "n": 2, "replays": 1}}})
        ctx = SimpleNamespace(r=config.round, config=config, student=lambda: ModelRole(model=STUDENT),
                              correction_expert=lambda: config.models["expert"])
        cfg = correction_config(ctx)  # type: ignore[arg-type]
        assert cfg.judge_role and cfg.judge_role.api_base == api.base and cfg.judge_role.max_tokens == 4096
        assert cfg.locator_role and cfg.locator_role.api_key_env == KEY and cfg.locator_role.timeout_s == 30
        store = RunStore(tmp_path, "run")
        correct_run(store, [failing], {baseline(failing.family).id: baseline(failing.family)},
                    cfg.model_copy(update={"concurrency": 1}))
        assert {b["max_tokens"] for b in api.requests} == {4096}
    calls = read_role_calls(tmp_path)
    assert {c.role for c in calls} == {"locator", "judge"} and all(c.ok for c in calls)
    cost = sum(c.cost_usd for c in calls)
    assert cost == pytest.approx(len(calls) * (1000 * 1e-6 + 200 * 4e-6))
    assert spent_usd(tmp_path) >= cost > 0


def test_a_role_that_fails_every_call_fails_the_stage_loudly(failing, tmp_path: Path) -> None:
    with PaidApiDouble(replay([Reply("I'm sorry, I can't rank these.")])) as api:
        cfg = CorrectionConfig(student=ModelRole(model=STUDENT), locator="counterfactual",
                               selector="judge:openai/judge", judge_role=role(api, "judge"), n=2, concurrency=1)
        with pytest.raises(RoleFailed, match=r"role 'judge' \(openai/judge\) failed on all 2 of its calls; last "
                                             r"reason: the answer contains no JSON object"):
            correct_run(RunStore(tmp_path, "run"), [failing], {baseline(failing.family).id: baseline(failing.family)},
                        cfg)
