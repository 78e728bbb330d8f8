"""The rollout runtime: limits and their stop reasons, prefix continuation and its replay check (on every
installed family, with the oracle), what each turn's model saw and its token ids, and real tool-calling
episodes against the tiny vLLM CPU server."""

from __future__ import annotations

import socket

import litellm
import pytest

import tasks
from agents.client import ModelClient
from agents.prefix import Prefix, ReplayDivergence, prefix_of
from agents.records import STOP_REASONS, ModelRole
from agents.rollout import BLOCKED_PREFIX, Limits, run_episode
from agents.seeds import turn_seed
from agents.tables.trajectories import read_trajectories, write_trajectories
from harness import Harness, Hook, PromptSection, ToolPolicy, baseline
from harness.context import ContextPolicy
from scripted_model import CounterEnv, Step, counter_env, scripted
from tasks.records import ToolResult, Verdict

ROLE = Harness(sections=[PromptSection(id="role", kind="role", text="You add numbers.")])
HEAVY_FAMILIES = {"website_admin", "browser_automation"}  # a browser per oracle call: tens of seconds each


def _tiny(api_base: str, **kw) -> ModelRole:
    # temperature 1: at 0 the random tiny model repeats one unfinished call; sampled, it emits parsed calls
    return ModelRole(model="hosted_vllm/tiny", api_base=api_base, retries=0, **{"temperature": 1.0, **kw})


# The random tiny model's free replies are cut by the token limit (now `truncated`, which ends the episode);
# a named tool choice with strict schemas makes every turn a valid call, so episodes run to the limit under test.
LIST_SHEETS = {"type": "function", "function": {"name": "list_sheets"}}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


async def test_max_turns():
    role, script = scripted([Step(calls=[("get_total", {})])] * 10)
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0, limits=Limits(max_turns=3))
    assert traj.stop_reason == "max_turns" and len(traj.turns) == 3 and len(script.seen) == 3
    assert traj.verdict.failed_checks == ["total", "answered"] and traj.id and traj.tag == "rollout"
    env.close()


async def test_each_request_is_seeded_by_its_instance_episode_seed_and_turn():
    """Two instances under one episode seed draw different streams (a shared seed makes them one draw); the same
    instance and seed draw the same stream under any harness (paired comparisons share it)."""
    sent = {}
    for index, harness in ((0, ROLE), (1, ROLE), (0, baseline("payroll_audit"))):
        role, script = scripted([Step(calls=[("add", {"n": 1})]), Step(text="done")])
        env = CounterEnv(counter_env(1).instance.model_copy(update={"id": f"counter/{index}", "index": index}))
        await run_episode(role, harness, env, seed=2, limits=Limits(max_turns=3))
        env.close()
        sent[index, harness.id] = script.seeds
    assert sent[0, ROLE.id] == [turn_seed("counter/0", 2, 0), turn_seed("counter/0", 2, 1)]
    assert sent[0, ROLE.id] == sent[0, baseline("payroll_audit").id]
    assert not set(sent[0, ROLE.id]) & set(sent[1, ROLE.id])
    seeds = {turn_seed(f"payroll_audit/{i}", s, t) for i in range(40, 100) for s in range(3) for t in range(30)}
    assert len(seeds) == 60 * 3 * 30 and all(0 <= x < 2**31 for x in seeds)


async def test_timeout_keeps_the_record_and_verdict():
    role, _ = scripted([Step(calls=[("add", {"n": 5})]), Step(calls=[("get_total", {})], sleep_s=30)])
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0, limits=Limits(wall_s=1.0))
    assert traj.stop_reason == "timeout" and "wall-clock" in traj.error
    assert len(traj.turns) == 1 and traj.wall_s < 5
    assert traj.verdict.passed_checks == ["total"]  # verified in the state the episode reached
    env.close()


async def test_error_in_the_environment_becomes_stop_reason_error():
    class Broken(CounterEnv):
        def _setup(self) -> None:
            raise RuntimeError("database missing")

        def verify(self) -> Verdict:
            raise RuntimeError("cannot verify")

    role, _ = scripted([])
    env = Broken(counter_env().instance)
    traj = await run_episode(role, ROLE, env, seed=0)
    assert traj.stop_reason == "error" and "database missing" in traj.error
    assert traj.score == 0.0 and traj.verdict.failed_checks == ["verify_crashed"]


