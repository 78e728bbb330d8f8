"""Evaluation statistics on Trajectory records built here and stored as real Parquet (the report's sections:
tests/test_analysis_report.py)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from agents.records import Trajectory, TurnRecord
from agents.tables.trajectories import read_frame, write_trajectories
from analysis.stats import (
    OVERALL,
    cost_latency_table,
    family_table,
    fmt_mean_sem,
    paired_bootstrap,
    pass_hat_k,
    two_level_bootstrap,
    wide_table,
)
from tasks.records import TaskInstance, Verdict


def traj(family: str, index: int, seed: int, score: float, model: str = "m", cost: float = 0.0,
         wall: float = 1.0, turns: int = 2) -> Trajectory:
    inst = TaskInstance(id=f"{family}/{index}", family=family, index=index, split="test", instruction=f"do {index}",
                        difficulty="easy", seed=index)
    return Trajectory(
        instance=inst, harness_id="h0", model_id=model, seed=seed, messages=[{"role": "user", "content": "x"}],
        turns=[TurnRecord(index=i, assistant={"role": "assistant", "content": "y"}, cost_usd=cost / turns,
                          prompt_tokens=10, completion_tokens=5) for i in range(turns)],
        stop_reason="submitted", verdict=Verdict(score=score), wall_s=wall, tag="rollout",
    ).with_id()


def frame_of(tmp_path: Path, pairs: dict[str, list[Trajectory]]) -> pl.DataFrame:
    """Write each pair's trajectories to Parquet and read them back with a `pair` column, like the flows do."""
    frames = []
    for label, ts in pairs.items():
        path = write_trajectories(tmp_path / f"{label}.parquet", ts)
        frames.append(read_frame(path).with_columns(pl.lit(label).alias("pair")))
    return pl.concat(frames)


def test_family_table_mean_and_sem_over_seeds(tmp_path: Path) -> None:
    # family a: seed 0 -> 2/2 pass, seed 1 -> 1/2, seed 2 -> 0/2  => rates 1, .5, 0; mean .5, SEM = .5/sqrt(3)
    # family b: every seed 1/2 => mean .5, SEM 0
    ts = []
    for seed, passes in enumerate([(1, 1), (1, 0), (0, 0)]):
        ts += [traj("a", i, seed, float(p)) for i, p in enumerate(passes)]
        ts += [traj("b", i, seed, float(i == 0)) for i in range(2)]
    frame = frame_of(tmp_path, {"student": ts})
    long = {r["family"]: r for r in family_table(frame).iter_rows(named=True)}
    assert long["a"]["mean"] == pytest.approx(0.5)
    assert long["a"]["sem"] == pytest.approx(0.5 / math.sqrt(3))
    assert long["b"]["sem"] == pytest.approx(0.0)
    # overall per seed = mean of family rates: (1+.5)/2, (.5+.5)/2, (0+.5)/2 = .75, .5, .25
    assert long[OVERALL]["mean"] == pytest.approx(0.5)
    assert long[OVERALL]["sem"] == pytest.approx(0.25 / math.sqrt(3))
    assert long["a"]["n_seeds"] == 3 and long["a"]["n_instances"] == 2
    rows = wide_table(frame, order=["student"])
    assert [r["family"] for r in rows] == ["a", "b", OVERALL]
    assert rows[0]["student"] == "50.0 ± 28.9"


def test_partial_scores_count_as_failures_unless_metric_score(tmp_path: Path) -> None:
    frame = frame_of(tmp_path, {"p": [traj("a", 0, 0, 0.5), traj("a", 1, 0, 1.0)]})
    assert family_table(frame).filter(pl.col("family") == "a")["mean"][0] == pytest.approx(0.5)
    assert family_table(frame, metric="score").filter(pl.col("family") == "a")["mean"][0] == pytest.approx(0.75)
    assert fmt_mean_sem(0.5, float("nan")) == "50.0 ± –"


def test_pass_hat_k_formula() -> None:
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_hat_k(3, 2, 1) == pytest.approx(2 / 3)
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)
    assert pass_hat_k(3, 2, 3) == 0.0
    with pytest.raises(ValueError, match="pass\\^k"):
        pass_hat_k(3, 4, 1)

