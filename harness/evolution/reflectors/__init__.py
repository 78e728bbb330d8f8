"""Reflection strategies, chosen by name: `library` (offline, the embedded default) or `llm:MODEL`.

    reflector = make_reflector("library", family="payroll_audit")
    reflector = make_reflector("llm:hosted_vllm/tiny", family="payroll_audit", complete=completion_fn)

Strategy flags follow one form everywhere: `name` or `name:MODEL`.
"""

from __future__ import annotations

from harness.evolution.protocols import CompletionFn, Reflector
from harness.evolution.reflectors.library import LibraryReflector
from harness.evolution.reflectors.llm import LlmReflector

STRATEGIES = ("library", "llm")


def parse_strategy(spec: str) -> tuple[str, str | None]:
    """'name' or 'name:MODEL' -> (name, model); ValueError naming the known strategies otherwise."""
    name, _, model = spec.partition(":")
    if name not in STRATEGIES:
        raise ValueError(f"unknown reflector '{spec}'; use one of: library, llm:MODEL")
    if name == "llm" and not model:
        raise ValueError("the llm reflector needs a model: llm:MODEL (a LiteLLM model string)")
    if name == "library" and model:
        raise ValueError(f"the library reflector takes no model (got '{spec}')")
    return name, model or None


def make_reflector(spec: str, family: str, complete: CompletionFn | None = None,
                   max_prompt_chars: int = 40_000) -> Reflector:
    name, model = parse_strategy(spec)
    if name == "library":
        return LibraryReflector(family)
    if complete is None:
        raise ValueError(f"reflector '{spec}' calls a model: give it a completion function")
    assert model is not None
    return LlmReflector(model, complete, max_prompt_chars=max_prompt_chars)


__all__ = ["LibraryReflector", "LlmReflector", "make_reflector", "parse_strategy"]
