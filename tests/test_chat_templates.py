"""Our chat templates (deploy/templates: Qwen3 thinking on and off, Qwen3-Coder XML calls, Gemma 4) on the real
vLLM CPU server: for a multi-turn tool-calling conversation, training (training/render.py) renders exactly the
token ids the server rendered before every assistant turn, and think text never becomes trained content.

One server serves them all: a tokenizer built here carrying every family's special tokens, and a one-layer
model whose weights make it answer `<think>hmm</think>\\n\\ndone` (tests/template_model.py). It starts with
`chat_template: qwen3`, the qwen3 reasoning parser and thinking on; the other templates and thinking off are
sent per request (the rendering path is the same as a server started with them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from template_model import build_template_model

from agents.client import ModelClient
from agents.records import ModelRole
from deploy.chat_templates import TEMPLATES, choose_template
from deploy.vllm_server import ServeSpec, free_port, start_server, stop_server
from training.convert import to_student_messages
from training.dataset import load_tokenizer
from training.render import IGNORE, render

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "description": "File path."},
                                     "limit": {"type": "integer"}}, "required": ["path"]}}}]


def _call(i: int, path: str, **extra: object) -> dict:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": path, **extra})}}


# OpenAI format, as a trajectory stores it: arguments are JSON strings, tool results name their call.
CONVERSATION = [
    {"role": "system", "content": "You audit payroll files."},
    {"role": "user", "content": "Total the hours in a.csv and b.csv."},
    {"role": "assistant", "content": None, "tool_calls": [_call(0, "a.csv", limit=5)]},
    {"role": "tool", "tool_call_id": "call_0", "content": "name,hours\nAda,3"},
    {"role": "assistant", "content": "Now the second file.", "tool_calls": [_call(1, "b.csv"), _call(2, "c.csv")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Bo,4"},
    {"role": "tool", "tool_call_id": "call_2", "content": "error: no such file"},
    {"role": "assistant", "content": "The total is 7."},
]
CASES = [("qwen3", True), ("qwen3", False), ("qwen3_coder", None), ("gemma4", None)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    model = build_template_model(tmp_path_factory.mktemp("template-model"))
    state = tmp_path_factory.mktemp("vllm-templates")
    spec = ServeSpec(model=str(model), name="tmpl", port=free_port(), chat_template="qwen3", reasoning_parser="qwen3",
                     enable_thinking=True, enable_lora=False, max_model_len=4096, cpu_kvcache_gib=1,
                     extra_args=["--trust-request-chat-template"])
    assert "--default-chat-template-kwargs" in spec.command() and str(TEMPLATES["qwen3"].path) in spec.command()
    handle = start_server(spec, state_dir=state, ready_timeout_s=600)
    try:
        yield handle.api_base, model
    finally:
        stop_server(spec.port, state_dir=state)


def _request(name: str, thinking: bool | None) -> dict:
    extra: dict = {} if name == "qwen3" else {"chat_template": TEMPLATES[name].path.read_text()}
    if thinking is not None:
        extra["chat_template_kwargs"] = {"enable_thinking": thinking}
    return extra


def server_prompt(api_base: str, messages: list[dict], name: str, thinking: bool | None) -> list[int]:
    r = httpx.post(f"{api_base}/chat/completions", timeout=120, json={
        "model": "tmpl", "messages": messages, "tools": TOOLS, "max_tokens": 1, "temperature": 0,
        "return_token_ids": True, **_request(name, thinking)})
    assert r.status_code == 200, r.text
    return r.json()["prompt_token_ids"]


@pytest.mark.vllm
@pytest.mark.parametrize("name,thinking", CASES)
def test_training_renders_the_token_ids_the_server_rendered(server: tuple[str, Path], name: str,
                                                            thinking: bool | None) -> None:
    api_base, model = server
    tok = load_tokenizer(model, TEMPLATES[name].path, {} if thinking is None else {"enable_thinking": thinking})
    rendered = render(tok, to_student_messages(CONVERSATION), TOOLS, "assistant")
    turns = [i for i, m in enumerate(CONVERSATION) if m["role"] == "assistant"]
    for k, i in enumerate(turns):  # the server's prompt before turn k is training's context of turn k
        start, end = rendered.turn_spans[k]
        assert server_prompt(api_base, CONVERSATION[:i], name, thinking) == rendered.input_ids[:start], (name, k)
        assert tok.decode(rendered.input_ids[end - 1:end]) in ("<|im_end|>", "<turn|>", "<|tool_response>")
    trained = tok.decode([x for x in rendered.labels if x != IGNORE])
    assert "The total is 7." in trained and "Now the second file." in trained and "c.csv" in trained


@pytest.mark.vllm
async def test_think_text_goes_to_reasoning_and_is_never_trained(server: tuple[str, Path]) -> None:
    api_base, model = server
    role = ModelRole(model="hosted_vllm/tmpl", api_base=api_base, max_tokens=16)
    first = CONVERSATION[:2]
    thought = await ModelClient(role).complete(first, TOOLS)  # the model writes <think>hmm</think>\n\ndone
    tok = load_tokenizer(model, TEMPLATES["qwen3"].path)
    assert tok.decode(thought.completion_token_ids or []).startswith("<think>hmm</think>")
    assert "hmm" not in thought.content and thought.content.strip() == "done"
    quiet = await ModelClient(role.model_copy(update={"extra_body": {"chat_template_kwargs": {
        "enable_thinking": False}}})).complete(first, TOOLS)
    assert quiet.content.strip() == "done" and "<think>" not in tok.decode(quiet.completion_token_ids or [])
    # The reply as the trajectory keeps it, then the next turn: the server's prompt re-renders the reply.
    convo = [*first, thought.message, {"role": "user", "content": "And b.csv?"}, {"role": "assistant", "content": "4"}]
    rendered = render(tok, to_student_messages(convo), TOOLS, "assistant")
    assert server_prompt(api_base, convo[:4], "qwen3", True) == rendered.input_ids[:rendered.turn_spans[1][0]]
    trained = tok.decode([x for x in rendered.labels if x != IGNORE])
    assert "done" in trained and "hmm" not in trained
    # A server without a reasoning parser leaves the think block in content: the template drops it.
    raw = [*first, {"role": "assistant", "content": "<think>hmm, secret plan</think>\n\ndone"}]
    leaked = render(tok, to_student_messages(raw), TOOLS, "assistant")
    assert "secret" not in tok.decode(leaked.input_ids)


def test_auto_choice_reads_the_model_config(tmp_path: Path) -> None:
    for model_type, own, want in [("qwen3", "", "qwen3"), ("qwen3_moe", "<function={{ name }}>", "qwen3_coder"),
                                  ("gemma4", "", "gemma4"), ("llama", "", None)]:
        d = tmp_path / model_type
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(json.dumps({"model_type": model_type}))
        (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": own}))
        spec = choose_template(d)
        assert (spec.name if spec else None) == want, model_type
    assert ServeSpec(model=str(tmp_path / "qwen3"), name="s", chat_template="auto").template_file() == \
        str(TEMPLATES["qwen3"].path)