def test_paired_bootstrap_detects_a_real_gap_and_not_a_null_one(tmp_path: Path) -> None:
    n, seeds = 20, 3
    good = [traj("a", i, s, 1.0 if i < 18 else 0.0, model="good") for i in range(n) for s in range(seeds)]
    bad = [traj("a", i, s, 1.0 if i < 4 else 0.0, model="bad") for i in range(n) for s in range(seeds)]
    same = [traj("a", i, s, 1.0 if i < 4 else 0.0, model="same") for i in range(n) for s in range(seeds)]
    frame = frame_of(tmp_path, {"good": good, "bad": bad, "same": same})
    d = paired_bootstrap(frame, "good", "bad", n_boot=1000, seed=1)
    assert d.diff == pytest.approx(0.7)
    assert d.n_units == n * seeds and d.n_instances == n
    assert 0 < d.ci_low <= d.diff <= d.ci_high < 1 and d.significant
    assert paired_bootstrap(frame, "good", "bad", n_boot=1000, seed=1) == d  # seeded: reproducible
    null = paired_bootstrap(frame, "same", "bad", n_boot=500)
    assert null.diff == 0.0 and null.ci_low == 0.0 and null.ci_high == 0.0 and not null.significant


def test_paired_bootstrap_uses_only_shared_units(tmp_path: Path) -> None:
    a = [traj("a", i, 0, 1.0) for i in range(4)]
    b = [traj("a", i, 0, 0.0) for i in range(2, 6)]  # overlaps on instances 2, 3
    d = paired_bootstrap(frame_of(tmp_path, {"a": a, "b": b}), "a", "b", n_boot=100)
    assert d.n_units == 2 and d.diff == 1.0
    disjoint = frame_of(tmp_path, {"a": a[:2], "b": b[2:]})
    with pytest.raises(ValueError, match="share no"):
        paired_bootstrap(disjoint, "a", "b")


def test_two_level_bootstrap_counts_units_once_and_resamples_training_seeds(tmp_path: Path) -> None:
    """Three adapters of one arm against one base row: the units are the (instance, evaluation seed) pairs, not
    multiplied by the adapters; the spread between adapters widens the CI; one adapter each is the paired
    bootstrap, draw for draw."""
    n, seeds = 20, 2
    base = [traj("a", i, s, 1.0 if i < 4 else 0.0, model="base") for i in range(n) for s in range(seeds)]
    cuts = {0: 16, 1: 10, 2: 4}  # adapter k passes the first cuts[k] instances: a wide spread between seeds
    arm = [traj("a", i, s, 1.0 if i < cuts[k] else 0.0, model=f"arm{k}") for k in cuts for i in range(n)
           for s in range(seeds)]
    frame = frame_of(tmp_path, {"base": base, "arm": arm})
    frame = frame.with_columns(pl.col("model_id").str.strip_prefix("arm").cast(pl.Int64, strict=False)
                               .alias("train_seed"))
    d = two_level_bootstrap(frame, "arm", "base", seed_col="train_seed", n_boot=1000, seed=1)
    assert (d.n_units, d.n_instances, d.seeds_a, d.seeds_b) == (n * seeds, n, 3, 1)
    assert d.diff == pytest.approx((16 + 10 + 4) / 3 / n - 4 / n)
    one = two_level_bootstrap(frame.filter(pl.col("train_seed").is_null() | (pl.col("train_seed") == 1)), "arm",
                              "base", seed_col="train_seed", n_boot=1000, seed=1)
    assert one.diff == pytest.approx(d.diff) and one.seeds_a == 1
    assert d.ci_high - d.ci_low > one.ci_high - one.ci_low  # the seeds' spread is counted
    plain = paired_bootstrap(frame.filter(pl.col("train_seed").is_null() | (pl.col("train_seed") == 1)), "arm",
                             "base", n_boot=1000, seed=1)
    assert (one.diff, one.ci_low, one.ci_high, one.n_units) == pytest.approx(
        (plain.diff, plain.ci_low, plain.ci_high, plain.n_units))
    with pytest.raises(ValueError, match="two rollouts of unit"):  # the seeds are not told apart: refused
        two_level_bootstrap(frame, "arm", "base", n_boot=100)


def test_cost_latency_per_rollout(tmp_path: Path) -> None:
    ts = [traj("a", 0, 0, 1.0, cost=0.02, wall=2.0, turns=2), traj("a", 1, 0, 0.0, cost=0.04, wall=4.0, turns=4)]
    row = cost_latency_table(frame_of(tmp_path, {"p": ts})).row(0, named=True)
    assert row["rollouts"] == 2
    assert row["cost_usd_mean"] == pytest.approx(0.03) and row["cost_usd_total"] == pytest.approx(0.06)
    assert row["wall_s_mean"] == pytest.approx(3.0) and row["turns_mean"] == pytest.approx(3.0)
    assert row["tokens_mean"] == pytest.approx(45.0)
