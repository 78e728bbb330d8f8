"""The round report's sections over its rows (pass@k with CIs, costs, plots), the campaign view and the run-vs-run
comparison, on rollout tables built here; every expected number is worked out by hand."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from analysis import plots
from analysis.campaign import SERIES, campaign_markdown, campaign_table
from analysis.compare import CompareRefused, compare_frames, comparison_markdown
from analysis.pass_k import pass_at_k, pass_k_intervals, trials_k
from analysis.report import row_costs, row_sections, stage_cost_markdown, write_row_plots
from analysis.stats import OVERALL, pass_hat_k
from tasks.fingerprint import differing, instance_digest, suite_fingerprint
from tasks.records import TaskInstance

PNG = b"\x89PNG\r\n\x1a\n"


def rows(group: str, outcomes: dict[str, list[int]], train_seed: int | None = None, cost: float = 0.0,
         model_s: float = 2.0, digest: str = "d") -> list[dict[str, object]]:
    """One row per rollout: outcomes maps an instance id to its evaluation seeds' passed flags."""
    out = []
    for iid, passed in outcomes.items():
        for seed, p in enumerate(passed):
            out.append({"group": group, "train_seed": train_seed, "family": iid.split("/")[0], "instance_id": iid,
                        "seed": seed, "passed": bool(p), "cost_usd": cost, "model_s": model_s, "wall_s": 3.0,
                        "n_turns": 4, "prompt_tokens": 100, "completion_tokens": 20,
                        "instance_digest": f"{digest}-{iid}"})
    return out


def frame(*parts: list[dict[str, object]]) -> pl.DataFrame:
    schema = {"group": pl.String(), "train_seed": pl.Int64(), "family": pl.String(), "instance_id": pl.String(),
              "seed": pl.Int64(), "passed": pl.Boolean(), "cost_usd": pl.Float64(), "model_s": pl.Float64(),
              "wall_s": pl.Float64(), "n_turns": pl.Int64(), "prompt_tokens": pl.Int64(),
              "completion_tokens": pl.Int64(), "instance_digest": pl.String()}
    return pl.DataFrame([r for p in parts for r in p], schema=schema)


OUTCOMES = {"a/40": [1, 1, 0], "a/41": [0, 0, 0], "b/40": [1, 1, 1]}


def test_pass_at_k_and_pass_hat_k_by_hand() -> None:
    assert pass_at_k(3, 0, 1) == 0.0 and pass_at_k(3, 3, 2) == 1.0
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # C(2,2)/C(3,2) = 1/3 draws miss the success
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_pass_k_values_per_family_and_overall_with_intervals() -> None:
    f = frame(rows("M_t.h0", OUTCOMES), rows("same", OUTCOMES))
    assert trials_k(f) == 3
    t = pass_k_intervals(f, rng=random.Random(0), n_boot=500)
    v = {(r["group"], r["family"], r["metric"]): r for r in t.iter_rows(named=True)}
    # pass@1: a = (2/3 + 0) / 2, b = 1, overall = the mean of the families
    assert v[("M_t.h0", "a", "pass@1")]["value"] == pytest.approx(1 / 3)
    assert v[("M_t.h0", OVERALL, "pass@1")]["value"] == pytest.approx((1 / 3 + 1) / 2)
    # pass@3 (one of three succeeds): a = (1 + 0) / 2; pass^3 (all three): a = (0 + 0) / 2, b = 1
    assert v[("M_t.h0", "a", "pass@k")]["value"] == pytest.approx(0.5) and v[("M_t.h0", "a", "pass@k")]["k"] == 3
    assert v[("M_t.h0", "a", "pass^k")]["value"] == 0.0 and v[("M_t.h0", "b", "pass^k")]["value"] == 1.0
    for r in t.iter_rows(named=True):
        assert 0.0 <= r["ci_low"] <= r["value"] <= r["ci_high"] <= 1.0
    a = v[("M_t.h0", "a", "pass@1")]
    assert (a["ci_low"], a["ci_high"]) == (0.0, pytest.approx(2 / 3))  # two instances: both 0 or both 2/3
    same = v[("same", "a", "pass@1")]  # the same outcomes get the same interval
    assert (same["ci_low"], same["ci_high"]) == (a["ci_low"], a["ci_high"])
    assert v[("M_t.h0", "b", "pass@1")]["ci_low"] == v[("M_t.h0", "b", "pass@1")]["ci_high"] == 1.0


