"""PNG plots for the round report (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: reports are written on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from analysis.stats import OVERALL, family_table  # noqa: E402


def family_bars(frame: pl.DataFrame, out: Path, order: list[str], group: str = "pair") -> Path:
    """Grouped bars: success rate per family (and overall) per pair, error bars = SEM over seeds."""
    long = family_table(frame, group)
    families = sorted(f for f in long["family"].unique().to_list() if f != OVERALL) + [OVERALL]
    width = 0.8 / max(1, len(order))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(families) * max(1, len(order)) + 2), 4.0))
    for i, g in enumerate(order):
        sub = {r["family"]: r for r in long.filter(pl.col(group) == g).iter_rows(named=True)}
        means = [100 * sub[f]["mean"] if f in sub else 0.0 for f in families]
        sems = [100 * sub[f]["sem"] if f in sub and not math.isnan(sub[f]["sem"]) else 0.0 for f in families]
        xs = [j + (i - (len(order) - 1) / 2) * width for j in range(len(families))]
        ax.bar(xs, means, width, yerr=sems, capsize=3, label=g)
    ax.set_xticks(range(len(families)), families, rotation=30, ha="right")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Success per family (mean ± SEM over seeds)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def cost_vs_success(points: pl.DataFrame, out: Path, x: str, xlabel: str) -> Path:
    """One point per report row: its cost per rollout (`x`: API dollars, or model-seconds when nothing cost a dollar)
    against its success rate (`success`, the mean of the family rates), labelled with the row (`label`)."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    at: dict[tuple[float, float], list[str]] = {}  # rows on the same spot share one point and one label
    for r in points.iter_rows(named=True):
        at.setdefault((round(float(r[x]), 6), round(100 * float(r["success"]), 6)), []).append(r["label"])
    for i, ((px, py), labels) in enumerate(at.items()):
        ax.scatter([px], [py], color=f"C{i % 10}", zorder=3)
        ax.annotate(" = ".join(labels), (px, py), fontsize=8, xytext=(5, 4), textcoords="offset points")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("success rate (%, mean of the families)")
    ax.set_ylim(-5, 105)
    ax.set_xlim(0, 1.4 * max([px for px, _ in at] + [1e-9]))  # room for the labels on the right
    ax.set_title("Success vs cost per row")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def campaign_lines(table: pl.DataFrame, out: Path, series: list[tuple[str, str]]) -> Path:
    """One panel per family (and overall): each series' success across the rounds (`round`, `series`, `family`,
    `mean`, `sem`), error bars = SEM over seeds; a series missing in a round is a gap."""
    families = sorted(f for f in set(table["family"].to_list()) if f != OVERALL) + [OVERALL]
    rounds = sorted(set(table["round"].to_list()))
    fig, axes = plt.subplots(1, len(families), figsize=(3.2 * len(families) + 1, 3.6), sharey=True, squeeze=False)
    cells = {(r["round"], r["series"], r["family"]): r for r in table.iter_rows(named=True)}
    for ax, fam in zip(axes[0], families, strict=True):
        for i, (key, label) in enumerate(series):
            ys = [100 * cells[(t, key, fam)]["mean"] if (t, key, fam) in cells else float("nan") for t in rounds]
            es = [100 * cells[(t, key, fam)]["sem"] if (t, key, fam) in cells and not math.isnan(
                cells[(t, key, fam)]["sem"]) else 0.0 for t in rounds]
            dodge = [t + 0.08 * (i - (len(series) - 1) / 2) for t in rounds]  # equal values stay visible
            ax.errorbar(dodge, ys, yerr=es, marker="o", capsize=3, label=label, color=f"C{i}")
        ax.set_title(fam, fontsize="small")
        ax.set_xticks(rounds, [f"r{t}" for t in rounds])
        ax.set_xlim(rounds[0] - 0.5, rounds[-1] + 0.5)
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success rate (%)")
    axes[0][-1].legend(fontsize="x-small", loc="best")
    fig.suptitle("Across the run's rounds", fontsize="medium")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def composition_bars(table: pl.DataFrame, out: Path, order: list[str]) -> Path:
    """One stacked bar per pair: the share of its failures in each category (`analysis.composition`)."""
    every = list(dict.fromkeys(table["category"].to_list()))  # the ontology's order: one colour per category
    cats = [c for c in every if table.filter(pl.col("category") == c)["n"].sum() > 0]
    cells = {(r["pair"], r["category"]): r for r in table.iter_rows(named=True)}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(order) + 3), 4.0))
    bottom = [0.0] * len(order)
    for cat in cats:
        vals = [100 * cells[(p, cat)]["share"] if (p, cat) in cells and cells[(p, cat)]["failures"] else 0.0 for p in order]
        ax.bar(range(len(order)), vals, 0.6, bottom=bottom, label=cat, color=f"C{every.index(cat) % 10}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    labels = [f"{p}\n(n={cells[(p, cats[0])]['failures'] if cats and (p, cats[0]) in cells else 0})" for p in order]
    ax.set_xticks(range(len(order)), labels, fontsize="small")
    ax.set_ylabel("share of failures (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Failure composition per pair")
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def trigger_heatmap(table: pl.DataFrame, out: Path, order: list[str]) -> Path:
    """Components x pairs, colour = share of rollouts in which the component fired (`analysis.triggers`)."""
    comps = sorted(table["component"].unique().to_list())
    cells = {(r["pair"], r["component"]): r["rate"] for r in table.iter_rows(named=True)}
    grid = [[100 * cells.get((p, c), float("nan")) for p in order] for c in comps]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(order) + 3), max(2.5, 0.35 * len(comps) + 1.5)))
    im = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize="small")
    ax.set_yticks(range(len(comps)), comps, fontsize="small")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="white" if v < 60 else "black")
    fig.colorbar(im, ax=ax, label="rollouts where it fired (%)")
    ax.set_title("Component trigger rates")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
