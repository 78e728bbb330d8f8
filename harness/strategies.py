"""One registry for the four strategy seams: reflectors, locators, selectors and attributors.

    LOCATORS = Registry("locator", (
        Strategy("counterfactual", "correction.locators.counterfactual:CounterfactualLocator",
                 options="expert=ModelRole"),
        Strategy("mle_agent", "correction.locators.mle_agent:MleAgentLocator", takes_model=True,
                 options="api_base=, client="),
    ))
    LOCATORS.parse("mle_agent:hosted_vllm/x")   # ('mle_agent', 'hosted_vllm/x'); ValueError naming the forms
    LOCATORS.make("counterfactual", expert=role)

A spec is `name` or, for a strategy that calls a model, `name:MODEL` (a LiteLLM model string). Factories are
named "module:attribute" and imported on first use, so a registry costs nothing to import. The module lives
in harness/ because harness/ is the lowest room all four seams may import (harness.evolution, correction,
analysis); it imports nothing of ours.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Strategy:
    name: str
    factory: str  # "module:attribute" of the class or function that builds it
    takes_model: bool = False  # spec `name:MODEL`, the model passed as the factory's first argument
    options: str = ""  # the factory's keyword options, for the reader (e.g. "expert=ModelRole")


class Registry:
    """A seam's strategies by name: parse a spec, find a factory, build one."""

    def __init__(self, kind: str, strategies: tuple[Strategy, ...]) -> None:
        self.kind = kind
        self.strategies = {s.name: s for s in strategies}

    def names(self) -> list[str]:
        return list(self.strategies)

    def forms(self) -> str:
        """The accepted specs, e.g. 'counterfactual, divergence, mle_agent:MODEL'."""
        return ", ".join(f"{s.name}:MODEL" if s.takes_model else s.name for s in self.strategies.values())

    def parse(self, spec: str) -> tuple[str, str | None]:
        """'name' -> (name, None); 'name:MODEL' -> (name, MODEL); ValueError naming the accepted forms."""
        name, sep, model = spec.partition(":")
        strategy = self.strategies.get(name)
        if strategy is None:
            raise ValueError(f"unknown {self.kind} '{spec}'; use one of: {self.forms()}")
        if strategy.takes_model and not model:
            raise ValueError(f"the {name} {self.kind} needs a model: '{name}:MODEL' (a LiteLLM model string)")
        if not strategy.takes_model and sep:
            raise ValueError(f"the {name} {self.kind} takes no model ('{spec}')")
        return name, model or None

    def factory(self, name: str) -> Any:
        module, _, attr = self.strategies[name].factory.partition(":")
        return getattr(importlib.import_module(module), attr)

    def make(self, spec: str, **options: Any) -> Any:
        """Build the strategy a spec names: `factory(MODEL, **options)` or `factory(**options)`."""
        name, model = self.parse(spec)
        build = self.factory(name)
        return build(model, **options) if model is not None else build(**options)
