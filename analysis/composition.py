"""Failure composition per (model, harness) pair: the share of failures in each category, with bootstrap CIs.

Input: an attribution table (`analysis.attribution.records.ATTRIBUTION_SCHEMA`) with a group column (`pair`).
- share of category c in a pair = failures attributed to c / all failures of the pair (attributed or not:
  `unattributed` is a bucket of its own, so the shares sum to 1);
- CI: cluster bootstrap over instances (an instance's failing seeds move together), percentile interval,
  through `analysis.stats.cluster_bootstrap` with the caller's seeded `random.Random`;
- shift a -> b of category c = share_b - share_a, CI by resampling both pairs' instances independently.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import polars as pl

from analysis.attribution.ontology import BUCKETS
from analysis.stats import cluster_bootstrap, percentile_interval

Cluster = tuple[int, Counter[str]]  # (failures of one instance, their categories)

COMPOSITION_SCHEMA: dict[str, pl.DataType] = {
    "pair": pl.String(), "category": pl.String(), "n": pl.Int64(), "failures": pl.Int64(), "share": pl.Float64(),
    "ci_low": pl.Float64(), "ci_high": pl.Float64(),
}
SHIFT_SCHEMA: dict[str, pl.DataType] = {
    "a": pl.String(), "b": pl.String(), "category": pl.String(), "share_a": pl.Float64(), "share_b": pl.Float64(),
    "shift": pl.Float64(), "ci_low": pl.Float64(), "ci_high": pl.Float64(),
}


def _clusters(frame: pl.DataFrame, group: str, label: str) -> list[Cluster]:
    sub = frame.filter(pl.col(group) == label)
    out = []
    for (_,), part in sub.group_by("instance_id", maintain_order=True):
        cats = Counter(part["category"].to_list())
        out.append((part.height, cats))
    return out


def _share(clusters: Sequence[Cluster], category: str) -> float:
    total = sum(n for n, _ in clusters)
    return sum(c[category] for _, c in clusters) / total if total else float("nan")


def composition_table(frame: pl.DataFrame, rng: random.Random, *, group: str = "pair", order: Sequence[str] | None = None,
                      n_boot: int = 2000, confidence: float = 0.95) -> pl.DataFrame:
    """(pair, category, n, failures, share, ci_low, ci_high) for every pair and every bucket of the ontology."""
    missing = [c for c in (group, "instance_id", "category") if c not in frame.columns]
    if missing:
        raise ValueError(f"attribution frame lacks column(s) {missing}")
    unknown = sorted(set(frame["category"].to_list()) - set(BUCKETS))
    if unknown:
        raise ValueError(f"unknown categories {unknown}; the buckets are {list(BUCKETS)}")
    rows = []
    for label in order or sorted(frame[group].unique().to_list()):
        clusters = _clusters(frame, group, label)
        failures = sum(n for n, _ in clusters)
        for cat in BUCKETS:
            n = sum(c[cat] for _, c in clusters)
            lo, hi = cluster_bootstrap(clusters, lambda cs, cat=cat: _share(cs, cat), rng, n_boot, confidence) \
                if clusters else (float("nan"), float("nan"))
            rows.append({"pair": label, "category": cat, "n": n, "failures": failures,
                         "share": n / failures if failures else float("nan"), "ci_low": lo, "ci_high": hi})
    return pl.DataFrame(rows, schema=COMPOSITION_SCHEMA)


def composition_shift(frame: pl.DataFrame, a: str, b: str, rng: random.Random, *, group: str = "pair",
                      n_boot: int = 2000, confidence: float = 0.95) -> pl.DataFrame:
    """Per bucket: share in `a`, share in `b`, shift b - a and its bootstrap CI."""
    ca, cb = _clusters(frame, group, a), _clusters(frame, group, b)
    if not ca or not cb:
        raise ValueError(f"composition shift: no failures for {a if not ca else b!r}")
    rows = []
    for cat in BUCKETS:
        draws = []
        for _ in range(n_boot):
            ra = [ca[rng.randrange(len(ca))] for _ in ca]
            rb = [cb[rng.randrange(len(cb))] for _ in cb]
            draws.append(_share(rb, cat) - _share(ra, cat))
        lo, hi = percentile_interval(draws, confidence)
        sa, sb = _share(ca, cat), _share(cb, cat)
        rows.append({"a": a, "b": b, "category": cat, "share_a": sa, "share_b": sb, "shift": sb - sa,
                     "ci_low": lo, "ci_high": hi})
    return pl.DataFrame(rows, schema=SHIFT_SCHEMA)


def _pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:.1f}"


def composition_markdown(table: pl.DataFrame, order: Sequence[str]) -> str:
    """Rows = buckets, columns = pairs, cells 'share% [lo, hi] (n)'; a last row gives each pair's failures."""
    cells = {(r["pair"], r["category"]): r for r in table.iter_rows(named=True)}
    lines = ["| category | " + " | ".join(order) + " |", "|---|" + "---|" * len(order)]
    for cat in BUCKETS:
        row = [cells.get((p, cat)) for p in order]
        if all(r is None or r["n"] == 0 for r in row):
            continue
        lines.append(f"| {cat} | " + " | ".join(
            "–" if r is None else f"{_pct(r['share'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] ({r['n']})"
            for r in row) + " |")
    lines.append("| failures | " + " | ".join(
        str(cells[(p, BUCKETS[0])]["failures"]) if (p, BUCKETS[0]) in cells else "0" for p in order) + " |")
    return "\n".join(lines) + "\n"


def shift_markdown(shift: pl.DataFrame) -> str:
    lines = ["| category | share a (%) | share b (%) | shift (pp) | 95% CI |", "|---|---|---|---|---|"]
    for r in shift.iter_rows(named=True):
        if r["share_a"] == 0 and r["share_b"] == 0:
            continue
        lines.append(f"| {r['category']} | {_pct(r['share_a'])} | {_pct(r['share_b'])} | "
                     f"{100 * r['shift']:+.1f} | [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}] |")
    return "\n".join(lines) + "\n"
