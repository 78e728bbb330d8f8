"""The real vLLM CPU server on the tiny model, through our launcher and our model client."""

from __future__ import annotations

import httpx
import pytest

from agents.client import ModelCallError, ModelClient
from agents.records import ModelRole
from deploy.vllm_server import ServeSpec, ServerStartError, load_adapter, served_models, start_server

pytestmark = pytest.mark.vllm

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a thing up.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]


def _role(api_base: str, model: str = "tiny", **kw) -> ModelRole:
    return ModelRole(model=f"hosted_vllm/{model}", api_base=api_base, max_tokens=16, **kw)


async def test_chat_completion_returns_text_tokens_and_zero_cost(vllm_server):
    resp = await ModelClient(_role(vllm_server)).complete([{"role": "user", "content": "Hello"}], seed=0)
    assert resp.completion_tokens > 0 and resp.prompt_tokens > 0
    assert resp.cost_usd == 0.0
    assert resp.prompt_token_ids and len(resp.prompt_token_ids) == resp.prompt_tokens
    assert resp.completion_token_ids and len(resp.completion_token_ids) == resp.completion_tokens
    assert resp.latency_s > 0


async def test_tool_call_request_parses_calls(vllm_server):
    # Greedy decoding makes the random model loop on digits inside the arguments; sampling with a fixed
    # seed is reproducible and ends the call (seen: seed 1 -> lookup with arguments "7392").
    client = ModelClient(_role(vllm_server, temperature=1.0))
    forced = await client.complete([{"role": "user", "content": "look up x"}], TOOLS, tool_choice="required",
                                   max_tokens=48, seed=1)
    assert forced.tool_calls, forced.message
    assert all(tc.name == "lookup" for tc in forced.tool_calls)
    assert forced.message["tool_calls"][0]["function"]["name"] == "lookup"
    # free choice: the random model may or may not call a tool; either way the client must not crash
    free = await client.complete([{"role": "user", "content": "look up x"}], TOOLS, max_tokens=24)
    assert free.tool_calls or isinstance(free.content, str)


async def test_cost_accounting_uses_role_prices(vllm_server):
    resp = await ModelClient(_role(vllm_server, input_cost_per_token=1e-3, output_cost_per_token=2e-3)).complete(
        [{"role": "user", "content": "Hello"}])
    assert resp.cost_usd == pytest.approx(resp.prompt_tokens * 1e-3 + resp.completion_tokens * 2e-3)


@pytest.mark.parametrize("transport", ["auto", "litellm"])
async def test_unknown_model_and_dead_server_are_model_errors(vllm_server, transport):
    with pytest.raises(ModelCallError) as e:
        await ModelClient(_role(vllm_server, model="no-such-model"), transport).complete([{"role": "user", "content": "x"}])
    assert e.value.kind == "model_error"
    dead = ModelRole(model="hosted_vllm/tiny", api_base="http://127.0.0.1:9/v1", retries=1, timeout_s=5)
    with pytest.raises(ModelCallError) as e:
        await ModelClient(dead, transport).complete([{"role": "user", "content": "x"}])
    assert e.value.kind == "model_error" and "after 2 tries" in str(e.value)


@pytest.mark.parametrize("transport", ["auto", "litellm"])
async def test_prompt_over_the_window_is_context_overflow(vllm_server, transport):
    huge = "word " * 20000  # the fixture serves an 8192-token window
    with pytest.raises(ModelCallError) as e:
        await ModelClient(_role(vllm_server), transport).complete([{"role": "user", "content": huge}])
    assert e.value.kind == "context_overflow", str(e.value)


async def test_lean_path_and_litellm_give_the_same_record(vllm_server):
    """hosted_vllm goes through agents/vllm_http.py by default; LiteLLM on the same seeded request gives the
    same message, tool calls, token ids and logprobs (one per sampled token)."""
    lean, full = ModelClient(_role(vllm_server, temperature=1.0)), ModelClient(_role(vllm_server, temperature=1.0), "litellm")
    assert lean.lean and not full.lean
    msgs = [{"role": "user", "content": "look up x"}]
    a = await lean.complete(msgs, TOOLS, tool_choice="required", max_tokens=48, seed=1)
    b = await full.complete(msgs, TOOLS, tool_choice="required", max_tokens=48, seed=1)
    def calls(r):  # tool call ids are drawn by the server per request
        return [(c.name, c.arguments_json()) for c in r.tool_calls]

    assert a.tool_calls and calls(a) == calls(b) and (a.content or "") == (b.content or "")
    assert a.finish_reason == b.finish_reason
    assert a.prompt_token_ids == b.prompt_token_ids and a.completion_token_ids == b.completion_token_ids
    assert a.logprobs and len(a.logprobs) == len(a.completion_token_ids) and all(x <= 0.0 for x in a.logprobs)
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)


async def test_lora_adapter_hot_loads_and_changes_greedy_output(vllm_server, tiny_model_dir, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    # init_lora_weights=False: random A and B (peft's own testing init), so the adapter is not a no-op.
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                     "gate_proj", "up_proj", "down_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(50.0)  # a visible change in greedy output from a random adapter
    peft_model.save_pretrained(tmp_path / "adapter")

    load_adapter(vllm_server, "student@r1", tmp_path / "adapter")
    assert "student@r1" in served_models(vllm_server)
    msgs = [{"role": "user", "content": "Write the total for each department."}]
    base_out = await ModelClient(_role(vllm_server)).complete(msgs, seed=0, max_tokens=24)
    lora_out = await ModelClient(_role(vllm_server, model="student@r1")).complete(msgs, seed=0, max_tokens=24)
    again = await ModelClient(_role(vllm_server)).complete(msgs, seed=0, max_tokens=24)
    assert base_out.completion_token_ids == again.completion_token_ids  # greedy is deterministic
    assert lora_out.completion_token_ids != base_out.completion_token_ids


def test_start_refuses_a_busy_port_and_reports_a_dead_server(vllm_server, tmp_path):
    port = int(httpx.URL(vllm_server).port)
    with pytest.raises(ServerStartError, match="already serves"):
        start_server(ServeSpec(model="x", name="x", port=port), state_dir=tmp_path)
    from deploy.vllm_server import free_port

    bad = ServeSpec(model=str(tmp_path / "missing-model"), name="x", port=free_port())
    with pytest.raises(ServerStartError, match="exited"):
        start_server(bad, state_dir=tmp_path, ready_timeout_s=120)
