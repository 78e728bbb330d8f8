"""Reflection strategies, chosen by name: `library` (offline, the embedded default) or `llm:MODEL`.

    reflector = make_reflector("library", family="payroll_audit")
    reflector = make_reflector("llm:hosted_vllm/tiny", family="payroll_audit", complete=completion_fn)

Strategy flags follow one form everywhere: `name` or `name:MODEL`.
"""

from __future__ import annotations

from harness.evolution.protocols import CompletionFn, Reflector
from harness.evolution.reflectors.library import LibraryReflector
from harness.evolution.reflectors.llm import LlmReflector
from harness.strategies import Registry, Strategy

REFLECTORS = Registry("reflector", (
    Strategy("library", "harness.evolution.reflectors.library:LibraryReflector", options="family"),
    Strategy("llm", "harness.evolution.reflectors.llm:LlmReflector", takes_model=True,
             options="complete (a CompletionFn), max_prompt_chars="),
))


def parse_strategy(spec: str) -> tuple[str, str | None]:
    """'name' or 'name:MODEL' -> (name, model); ValueError naming the known strategies otherwise."""
    return REFLECTORS.parse(spec)


def make_reflector(spec: str, family: str, complete: CompletionFn | None = None,
                   max_prompt_chars: int = 40_000) -> Reflector:
    name, _ = parse_strategy(spec)
    if not REFLECTORS.strategies[name].takes_model:
        return REFLECTORS.make(spec, family=family)  # type: ignore[no-any-return]
    if complete is None:
        raise ValueError(f"reflector '{spec}' calls a model: give it a completion function")
    return REFLECTORS.make(spec, complete=complete, max_prompt_chars=max_prompt_chars)  # type: ignore[no-any-return]


__all__ = ["REFLECTORS", "LibraryReflector", "LlmReflector", "make_reflector", "parse_strategy"]