def test_an_arms_instance_value_is_the_mean_over_its_training_seeds() -> None:
    f = frame(rows("corr.hstar", {"a/40": [1, 1]}, train_seed=0), rows("corr.hstar", {"a/40": [0, 0]}, train_seed=1))
    t = pass_k_intervals(f, rng=random.Random(0), n_boot=300)
    v = {(r["family"], r["metric"]): r for r in t.iter_rows(named=True)}
    assert v[("a", "pass@1")]["value"] == 0.5 and v[("a", "pass@1")]["train_seeds"] == 2
    # resampling the two training seeds: some draws take seed 0 twice (1.0), some seed 1 twice (0.0)
    assert (v[("a", "pass@1")]["ci_low"], v[("a", "pass@1")]["ci_high"]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="only 2 trials"):
        pass_k_intervals(f, rng=random.Random(0), n_boot=10, k=3)


def test_row_sections_tables_and_plots(tmp_path: Path) -> None:
    f = frame(rows("M_t.h0", OUTCOMES, model_s=2.0), rows("expert.h0", {k: [1, 1, 1] for k in OUTCOMES}, cost=0.01))
    labels = [("M_t.h0", "M_t on h0"), ("M_t.hstar", "M_t on h*"), ("expert.h0", "expert on h0")]
    sections, table = row_sections(f, labels, random.Random(0), n_boot=200)
    md = dict(sections)
    pk = md["pass@1, pass@k and pass^k per family"]
    assert "**pass@1** (%, 95% CI)" in pk and "**pass@3**" in pk and "**pass^3**" in pk
    assert "| M_t on h0 | 33.3 [0.0, 66.7] | 100.0 [100.0, 100.0] | 66.7 [" in pk
    assert "M_t on h*" not in pk  # a row that did not run is left out
    assert set(table["metric"].to_list()) == {"pass@1", "pass@k", "pass^k"}
    cost = md["Cost per row (test split)"]
    assert "| expert on h0 | 9 | 100.0 | 0.0100 | 0.0900 | 2.00 |" in cost
    costs = row_costs(f, labels)
    assert costs["label"].to_list() == ["M_t on h0", "expert on h0"]
    assert "x = API dollars per rollout" in md["Plots"]
    paths = write_row_plots(f, labels, tmp_path)
    for p in paths.values():
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000
    one_seed = frame(rows("M_t.h0", {"a/40": [1], "a/41": [0]}))
    only = dict(row_sections(one_seed, labels, random.Random(0), n_boot=50)[0])
    assert "only pass@1 is shown" in only["pass@1, pass@k and pass^k per family"]
    assert "model-seconds per rollout" in only["Plots"]  # nothing cost a dollar: the model's seconds


def test_stage_costs_total_and_cost_per_kept_correction() -> None:
    stages = [{"stage": "evaluate_h0", "status": "ran", "wall_s": 10.0, "cost_usd": 0.5, "model_s": 8.0, "rollouts": 12,
               "model_calls": 40},
              {"stage": "arm_data", "status": "skipped (finished earlier)", "wall_s": 30.0, "cost_usd": 2.0,
               "model_s": 20.0, "rollouts": 50, "model_calls": 200}]
    md = stage_cost_markdown(stages, kept_corrections=4)
    assert "| evaluate_h0 | ran | 10.0 | 0.5000 | 8.0 | 12 | 40 |" in md
    assert "| **total** |  | 40.0 | 2.5000 | 28.0 | 62 | 240 |" in md
    assert "kept 4 corrections: $0.5000 and 5.0 model-s per kept correction" in md
    assert "per kept correction" not in stage_cost_markdown(stages)