async def test_prefix_continuation_replays_only_executed_calls():
    hook = Hook.model_validate({"id": "no-9", "when": {"on": "before_tool_call", "tool": "add", "args": '"n": 9'},
                                "then": {"do": "block", "message": "no nines"}})
    h = ROLE.model_copy(update={"hooks": [hook], "tools": ROLE.tools.model_copy(update={"helpers": ["notes"]})})
    role, _ = scripted([Step(calls=[("add", {"n": 1}), ("notes", {"text": "n1"})]), Step(calls=[("add", {"n": 9})]),
                        Step(calls=[("add", {"n": 1})]), Step(text="first run")])
    env = counter_env(5)
    first = await run_episode(role, h, env, seed=0)
    assert env.total == 2 and first.stop_reason == "submitted"
    # the prefix: up to and including turn 1 (the blocked call), i.e. before the assistant message of turn 2
    cut = [i for i, m in enumerate(first.messages) if m["role"] == "assistant"][2]
    prefix = first.messages[:cut]
    # an expert-style rewritten turn whose call has not run yet
    rewritten = {"role": "assistant", "content": "Add the rest.", "tool_calls": [
        {"id": "fix", "type": "function", "function": {"name": "add", "arguments": '{"n": 4}'}}]}
    role2, script2 = scripted([Step(calls=[("notes", {})]), Step(text="total is 5")])
    env2 = counter_env(5)
    second = await run_episode(role2, h, env2, seed=0, prefix=[*prefix, rewritten], tag="correction")
    assert env2.calls == [("add", 1), ("add", 4)]  # replayed add(1), not the blocked add(9); then the pending call
    assert second.stop_reason == "submitted" and second.score == 1.0
    assert [t.index for t in second.turns] == [0, 1, 2, 3, 4] and second.turns[2].tool_results[0].content == "total is now 5"
    assert second.turns[3].tool_results[0].content == "1. n1"  # the scratchpad was rebuilt from the prefix
    assert second.messages[: len(prefix)] == prefix and len(script2.seen[0]) == len(prefix) + 2  # + the rewritten turn and its answer
    assert second.tag == "correction" and second.id != first.id
    assert any(m["content"].startswith(BLOCKED_PREFIX) for m in prefix if m["role"] == "tool")
    env.close()
    env2.close()


async def test_reply_cut_by_the_token_limit_is_truncated_not_submitted():
    role, _ = scripted([Step(text="The total is", finish="length")])
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0, limits=Limits(max_tokens_per_turn=7))
    assert traj.stop_reason == "truncated" and env.final_answer is None and "max_tokens_per_turn=7" in traj.error
    assert traj.turns[0].finish_reason == "length" and traj.verdict.failed_checks == ["total", "answered"]
    env.close()


async def test_cut_reply_with_tool_calls_runs_them_and_goes_on():
    role, _ = scripted([Step(calls=[("add", {"n": 5}), ("add", "{\"n\": ")], finish="length"), Step(text="5")])
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0)
    assert traj.stop_reason == "submitted" and traj.score == 1.0 and env.calls == [("add", 5)]
    assert [t.finish_reason for t in traj.turns] == ["length", "stop"] and traj.turns[0].malformed_tool_calls == 1
    env.close()


