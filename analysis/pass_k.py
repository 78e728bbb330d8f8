"""pass@1, pass@k and pass^k per row and family, with bootstrap confidence intervals.

    table = pass_k_intervals(frame, rng=random.Random(0), n_boot=2000)     # one row per (group, family, metric)

For one instance with n trials (its evaluation seeds) and c successes, and k = the fewest trials any instance of
the frame has:
- pass@1 = c / n: the chance one trial succeeds;
- pass@k = 1 - C(n-c, k) / C(n, k): the chance at least one of k trials succeeds (Chen et al., 2021);
- pass^k = C(c, k) / C(n, k): the chance all k trials succeed (tau-bench; `analysis.stats.pass_hat_k`).
A family's value is the mean over its instances; `overall` is the mean of the family values (each family weighs
the same, as in the report's main table). A trained arm has several training seeds (column `train_seed`): an
instance's value is the mean over them.

Confidence interval: percentile bootstrap (`analysis.stats.percentile_interval`). Each draw resamples every family's instances with replacement and, on
a row with several training seeds, the training seeds (one draw of seeds for all families: one adapter serves
them all); `overall` is computed from the same draw. The generator is injected (`rng`, seeded by the caller); every
row and metric uses the same resamples, so two rows with the same outcomes get the same interval.
"""

from __future__ import annotations

import math
import random
from typing import Literal

import numpy as np
import polars as pl

from analysis.stats import OVERALL, pass_hat_k, percentile_interval

PassMetric = Literal["pass@1", "pass@k", "pass^k"]
METRICS: tuple[PassMetric, ...] = ("pass@1", "pass@k", "pass^k")
PASS_K_SCHEMA: dict[str, pl.DataType] = {
    "group": pl.String(), "family": pl.String(), "metric": pl.String(), "k": pl.Int64(), "value": pl.Float64(),
    "ci_low": pl.Float64(), "ci_high": pl.Float64(), "n_instances": pl.Int64(), "train_seeds": pl.Int64()}


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): at least one of k trials drawn from n (c of them successes) succeeds."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _value(metric: PassMetric, n: int, c: int, k: int) -> float:
    if metric == "pass@1":
        return c / n
    return pass_at_k(n, c, k) if metric == "pass@k" else pass_hat_k(n, c, k)


def trials_k(frame: pl.DataFrame, group: str = "group", seed_col: str = "train_seed") -> int:
    """The k every instance of every row can give: the fewest evaluation seeds one (instance, training seed) ran."""
    counts = _counts(frame, group, seed_col)
    return int(counts["n"].min()) if counts.height else 0


def _counts(frame: pl.DataFrame, group: str, seed_col: str) -> pl.DataFrame:
    ts = pl.col(seed_col).fill_null(-1) if seed_col in frame.columns else pl.lit(-1)
    return (frame.with_columns(ts.cast(pl.Int64).alias("_ts"))
            .group_by(group, "family", "instance_id", "_ts")
            .agg(pl.len().alias("n"), pl.col("passed").cast(pl.Int64).sum().alias("c")))


def _cells(rows: pl.DataFrame, metric: PassMetric, k: int) -> dict[str, np.ndarray]:
    """family -> array (training seeds x instances) of the metric (NaN where a seed did not run an instance)."""
    seeds = sorted(set(rows["_ts"].to_list()))
    out = {}
    for fam in sorted(set(rows["family"].to_list())):
        sub = rows.filter(pl.col("family") == fam)
        insts = sorted(set(sub["instance_id"].to_list()))
        arr = np.full((len(seeds), len(insts)), np.nan)
        for r in sub.iter_rows(named=True):
            arr[seeds.index(r["_ts"]), insts.index(r["instance_id"])] = _value(metric, r["n"], r["c"], k)
        out[fam] = arr
    return out


def _draws(cells: dict[str, np.ndarray], gen: np.random.Generator, n_boot: int) -> dict[str, np.ndarray]:
    """family (and OVERALL) -> n_boot bootstrap means."""
    n_seeds = next(iter(cells.values())).shape[0]
    seed_idx = gen.integers(0, n_seeds, size=(n_boot, n_seeds)) if n_seeds > 1 else np.zeros((n_boot, 1), int)
    out = {}
    for fam, arr in cells.items():
        inst_idx = gen.integers(0, arr.shape[1], size=(n_boot, arr.shape[1]))
        picked = arr[seed_idx[:, :, None], inst_idx[:, None, :]]  # (draws, seeds, instances)
        out[fam] = np.nanmean(picked.reshape(n_boot, -1), axis=1)
    out[OVERALL] = np.mean(np.stack(list(out.values())), axis=0)
    return out


def pass_k_intervals(frame: pl.DataFrame, *, rng: random.Random, group: str = "group", seed_col: str = "train_seed",
                     n_boot: int = 2000, confidence: float = 0.95, k: int | None = None) -> pl.DataFrame:
    """One row per (group, family incl. overall, metric): the value and its bootstrap CI (module docstring)."""
    if frame.is_empty():
        return pl.DataFrame(schema=PASS_K_SCHEMA)
    counts = _counts(frame, group, seed_col)
    k = k or int(counts["n"].min())
    if k > int(counts["n"].min()):
        raise ValueError(f"pass@k: k={k} but an instance has only {int(counts['n'].min())} trials")
    base = rng.randrange(2**32)  # every row and metric draws the same resamples: equal data, equal intervals
    out: list[dict[str, object]] = []
    for g in sorted(set(counts[group].to_list())):
        rows = counts.filter(pl.col(group) == g)
        n_seeds = rows["_ts"].n_unique()
        for metric in METRICS:
            cells = _cells(rows, metric, k)
            point = {f: float(np.nanmean(np.nanmean(a, axis=0))) for f, a in cells.items()}
            point[OVERALL] = float(np.mean(list(point.values())))
            draws = _draws(cells, np.random.default_rng(base), n_boot)
            for fam in [*sorted(cells), OVERALL]:
                lo, hi = percentile_interval(draws[fam].tolist(), confidence)
                n_inst = sum(a.shape[1] for a in cells.values()) if fam == OVERALL else cells[fam].shape[1]
                out.append({"group": g, "family": fam, "metric": metric, "k": 1 if metric == "pass@1" else k,
                            "value": point[fam], "ci_low": float(lo), "ci_high": float(hi), "n_instances": n_inst,
                            "train_seeds": n_seeds})
    return pl.DataFrame(out, schema=PASS_K_SCHEMA)