def test_campaign_table_and_plot_across_rounds(tmp_path: Path) -> None:
    def camp(t: int, series: str, passed: list[int]) -> pl.DataFrame:
        return pl.DataFrame({"round": t, "series": series, "family": "a", "instance_id": [f"a/4{i}" for i in
                                                                                            range(len(passed))],
                             "seed": 0, "passed": [bool(p) for p in passed]})
    f = pl.concat([camp(0, "M_t.h0", [0, 0, 1, 0]), camp(0, "M_t.hstar", [1, 0, 1, 0]), camp(0, "M_next", [1, 1, 1, 0]),
                   camp(1, "M_t.h0", [1, 1, 0, 0]), camp(1, "M_t.hstar", [1, 1, 1, 1])])
    table = campaign_table(f)
    cell = {(r["round"], r["series"], r["family"]): r["mean"] for r in table.iter_rows(named=True)}
    assert cell[(0, "M_t.h0", "a")] == 0.25 and cell[(0, "M_next", "a")] == 0.75 and cell[(1, "M_t.hstar", "a")] == 1.0
    md = campaign_markdown(table, {0: "promoted", 1: "not promoted"})
    assert "| r0 | a | 25.0 ± – | 50.0 ± – | 75.0 ± – | promoted |" in md
    assert "| r1 | a | 50.0 ± – | 100.0 ± – | – | not promoted |" in md
    png = plots.campaign_lines(table, tmp_path / "campaign.png", SERIES)
    assert png.read_bytes()[:8] == PNG


def test_suite_fingerprint_is_order_free_and_sees_a_changed_instance() -> None:
    inst = TaskInstance(id="a/40", family="a", index=40, split="test", instruction="do it", difficulty="easy", seed=40)
    other = inst.model_copy(update={"instruction": "do it differently"})
    assert instance_digest(inst) == instance_digest(TaskInstance.model_validate_json(inst.model_dump_json()))
    assert instance_digest(inst) != instance_digest(other)
    da, db = {"a/40": instance_digest(inst), "a/41": "x"}, {"a/41": "x", "a/40": instance_digest(other)}
    assert suite_fingerprint(da) == suite_fingerprint(dict(reversed(list(da.items()))))
    assert suite_fingerprint(da) != suite_fingerprint(db) and differing(da, db) == ["a/40"]
    assert suite_fingerprint({}) == ""


def test_compare_pairs_shared_units_and_refuses_bad_pairs() -> None:
    a = frame(rows("M_t.h0", {"a/40": [0, 0], "a/41": [0, 1], "a/42": [1, 1]}))
    b = frame(rows("M_t.h0", {"a/40": [1, 1], "a/41": [1, 1], "a/43": [0, 0]}), rows("expert.h0", {"a/40": [1, 1]}))
    c = compare_frames(a, b, names=("A", "B"), n_boot=300)
    [d] = c.rows  # one family: no separate overall; expert.h0 is only in B
    assert d.row == "M_t.h0" and d.n_units == 4 and d.n_instances == 2  # a/40, a/41 x 2 seeds
    assert (d.mean_a, d.mean_b, d.diff) == (0.25, 1.0, pytest.approx(0.75))
    assert c.shared_instances == 2 and c.suite_a != c.suite_b  # each ran an instance the other did not
    assert "| M_t.h0 | a | 25.0 | 100.0 | +75.0 |" in comparison_markdown(c)
    asked = compare_frames(a, b, rows=["M_t.h0", "expert.h0"], names=("A", "B"), n_boot=100)
    assert asked.skipped == ["expert.h0: not a row of A (rows both have: M_t.h0)"]
    changed = b.with_columns(pl.when(pl.col("instance_id") == "a/41").then(pl.lit("new")).otherwise(
        pl.col("instance_digest")).alias("instance_digest"))
    with pytest.raises(CompareRefused, match=r"ran different task suites: fingerprint \w+ vs \w+ over the 2 instances "
                                              r"both ran \(1 differ in content, e\.g\. a/41\)"):
        compare_frames(a, changed, names=("A", "B"))
    elsewhere = frame(rows("M_t.h0", {"b/40": [1]}))
    with pytest.raises(CompareRefused, match="A and B share no \\(instance, seed\\) units"):
        compare_frames(a, elsewhere, names=("A", "B"))
