"""Locators on SIMULATED single-fault failing rollouts of `flawed/<family>@uniform_single` (real environments,
real rollout runtime, the pure oracle as expert): the counterfactual t* lies in the window [injected turn,
first unrecoverable turn] and the divergence locator finds the injected turn; no locator reads ground truth."""

from __future__ import annotations

import asyncio

import pytest
from correction_helpers import CASES, student_rollout

from correction.locators import make_locator
from correction.measure import ground_truth_window, inside
from correction.runner import CachedRollouts, local_rollouts
from harness import baseline


@pytest.fixture(scope="module")
def failing():
    out = [asyncio.run(student_rollout(*case)) for case in CASES]
    for case, t in zip(CASES, out, strict=True):
        assert not t.passed and len(t.injected_faults) == 1, (case, t.injected_faults)
    return out


async def test_counterfactual_t_star_inside_the_window(failing, tmp_path):
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")
    locator = make_locator("counterfactual")
    hits = []
    for t in failing:
        h = baseline(t.family)
        loc = await locator.locate(t.view(), h, run)
        w = await ground_truth_window(t, h, run)
        hits.append(inside(loc.t_star, w, len(t.turns)))
        assert loc.locator == "counterfactual" and loc.probes[0] and loc.monotone, loc
    assert sum(hits) / len(hits) >= 0.8, hits
    # the search probes O(log n) prefixes, not all of them
    assert run.calls["expert-probe"] < sum(len(t.turns) + 1 for t in failing)


async def test_divergence_finds_the_injected_turn_and_locators_refuse_ground_truth(failing, tmp_path):
    run = CachedRollouts(local_rollouts(2), tmp_path / "cache")
    locator = make_locator("divergence")
    exact = [(await locator.locate(t.view(), baseline(t.family), run)).t_star == t.injected_faults[0].turn
             for t in failing]
    assert sum(exact) >= 0.8 * len(exact), exact
    with pytest.raises(ValueError, match="ground truth"):
        await locator.locate(failing[0], baseline(failing[0].family), run)
    with pytest.raises(ValueError, match="unknown locator"):
        make_locator("psychic")