def _on_the_wire(messages: list[dict]) -> list[dict]:
    """LiteLLM leaves out keys whose value is None (an assistant tool-call message's `content`) when it sends."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


WINDOWS = {
    "full": (ContextPolicy(), False),
    "window": (ContextPolicy(keep_last_turns=1, max_tool_result_chars=200), False),
    "summary": (ContextPolicy(keep_last_turns=2, summarize_with="sum"), True),
}


@pytest.mark.parametrize("window", list(WINDOWS))
async def test_each_turns_view_and_token_ids_are_recoverable(window, tmp_path):
    """`model_messages(i)` is exactly what the model was sent on turn i, and `token_ids()` gives back every
    turn's exact prompt and completion ids after a write/read of the stored tables."""
    policy, summarize = WINDOWS[window]
    steps = [Step(calls=[("add", {"n": 1})]), Step(calls=[("dump", {"size": 600})]), Step(calls=[("add", {"n": 2})]),
             Step(calls=[("get_total", {})]), Step(calls=[("add", {"n": 2})]), Step(text="5")]
    role, script = scripted(steps, token_ids=True)
    summarizer, _ = scripted([Step(text=f"summary {i}") for i in range(9)])
    env = counter_env(5)
    traj = await run_episode(role, ROLE.model_copy(update={"context": policy}), env, seed=0,
                             summarizers={"sum": summarizer} if summarize else None)
    env.close()
    assert traj.stop_reason == "submitted" and traj.score == 1.0 and len(traj.turns) == 6
    assert [_on_the_wire(traj.model_messages(i)) for i in range(6)] == script.seen
    [back] = read_trajectories(write_trajectories(tmp_path / "t.parquet", [traj]))
    assert back == traj and back.token_ids() == script.sent_ids
    assert [_on_the_wire(back.model_messages(i)) for i in range(6)] == script.seen
    full = [len(p) + len(c) for p, c in script.sent_ids]  # each turn's prompt + completion
    reused = [t.prompt_ids_reused for t in traj.turns]
    if window == "full":  # every prompt extends the last prompt + completion: only the appended ids are stored
        assert reused == [0, *full[:-1]] and all(t.context_cut is None for t in traj.turns)
    else:  # the window rewrote some prompts: those store more than the appended ids
        assert any(r < f for r, f in zip(reused[1:], full[:-1], strict=True))
        assert any(t.context_cut is not None for t in traj.turns)
    assert sum(len(t.prompt_ids_added) for t in traj.turns) < sum(len(p) for p, _ in script.sent_ids)


async def test_prefix_of_a_trajectory_keeps_its_records_and_catches_a_tampered_result():
    steps = [Step(calls=[("add", {"n": 1})]), Step(calls=[("get_total", {})]), Step(calls=[("add", {"n": 4})]), Step(text="5")]
    role, _ = scripted(steps, token_ids=True)
    env = counter_env(5)
    first = await run_episode(role, ROLE, env, seed=0)
    env.close()
    p = prefix_of(first, 2)
    assert [m["role"] for m in p.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    role2, script2 = scripted([Step(calls=[("add", {"n": 4})]), Step(text="5")], token_ids=True)
    env2 = counter_env(5)
    second = await run_episode(role2, ROLE, env2, seed=0, prefix=p, on_divergence="raise")
    assert second.stop_reason == "submitted" and second.score == 1.0 and second.prefix_turns == 2
    assert second.turns[:2] == first.turns[:2] and second.token_ids()[:2] == first.token_ids()[:2]
    assert second.token_ids()[2:] == script2.sent_ids and second.turns[2].prompt_ids_reused > 0
    assert second.id != first.id and second.id != (await _continue(p.then(first.messages[6])))[0].id
    tampered = [t.model_copy(deep=True) for t in p.turns]
    tampered[1].tool_results[0] = ToolResult(content="7")
    with pytest.raises(ReplayDivergence) as e:
        await run_episode(role2, ROLE, counter_env(5), seed=0, prefix=p.model_copy(update={"turns": tampered}),
                          on_divergence="raise")
    assert e.value.turn == 1 and (e.value.recorded, e.value.replayed) == ("7", "1")
    assert "replay diverged at turn 1: get_total({}) recorded '7', replayed '1'" == str(e.value)
    # as messages only (no records): the tool message the model saw is what the replay is compared with
    msgs = [dict(m) for m in p.messages]
    msgs[5]["content"] = "7"
    recorded, env3 = await _continue(Prefix(messages=msgs))
    assert recorded.stop_reason == "replay_divergence" and recorded.score == 0.0 and "turn 1" in recorded.error
    assert recorded.verdict.failed_checks == ["replay_divergence"] and recorded.messages[:6] == msgs and not recorded.turns
    assert env3.calls == [("add", 1), ("get_total", None)]  # replayed, then nothing ran


async def _continue(prefix: Prefix):
    role, _ = scripted([Step(text="5")])
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0, prefix=prefix)
    env.close()
    return traj, env


def _oracle_sample(family: str):
    fam = tasks.get(family)
    val = fam.instances("val")
    return next((i for i in val if i.difficulty == fam.difficulties[-1]), val[0])


