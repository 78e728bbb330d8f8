"""The tiny local model: determinism, chat template, tokenizer round trip."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from deploy.tiny_model import TinyModelSpec, build_tiny_model, weights_digest
from training.micro.vocab import TOOL_TOKENS

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a thing up.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
CONVERSATION = [
    {"role": "system", "content": "You are an auditor."},
    {"role": "user", "content": "Find the total."},
    {"role": "assistant", "content": "Looking it up.", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": "total"})}}]},
    {"role": "tool", "tool_call_id": "c0", "content": "42"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "check"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "assistant", "content": "The total is 42."},
]


def test_same_seed_same_model_other_seed_differs(tmp_path, tiny_model_dir):
    a = build_tiny_model(tmp_path / "a", TinyModelSpec(seed=0))
    b = build_tiny_model(tmp_path / "b", TinyModelSpec(seed=1))
    assert weights_digest(a) == weights_digest(tiny_model_dir)
    assert (a / "tokenizer.json").read_text() == (tiny_model_dir / "tokenizer.json").read_text()
    assert weights_digest(b) != weights_digest(a)


def test_architecture_and_size(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = model.config
    assert cfg.model_type == "qwen3" and cfg.head_dim == 64
    n = sum(p.numel() for p in model.parameters())
    assert 100_000 < n < 5_000_000, n


def test_chat_template_renders_tool_conversation(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert "<tools>\n" + json.dumps(TOOLS[0]) in text
    assert '<tool_call>\n{"name": "lookup", "arguments": {"q": "total"}}\n</tool_call>' in text
    assert '<tool_call>\n{"name": "lookup", "arguments": {"q": "check"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>" in text
    assert text.startswith("<|im_start|>system\nYou are an auditor.")
    assert text.endswith("<|im_start|>assistant\nThe total is 42.<|im_end|>\n")
    # tokenizer round trip: decode(encode(text)) == text, tool tags are single, non-special tokens
    ids = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=True, return_dict=True)["input_ids"]
    assert tok.decode(ids) == text
    for t in TOOL_TOKENS:
        tid = tok.convert_tokens_to_ids(t)
        assert tok.decode([tid], skip_special_tokens=True) == t  # survives special-token stripping


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_template_is_prefix_stable(tiny_model_dir, k):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    shorter = tok.apply_chat_template(CONVERSATION[:k], tools=TOOLS, tokenize=False)
    longer = tok.apply_chat_template(CONVERSATION[: k + 1], tools=TOOLS, tokenize=False)
    assert longer.startswith(shorter)


def test_generation_prompt(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nFind the total.<|im_end|>\n<|im_start|>assistant\n")
