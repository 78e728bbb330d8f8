"""Evaluation statistics on trajectory tables: the paper's mean ± SEM over seeds, pass^k, paired bootstrap.

Every function takes a polars frame in the trajectory-table layout (`agents/tables/trajectories.py`) plus a
group column (default `pair`, the label of a (model, harness) pair that the caller adds). Numbers are
computed from the rows, never typed in.

Conventions (stated once, used everywhere):
- success of one rollout = `passed` (verifier score == 1.0); `metric="score"` uses the partial score.
- per-family rate for one seed = mean over that family's instances; reported as mean ± SEM over seeds
  (SEM = sample std (ddof=1) / sqrt(n_seeds); NaN with a single seed).
- overall rate for one seed = mean of the per-family rates (each family weighs the same, as in the paper's
  "average" column), then mean ± SEM over seeds.
- pass^k for one instance with n trials and c successes = C(c, k) / C(n, k) (tau-bench): the chance that
  k trials drawn without replacement all succeed; averaged over instances.
- a trained arm has several training seeds (adapters); between two rows the units are (instance, evaluation seed)
  and `two_level_bootstrap` resamples instances and each side's training seeds, so the count of units is the
  true one (not multiplied by the seeds) and the spread between training seeds is in the CI.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

Metric = Literal["passed", "score"]
T = TypeVar("T")
OVERALL = "overall"


def _value(metric: Metric) -> pl.Expr:
    return pl.col(metric).cast(pl.Float64)


def _require(frame: pl.DataFrame, *cols: str) -> None:
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise ValueError(f"trajectory frame lacks column(s) {missing}; has {frame.columns}")


def _mean_sem(values: pl.Expr) -> list[pl.Expr]:
    n = values.count()
    return [
        values.mean().alias("mean"),
        pl.when(n > 1).then(values.std(ddof=1) / n.cast(pl.Float64).sqrt()).otherwise(float("nan")).alias("sem"),
        n.alias("n_seeds"),
    ]


def per_seed_rates(frame: pl.DataFrame, group: str = "pair", metric: Metric = "passed") -> pl.DataFrame:
    """One row per (group, family, seed): the success rate over that family's instances."""
    _require(frame, group, "family", "seed", "instance_id", metric)
    return (
        frame.group_by(group, "family", "seed")
        .agg(_value(metric).mean().alias("rate"), pl.col("instance_id").n_unique().alias("n_instances"))
        .sort(group, "family", "seed")
    )


def family_table(frame: pl.DataFrame, group: str = "pair", metric: Metric = "passed") -> pl.DataFrame:
    """Long table (group, family, mean, sem, n_seeds, n_instances); family `overall` is the macro average."""
    seeds = per_seed_rates(frame, group, metric)
    fam = seeds.group_by(group, "family").agg(*_mean_sem(pl.col("rate")), pl.col("n_instances").max())
    overall_seeds = seeds.group_by(group, "seed").agg(pl.col("rate").mean(), pl.col("n_instances").sum())
    overall = overall_seeds.group_by(group).agg(*_mean_sem(pl.col("rate")), pl.col("n_instances").max())
    overall = overall.with_columns(pl.lit(OVERALL).alias("family")).select(fam.columns)
    return pl.concat([fam.sort(group, "family"), overall.sort(group)])


def fmt_mean_sem(mean: float | None, sem: float | None, percent: bool = True) -> str:
    """'29.2 ± 1.3' (percent) — the paper's format; '29.2 ± –' when there is one seed only."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    scale = 100.0 if percent else 1.0
    sem_s = "–" if sem is None or math.isnan(sem) else f"{sem * scale:.1f}"
    return f"{mean * scale:.1f} ± {sem_s}"


def wide_table(frame: pl.DataFrame, group: str = "pair", metric: Metric = "passed",
               order: list[str] | None = None) -> list[dict[str, str]]:
    """Rows = families (+ overall), columns = groups, cells 'mean ± SEM' in percent: the report's main table."""
    long = family_table(frame, group, metric)
    groups = order or sorted(long[group].unique().to_list())
    cells = {(r[group], r["family"]): fmt_mean_sem(r["mean"], r["sem"]) for r in long.iter_rows(named=True)}
    families = sorted(f for f in long["family"].unique().to_list() if f != OVERALL) + [OVERALL]
    return [{"family": f, **{g: cells.get((g, f), "–") for g in groups}} for f in families]


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): all of k trials drawn from n (c of them successes) succeed."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return math.comb(c, k) / math.comb(n, k)


