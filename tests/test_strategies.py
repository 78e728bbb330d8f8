"""The strategy registry the four seams share (harness/strategies.py): specs, errors, factories."""

from __future__ import annotations

import pytest

from analysis.attribution.base import ATTRIBUTORS
from correction.locators.base import LOCATORS
from correction.selectors.base import SELECTORS
from harness.evolution.reflectors import REFLECTORS
from harness.strategies import Registry, Strategy

TOY = Registry("widget", (
    Strategy("plain", "collections:OrderedDict"),
    Strategy("called", "fractions:Fraction", takes_model=True),
))


def test_a_spec_is_a_name_or_a_name_and_a_model() -> None:
    assert TOY.parse("plain") == ("plain", None)
    assert TOY.parse("called:hosted_vllm/m:8b") == ("called", "hosted_vllm/m:8b")  # the model keeps its colons


@pytest.mark.parametrize(("spec", "message"), [
    ("nope", "unknown widget 'nope'; use one of: plain, called:MODEL"),
    ("called", "the called widget needs a model: 'called:MODEL'"),
    ("called:", "the called widget needs a model"),
    ("plain:x", "the plain widget takes no model ('plain:x')"),
])
def test_a_bad_spec_is_refused_naming_the_accepted_forms(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TOY.parse(spec)


def test_make_passes_the_model_first_and_the_options_by_name() -> None:
    assert TOY.make("called:3", _normalize=False) == 3  # Fraction("3", _normalize=False)
    assert list(TOY.make("plain", a=1)) == ["a"]


@pytest.mark.parametrize(("registry", "forms"), [
    (REFLECTORS, "library, llm:MODEL"),
    (LOCATORS, "counterfactual, divergence, mle_agent:MODEL"),
    (SELECTORS, "verifier_replay, judge:MODEL"),
    (ATTRIBUTORS, "heuristic, judge:MODEL"),
])
def test_every_seam_names_its_forms_and_every_factory_imports(registry: Registry, forms: str) -> None:
    assert registry.forms() == forms
    assert all(callable(registry.factory(name)) for name in registry.names())
