"""The vocabulary and chat template the tiny and micro students share (deploy/tiny_model.py builds the tiny one)."""

from __future__ import annotations

from pathlib import Path

TEMPLATE_PATH = Path(__file__).parent / "chat_template.jinja"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but NOT special (as in Qwen's tokenizer): special tokens are stripped on decode and vLLM's hermes
# parser would never see a tool call.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