async def _oracle_run(family: str, inst, **kw):
    env = tasks.make_env(inst)
    try:
        return await run_episode(ModelRole(model=f"oracle/{family}"), baseline(family), env, seed=0,
                                 limits=Limits(max_turns=80), **kw)
    finally:
        env.close()


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f in HEAVY_FAMILIES else f
                                    for f in tasks.families()])
async def test_oracle_through_run_episode_scores_one_and_its_prefix_replays_exactly(family):
    """The oracle solves a hard instance; continuing from the middle of its trajectory replays every earlier
    tool result exactly (after the family's normalisation) and solves it again; a tampered recorded result
    raises ReplayDivergence naming its turn."""
    inst = _oracle_sample(family)
    traj = await _oracle_run(family, inst)
    assert traj.stop_reason == "submitted", traj.error
    assert traj.score == 1.0, traj.verdict.feedback
    assert all(t.malformed_tool_calls == 0 for t in traj.turns)
    mid = len(traj.turns) // 2
    p = prefix_of(traj, mid)
    cont = await _oracle_run(family, inst, prefix=p, on_divergence="raise")
    assert cont.stop_reason == "submitted" and cont.score == 1.0, (cont.error, cont.verdict.feedback)
    assert cont.prefix_turns == mid and cont.turns[:mid] == traj.turns[:mid]
    k = max(i for i in range(mid) if traj.turns[i].tool_results)
    tampered = [t.model_copy(deep=True) for t in p.turns]
    tampered[k].tool_results[0] = ToolResult(content=tampered[k].tool_results[0].content + " (tampered)")
    with pytest.raises(ReplayDivergence) as e:
        await _oracle_run(family, inst, prefix=p.model_copy(update={"turns": tampered}), on_divergence="raise")
    assert e.value.turn == k and e.value.recorded.endswith(" (tampered)") and f"at turn {k}:" in str(e.value)


async def test_oracle_plans_from_the_rollouts_own_environment_and_agrees_with_replay():
    """Inside run_episode the oracle reads the rollout's shared environment: an episode cut short leaves no
    copy of its own in the provider's live cache (the replay path keeps one until the final answer), nothing
    stays shared after it, and every turn's action equals what the replay path (a fresh copy with the
    conversation replayed) answers from the same messages."""
    from agents import shared_env
    from agents.providers.oracle import oracle_reply
    from agents.providers.registry import close_provider_environments

    family = "stock_alert"
    inst = _oracle_sample(family)
    close_provider_environments()
    env = tasks.make_env(inst)
    try:
        cut = await run_episode(ModelRole(model=f"oracle/{family}"), baseline(family), env, seed=0,
                                limits=Limits(max_turns=2))
    finally:
        env.close()
    assert cut.stop_reason == "max_turns" and len(cut.turns) == 2
    handler = next(e["custom_handler"] for e in litellm.custom_provider_map if e["provider"] == "oracle")
    assert len(handler.cache._live) == 0 and shared_env.n_shared() == 0
    traj = await _oracle_run(family, inst)
    assert traj.score == 1.0 and len(traj.turns) > 3
    for i, turn in enumerate(traj.turns):
        replayed = await oracle_reply(family, traj.model_messages(i), inst.id)
        if turn.tool_calls:
            assert [(c.name, c.arguments) for c in turn.tool_calls] == [(replayed.name, replayed.arguments)], i
        else:
            assert turn.assistant["content"] == replayed.text, i