def percentile_interval(draws: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of `draws` (sorted here; the caller's list is sorted in place)."""
    if not draws:
        raise ValueError("no bootstrap draws")
    draws.sort()
    n = len(draws)
    alpha = (1 - confidence) / 2
    lo = draws[min(n - 1, max(0, int(math.floor(alpha * n))))]
    hi = draws[min(n - 1, max(0, int(math.ceil((1 - alpha) * n)) - 1))]
    return lo, hi


def cluster_bootstrap(clusters: Sequence[T], statistic: Callable[[list[T]], float], rng: random.Random,
                      n_boot: int = 2000, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile CI of `statistic` over `clusters` resampled with replacement (`rng` injected, seeded by the caller).

    A cluster is whatever moves together (an instance with all its seeds); the statistic sees the resampled
    list of clusters.
    """
    if not clusters:
        raise ValueError("cluster bootstrap of no clusters")
    m = len(clusters)
    draws = [statistic([clusters[rng.randrange(m)] for _ in range(m)]) for _ in range(n_boot)]
    return percentile_interval(draws, confidence)


class PairedDiff(BaseModel):
    """Difference a − b in success rate on the units (instance, seed) both pairs ran, with a bootstrap CI."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    a: str
    b: str
    family: str
    diff: float = Field(description="mean(a) − mean(b) over shared units.")
    ci_low: float
    ci_high: float
    n_units: int = Field(description="(instance, seed) units both pairs ran (every training seed of each side ran "
                         "each of them; not multiplied by the training seeds).")
    n_instances: int
    n_boot: int
    confidence: float
    seeds_a: int = Field(default=1, description="Training seeds of side a, resampled with the instances when > 1.")
    seeds_b: int = Field(default=1, description="Training seeds of side b, resampled with the instances when > 1.")

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


def paired_bootstrap(frame: pl.DataFrame, a: str, b: str, *, group: str = "pair", family: str | None = None,
                     metric: Metric = "passed", n_boot: int = 2000, confidence: float = 0.95,
                     seed: int = 0) -> PairedDiff:
    """Paired bootstrap CI for mean(a) − mean(b).

    Units are matched on (instance_id, seed); resampling is over instances (a cluster bootstrap: an
    instance's seeds move together, since they share its difficulty). Only units both pairs ran count.
    """
    _require(frame, group, "family", "instance_id", "seed", metric)
    sub = frame if family in (None, OVERALL) else frame.filter(pl.col("family") == family)
    cols = ["instance_id", "seed"]
    fa = sub.filter(pl.col(group) == a).select(*cols, _value(metric).alias("va"))
    fb = sub.filter(pl.col(group) == b).select(*cols, _value(metric).alias("vb"))
    if fa.is_empty() or fb.is_empty():
        raise ValueError(f"paired bootstrap: no rows for {a if fa.is_empty() else b!r} (family {family or OVERALL})")
    joined = fa.join(fb, on=cols, how="inner")
    if joined.is_empty():
        raise ValueError(f"paired bootstrap: {a!r} and {b!r} share no (instance, seed) units")
    per_inst = joined.group_by("instance_id").agg(
        (pl.col("va") - pl.col("vb")).sum().alias("d"), pl.len().alias("n")).sort("instance_id")
    d = per_inst["d"].to_list()
    n = per_inst["n"].to_list()
    diff = sum(d) / sum(n)
    rng = random.Random(seed)
    m = len(d)
    boots = []
    for _ in range(n_boot):
        idx = [rng.randrange(m) for _ in range(m)]
        boots.append(sum(d[i] for i in idx) / sum(n[i] for i in idx))
    lo, hi = percentile_interval(boots, confidence)
    return PairedDiff(a=a, b=b, family=family or OVERALL, diff=diff, ci_low=lo, ci_high=hi, n_units=joined.height,
                      n_instances=m, n_boot=n_boot, confidence=confidence)


def _seed_sums(rows: pl.DataFrame, seed_col: str | None, metric: Metric) -> dict[int, dict[tuple[str, int], float]]:
    """Training seed -> {(instance, evaluation seed): value} of one side (one seed, -1, without `seed_col`)."""
    cols = [pl.col("instance_id"), pl.col("seed"), _value(metric).alias("v"),
            (pl.col(seed_col).fill_null(-1) if seed_col else pl.lit(-1)).cast(pl.Int64).alias("ts")]
    out: dict[int, dict[tuple[str, int], float]] = {}
    for r in rows.select(cols).iter_rows(named=True):
        unit = (r["instance_id"], r["seed"])
        cell = out.setdefault(r["ts"], {})
        if unit in cell:
            raise ValueError(f"two rollouts of unit {unit} under one training seed ({r['ts']}): give each adapter "
                             "its own training-seed value")
        cell[unit] = r["v"]
    return out


def _side_mean(sums: list[list[float]], seeds: list[int], idx: list[int], n: list[int]) -> float:
    total_n = sum(n[i] for i in idx)
    return sum(sum(sums[k][i] for i in idx) for k in seeds) / (len(seeds) * total_n)


def two_level_bootstrap(frame: pl.DataFrame, a: str, b: str, *, group: str = "pair", seed_col: str | None = None,
                        family: str | None = None, metric: Metric = "passed", n_boot: int = 2000,
                        confidence: float = 0.95, seed: int = 0) -> PairedDiff:
    """Paired bootstrap CI for mean(a) - mean(b) when a side is several training seeds (adapters) of one arm.

    `seed_col` names the column that tells a side's training seeds apart (null or absent: one). The units are the
    (instance, evaluation seed) pairs that every training seed of both sides ran; a side's mean is the mean over
    its training seeds of each seed's rate on those units. Each draw resamples the instances (an instance's
    evaluation seeds move together) and, on a side with more than one, the training seeds, both with
    replacement: the CI holds the spread between training seeds, and `n_units` is the true count. With one
    training seed on both sides it is `paired_bootstrap` (the same draws).
    """
    _require(frame, group, "family", "instance_id", "seed", metric, *([seed_col] if seed_col else []))
    sub = frame if family in (None, OVERALL) else frame.filter(pl.col("family") == family)
    sides = [_seed_sums(sub.filter(pl.col(group) == g), seed_col, metric) for g in (a, b)]
    for g, side in zip((a, b), sides, strict=True):
        if not side:
            raise ValueError(f"two-level bootstrap: no rows for {g!r} (family {family or OVERALL})")
    units = set.intersection(*(set(cell) for side in sides for cell in side.values()))
    if not units:
        raise ValueError(f"two-level bootstrap: {a!r} and {b!r} share no (instance, seed) units")
    instances = sorted({i for i, _ in units})
    pos = {iid: k for k, iid in enumerate(instances)}
    n = [0] * len(instances)
    for iid, _ in units:
        n[pos[iid]] += 1
    sums: list[list[list[float]]] = []
    for side in sides:
        per_seed = []
        for ts in sorted(side):
            row = [0.0] * len(instances)
            for unit in units:
                row[pos[unit[0]]] += side[ts][unit]
            per_seed.append(row)
        sums.append(per_seed)
    m, everyone = len(instances), list(range(len(instances)))
    seeds = [list(range(len(s))) for s in sums]
    diff = _side_mean(sums[0], seeds[0], everyone, n) - _side_mean(sums[1], seeds[1], everyone, n)
    rng = random.Random(seed)
    boots = []
    for _ in range(n_boot):
        idx = [rng.randrange(m) for _ in range(m)]
        drawn = [[rng.randrange(len(s)) for _ in s] if len(s) > 1 else s for s in seeds]
        boots.append(_side_mean(sums[0], drawn[0], idx, n) - _side_mean(sums[1], drawn[1], idx, n))
    lo, hi = percentile_interval(boots, confidence)
    return PairedDiff(a=a, b=b, family=family or OVERALL, diff=diff, ci_low=lo, ci_high=hi, n_units=len(units),
                      n_instances=m, n_boot=n_boot, confidence=confidence, seeds_a=len(sums[0]),
                      seeds_b=len(sums[1]))


def cost_latency_table(frame: pl.DataFrame, group: str = "pair") -> pl.DataFrame:
    """Per group: rollouts, mean cost (USD), mean/p95 wall seconds, mean turns and tokens per rollout."""
    _require(frame, group, "cost_usd", "wall_s", "n_turns", "prompt_tokens", "completion_tokens")
    return (
        frame.group_by(group)
        .agg(
            pl.len().alias("rollouts"),
            pl.col("cost_usd").mean().alias("cost_usd_mean"),
            pl.col("cost_usd").sum().alias("cost_usd_total"),
            pl.col("wall_s").mean().alias("wall_s_mean"),
            pl.col("wall_s").quantile(0.95, interpolation="nearest").alias("wall_s_p95"),
            pl.col("n_turns").mean().alias("turns_mean"),
            (pl.col("prompt_tokens") + pl.col("completion_tokens")).mean().alias("tokens_mean"),
        )
        .sort(group)
    )

