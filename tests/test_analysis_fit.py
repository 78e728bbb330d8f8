"""Fit monitor on real rollouts: KL is 0 for identical sets and grows when planning faults are injected.

The base student is the real oracle (run through the real runtime) on three stock_alert instances; the
"trained" students replay its rollouts with planning faults (a skipped page, an early finish, a loop) via
tests/attribution_helpers.py.
"""

from __future__ import annotations

import asyncio

import pytest
from attribution_helpers import Case, finish_early, loop_call, make_case, oracle_run, skip_page

from agents.records import Trajectory
from analysis.actions import FINISH, action_of
from analysis.fit import FitConfig, actions, divergence, fit_markdown, fit_table, planning_distribution, smoothed_kl

INDICES = (40, 41, 42)


@pytest.fixture(scope="module")
def runs() -> dict[str, list[Trajectory]]:
    async def build() -> dict[str, list[Trajectory]]:
        base = [await oracle_run("stock_alert", i) for i in INDICES]
        memo = {("stock_alert", i): t for i, t in zip(INDICES, base, strict=True)}
        faulty = []
        for i in INDICES:
            for case in (Case("skip_page", "planning", ("stock_alert",), skip_page, needs_oracle_trajectory=True),
                         Case("finish_early", "planning", ("stock_alert",), finish_early),
                         Case("loop_call", "planning", ("stock_alert",), loop_call)):
                try:
                    faulty.append(await make_case(case, "stock_alert", i, memo))
                except Exception as e:  # NotApplicable: e.g. a single page of products
                    assert type(e).__name__ == "NotApplicable", e
        return {"base": base, "faulty": [t.view() for t in faulty]}
    return asyncio.run(build())


def test_action_types_and_sequence(runs: dict[str, list[Trajectory]]) -> None:
    t = runs["base"][0]
    seq = actions(t)
    assert seq[0] == "get_email_template" and seq[-1] == FINISH
    assert [action_of(a) for a in ("list_products", "sql_query", "send_email", FINISH, "frobnicate")] == \
        ["read", "compute", "write", "finish", "other"]
    assert [action_of(a) for a in ("get_weather", "update_record", "run_query")] == ["read", "write", "compute"]
    d = planning_distribution(runs["base"])
    assert sum(d.bigram.values()) == pytest.approx(1.0) and sum(d.position.values()) == pytest.approx(1.0)
    # each rollout weighs the same: the start bigram has mass 1/len(actions) in each, averaged over rollouts
    expected = sum(1 / len(actions(x)) for x in runs["base"]) / len(runs["base"])
    assert d.bigram["<start>>get_email_template"] == pytest.approx(expected)
    assert d.n == len(runs["base"])


def test_kl_zero_for_identical_sets(runs: dict[str, list[Trajectory]]) -> None:
    base = runs["base"]
    d = divergence(base, [t.model_copy() for t in base])
    assert d.bigram == 0.0 and d.position == 0.0 and d.total == 0.0


def test_kl_grows_with_planning_faults(runs: dict[str, list[Trajectory]]) -> None:
    base, faulty = runs["base"], runs["faulty"]
    assert len(faulty) >= 4
    one = divergence([faulty[0], *base[1:]], base).total
    many = divergence(faulty, base).total
    assert 0.0 < one < many


def test_fit_table_flags_the_drifted_adapter(runs: dict[str, list[Trajectory]]) -> None:
    base, faulty = runs["base"], runs["faulty"]
    cfg = FitConfig(threshold_nats=divergence(faulty, base).total / 2)
    table = fit_table({"base": base, "same": list(base), "drifted": faulty, "expert": base}, "base", "expert", cfg)
    overall = {r["pair"]: r for r in table.filter(table["family"] == "overall").iter_rows(named=True)}
    assert overall["same"]["kl_base"] == 0.0 and not overall["same"]["at_risk"]
    assert overall["drifted"]["at_risk"] and overall["drifted"]["kl_expert"] == pytest.approx(overall["drifted"]["kl_base"])
    assert overall["same"]["same_harness"]
    md = fit_markdown(table, cfg.threshold_nats)
    assert "| drifted | overall |" in md and "**at risk**" in md
    with pytest.raises(ValueError, match="base pair"):
        fit_table({"x": base}, "base")


def test_smoothed_kl_properties() -> None:
    p = {"a": 0.5, "b": 0.5}
    assert smoothed_kl(p, 10, p, 10, 0.5) == 0.0
    far = smoothed_kl({"a": 1.0}, 10, {"b": 1.0}, 10, 0.5)
    near = smoothed_kl({"a": 0.9, "b": 0.1}, 10, {"a": 0.8, "b": 0.2}, 10, 0.5)
    assert far > near > 0.0
    assert smoothed_kl({}, 0, {}, 0, 0.5) == 0.0


def test_fit_alarm_flag_and_evidence(runs: dict[str, list[Trajectory]]) -> None:
    from analysis.fit import fit_alarm

    same, ev = fit_alarm(runs["base"], runs["base"], runs["base"])
    assert same is False and ev.kl_base == pytest.approx(0.0, abs=1e-12) and ev.kl_expert == pytest.approx(0.0, abs=1e-12)
    assert ev.same_harness and ev.per_family == {"stock_alert": pytest.approx(0.0, abs=1e-12)} and "<=" in ev.reason
    kl = divergence(runs["faulty"], runs["base"]).total
    flag, ev = fit_alarm(runs["faulty"], runs["base"], config=FitConfig(threshold_nats=kl / 2))
    assert flag is True and ev.kl_base == pytest.approx(kl) and ev.kl_expert != ev.kl_expert  # NaN: no expert
    assert (ev.n_trained, ev.n_base) == (len(runs["faulty"]), len(runs["base"])) and ">" in ev.reason
    assert fit_alarm(runs["faulty"], runs["base"], config=FitConfig(threshold_nats=kl * 2))[0] is False
    with pytest.raises(ValueError, match="needs trained and base"):
        fit_alarm([], runs["base"])