@pytest.mark.vllm
async def test_real_tool_calling_episode_on_vllm(vllm_server, tiny_model_dir):
    inst = tasks.instances("stock_alert", "train")[0]
    env = tasks.make_env(inst)
    h = baseline("stock_alert").model_copy(update={
        "context": ContextPolicy(max_tool_result_chars=400, keep_last_turns=2),
        "hooks": [Hook.model_validate({"id": "every", "when": {"on": "before_tool_call"}, "then": {"do": "inject", "message": "careful"}})],
    })
    traj = await run_episode(_tiny(vllm_server, strict_tools=True), h, env, seed=3, tool_choice=LIST_SHEETS,
                             limits=Limits(max_turns=6, max_tokens_per_turn=96))
    env.close()
    assert traj.stop_reason == "max_turns", traj.error
    assert len(traj.turns) == 6 and traj.model_id == f"hosted_vllm/tiny@{vllm_server}"
    ids = traj.token_ids()
    for t, turn_ids in zip(traj.turns, ids, strict=True):
        assert t.prompt_tokens > 0 and t.completion_tokens > 0 and t.latency_s > 0
        assert turn_ids is not None and turn_ids[0] and turn_ids[1] and t.finish_reason in ("stop", "tool_calls")
        assert [(c.name, c.arguments) for c in t.tool_calls] == [("list_sheets", {})] and len(t.tool_results) == 1
    # every tool call has exactly one tool answer: the conversation is valid to send again
    asked = [c["id"] for m in traj.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in traj.messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered)
    fired = {tr.component_id for t in traj.turns for tr in t.triggers}
    assert "hook:every" in fired
    _assert_views_and_ids_match_the_template(traj, tiny_model_dir)


@pytest.mark.vllm
async def test_reply_cut_by_the_token_limit_on_vllm_is_truncated(vllm_server):
    h0 = baseline("stock_alert")
    h = h0.model_copy(update={"tools": ToolPolicy(hidden=sorted(h0.tools.descriptions))})  # a short text-only prompt
    env = tasks.make_env(tasks.instances("stock_alert", "val")[0])
    traj = await run_episode(_tiny(vllm_server, temperature=0.0), h, env, seed=0, limits=Limits(max_tokens_per_turn=4))
    env.close()
    assert traj.stop_reason == "truncated", (traj.stop_reason, traj.messages[-1])
    assert len(traj.turns) == 1 and traj.turns[0].finish_reason == "length" and traj.turns[0].completion_tokens == 4
    assert env.final_answer is None and not traj.passed


def _assert_views_and_ids_match_the_template(traj, model_dir) -> None:
    """Each turn's rebuilt view, rendered with the model's chat template, is exactly the prompt vLLM tokenized
    (the ids reconstructed from the deltas), and the window made the stored ids smaller than the prompts."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    # the tools as vLLM hands them to the template: with the `strict: true` the client sent (strict_tools)
    tools = [{"type": "function", "function": {**t["function"], "strict": True}} for t in traj.tools]
    ids = traj.token_ids()
    for i, turn in enumerate(traj.turns):
        prompt, completion = ids[i]
        assert len(prompt) == turn.prompt_tokens and len(completion) == turn.completion_tokens
        text = tok.apply_chat_template(traj.model_messages(i), tools=tools, add_generation_prompt=True, tokenize=False)
        assert tok.encode(text, add_special_tokens=False) == prompt, f"turn {i}"
    assert any(t.context_cut is not None for t in traj.turns)
    assert sum(len(t.prompt_ids_added) for t in traj.turns) < sum(len(p) for p, _ in ids)


@pytest.mark.vllm
async def test_strict_tools_make_the_tiny_models_calls_valid_and_run(vllm_server):
    """`strict_tools` sends `strict: true` schemas (past LiteLLM, which strips them): vLLM then constrains the
    arguments, so even the random model's forced call to a no-argument tool is `{}` and the tool runs."""
    if "stock_alert" not in tasks.families():
        pytest.skip("needs the stock_alert family")
    inst = tasks.instances("stock_alert", "val")[0]
    choice = {"type": "function", "function": {"name": "list_sheets"}}
    limits = Limits(max_turns=3, max_tokens_per_turn=64)
    runs = {}
    for strict in (False, True):
        env = tasks.make_env(inst)
        runs[strict] = await run_episode(_tiny(vllm_server, strict_tools=strict), baseline("stock_alert"), env,
                                         seed=1, tool_choice=choice, limits=limits)
        env.close()
    strict_run, loose_run = runs[True], runs[False]
    assert strict_run.stop_reason == "max_turns", strict_run.error
    for t in strict_run.turns:
        assert [(c.name, c.arguments) for c in t.tool_calls] == [("list_sheets", {})]
        assert t.malformed_tool_calls == 0 and not t.tool_results[0].is_error
    # without strict schemas the same seed's arguments are not an object (here: a number) and never run
    assert sum(t.malformed_tool_calls for t in loose_run.turns) >= 1


@pytest.mark.vllm
async def test_cost_cap_on_vllm(vllm_server):
    env = tasks.make_env(tasks.instances("stock_alert", "train")[0])
    role = _tiny(vllm_server, strict_tools=True, input_cost_per_token=0.01, output_cost_per_token=0.01)
    traj = await run_episode(role, baseline("stock_alert"), env, seed=1, tool_choice=LIST_SHEETS,
                             limits=Limits(cost_usd=1.0, max_tokens_per_turn=64))
    env.close()
    assert traj.stop_reason == "cost_cap" and len(traj.turns) == 1, (traj.stop_reason, traj.error)
    assert traj.cost_usd == pytest.approx(0.01 * (traj.turns[0].prompt_tokens + traj.turns[0].completion_tokens))


@pytest.mark.vllm
async def test_context_overflow_on_vllm(vllm_server):
    env = counter_env(5)
    huge = ROLE.model_copy(update={"sections": [PromptSection(id="role", text="numbers " * 20_000)]})
    traj = await run_episode(ModelClient(_tiny(vllm_server)), huge, env, seed=0)
    env.close()
    assert traj.stop_reason == "context_overflow" and traj.error and traj.turns == []
    assert traj.verdict.failed_checks == ["total", "answered"]


async def test_model_error_on_a_closed_port():
    env = counter_env(5)
    role = ModelRole(model="hosted_vllm/tiny", api_base=f"http://127.0.0.1:{_closed_port()}/v1", retries=0, timeout_s=5)
    traj = await run_episode(role, ROLE, env, seed=0)
    env.close()
    assert traj.stop_reason == "model_error" and "Connect" in traj.error
    assert traj.verdict.failed_checks == ["total", "answered"]
    assert set(STOP_REASONS) >= {"submitted", "max_turns", "timeout", "cost_cap", "context_overflow", "harness_stop",
                                 "truncated", "replay_divergence", "model_error", "error"}


LIST_ALL_PRODUCTS = {"name": "list_all_products", "description": "List every page of the inventory.",
                     "parameters": {"pages": {"type": "integer", "description": "How many pages the listing has."}},
                     "steps": [{"tool": "list_products", "arguments": {"page": "{i}"}, "repeat": "pages"}]}


async def test_a_composite_tool_runs_its_environment_calls_and_replays_in_a_prefix():
    """A harness composite tool on the real stock_alert environment: one model call runs every page in order,
    the results come back as one tool message, the trajectory records the call and its trigger, a call that
    does not expand is an error message for the model, and a prefix with the call replays it exactly."""
    inst = _oracle_sample("stock_alert")
    h = Harness.model_validate({**baseline("stock_alert").model_dump(), "composite_tools": [LIST_ALL_PRODUCTS]})
    env = tasks.make_env(inst)
    env.reset()
    pages = env.n_pages()  # run_episode resets again: the same instance, the same pages
    assert pages > 1
    steps = [Step(calls=[("list_all_products", {"pages": "all"})]), Step(calls=[("list_all_products", {"pages": pages})]),
             Step(calls=[("list_suppliers", {})]), Step(text="done")]
    role, script = scripted(steps)
    try:
        traj = await run_episode(role, h, env, seed=0)
        assert env.pages_seen == set(range(1, pages + 1))
    finally:
        env.close()
    assert traj.stop_reason == "submitted" and "list_all_products" in {t["function"]["name"] for t in traj.tools}
    bad, good = traj.turns[0], traj.turns[1]
    assert bad.tool_results[0].is_error and "argument 'pages' must be a integer" in bad.tool_results[0].content
    assert [c.name for c in good.tool_calls] == ["list_all_products"] and not good.tool_results[0].is_error
    shown = script.seen[2][-1]["content"]
    assert shown.startswith('[1/%d] list_products {"page": 1}' % pages) and f'[{pages}/{pages}] list_products' in shown
    assert [(t.component_id, t.kind) for t in good.triggers] == [("tool:list_all_products", "composite_tool")]
    env2 = tasks.make_env(inst)
    role2, _ = scripted([Step(text="done")])
    try:
        cont = await run_episode(role2, h, env2, seed=0, prefix=prefix_of(traj, 3), on_divergence="raise")
        assert env2.pages_seen == set(range(1, pages + 1)) and cont.turns[:3] == traj.turns[:3]
    finally:
        env2.close()
