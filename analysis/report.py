"""The round report's sections over its rows: pass@k with CIs, cost per row and per stage, and the two plots.

    rows = [("M_t.h0", "M_t on h0"), ("expert.h0", "expert on h0"), ...]        # report row key -> label
    sections, pass_k = row_sections(frame, rows, random.Random(0), n_boot=2000)   # [(title, markdown)], table
    paths = write_row_plots(frame, rows, out_dir)       # family_success.png, cost_vs_success.png
    md = stage_cost_markdown(stages, kept_corrections=40)

`frame` has one row per test rollout: `group` (the row key), `train_seed` (null for base rows), `family`,
`instance_id`, `seed`, `passed`, and for the costs `cost_usd`, `model_s` (seconds the model spent answering,
the sum of the rollout's call latencies), `wall_s`, `n_turns`, `prompt_tokens`, `completion_tokens`. Every
number is computed from those rows (analysis/stats.py, analysis/pass_k.py); nothing is typed in. The round's page
(analysis/round_report.py) places the sections.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from analysis import plots
from analysis.pass_k import METRICS, pass_k_intervals
from analysis.stats import OVERALL, cost_latency_table, family_table

PLOTS = {"family_success": "family_success.png", "cost_vs_success": "cost_vs_success.png"}
COST_COLUMNS = ("cost_usd", "model_s", "wall_s", "n_turns", "prompt_tokens", "completion_tokens")


def markdown_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    if not rows:
        return "_(no rows)_\n"
    cols = columns or list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|")


def present_rows(frame: pl.DataFrame, rows: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (key, label) rows that have rollouts in `frame`, in the given order."""
    have = set(frame["group"].unique().to_list()) if frame.height else set()
    return [(k, lab) for k, lab in rows if k in have]


def pass_k_markdown(table: pl.DataFrame, rows: Sequence[tuple[str, str]]) -> str:
    """One wide table per metric (rows x families + overall), cells 'value [CI]' in percent."""
    if table.is_empty():
        return "_(no rollouts)_\n"
    k = int(table.filter(pl.col("metric") != "pass@1")["k"].max() or 1)
    fams = sorted(f for f in set(table["family"].to_list()) if f != OVERALL) + [OVERALL]
    cell = {(r["group"], r["family"], r["metric"]): r for r in table.iter_rows(named=True)}
    parts = []
    for metric in METRICS if k > 1 else ("pass@1",):
        out = []
        for key, label in rows:
            line = {"row": label}
            for f in fams:
                r = cell.get((key, f, metric))
                line[f] = "–" if r is None else \
                    f"{100 * r['value']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]"
            out.append(line)
        name = metric.replace("k", str(k)) if metric != "pass@1" else metric
        parts.append(f"**{name}** (%, 95% CI)\n\n" + markdown_table(out))
    return "\n".join(parts)


def pass_k_section(frame: pl.DataFrame, rows: Sequence[tuple[str, str]], rng: random.Random,
                   n_boot: int) -> tuple[str, pl.DataFrame]:
    """The section's markdown and its table (analysis/pass_k.py)."""
    rows = present_rows(frame, rows)
    table = pass_k_intervals(frame.filter(pl.col("group").is_in([k for k, _ in rows])), rng=rng, n_boot=n_boot) \
        if rows else pl.DataFrame()
    k = int(table.filter(pl.col("metric") != "pass@1")["k"].max() or 1) if table.height else 1
    intro = (f"Per instance with n evaluation seeds, c of them successes, k = {k}: pass@1 = c/n; pass@{k} = the chance "
             f"at least one of {k} trials succeeds, 1 - C(n-c,{k})/C(n,{k}); pass^{k} = the chance all {k} succeed, "
             f"C(c,{k})/C(n,{k}). Averaged over instances (a trained arm: over its training seeds first); overall = "
             f"the mean of the families. 95% CI: percentile bootstrap over instances (and training seeds), "
             f"{n_boot} draws.\n\n")
    if k == 1:
        intro += "One evaluation seed per instance: pass@k and pass^k need k >= 2 trials, so only pass@1 is shown.\n\n"
    return intro + pass_k_markdown(table, rows), table


def row_costs(frame: pl.DataFrame, rows: Sequence[tuple[str, str]]) -> pl.DataFrame:
    """Per row: label, rollouts, API dollars (total, per rollout), model-seconds and wall seconds per rollout,
    turns and tokens per rollout, and its success (the mean of the family rates)."""
    rows = present_rows(frame, rows)
    if not rows:
        return pl.DataFrame()
    sub = frame.filter(pl.col("group").is_in([k for k, _ in rows]))
    lat = cost_latency_table(sub, group="group")
    model_s = sub.group_by("group").agg(pl.col("model_s").mean().alias("model_s_mean"),
                                        pl.col("model_s").sum().alias("model_s_total"))
    success = family_table(sub, group="group").filter(pl.col("family") == OVERALL).select("group", pl.col("mean")
                                                                                            .alias("success"))
    labels = pl.DataFrame({"group": [k for k, _ in rows], "label": [lab for _, lab in rows],
                           "order": list(range(len(rows)))}, schema={"group": pl.String(), "label": pl.String(),
                                                                      "order": pl.Int64()})
    return labels.join(lat, on="group").join(model_s, on="group").join(success, on="group").sort("order")


def row_cost_markdown(costs: pl.DataFrame) -> str:
    if costs.is_empty():
        return "_(no rollouts)_\n"
    return markdown_table([
        {"row": r["label"], "rollouts": r["rollouts"], "success %": f"{100 * r['success']:.1f}",
         "API $ / rollout": f"{r['cost_usd_mean']:.4f}", "API $ total": f"{r['cost_usd_total']:.4f}",
         "model-s / rollout": f"{r['model_s_mean']:.2f}", "wall s / rollout (p95)": f"{r['wall_s_mean']:.2f} "
         f"({r['wall_s_p95']:.2f})", "turns": f"{r['turns_mean']:.1f}", "tokens": f"{r['tokens_mean']:.0f}"}
        for r in costs.iter_rows(named=True)])


def cost_axis(costs: pl.DataFrame) -> tuple[str, str]:
    """(column, axis label): API dollars per rollout, or model-seconds per rollout when no row cost a dollar."""
    if float(costs["cost_usd_mean"].max() or 0.0) > 0.0:
        return "cost_usd_mean", "API dollars per rollout"
    return "model_s_mean", "model-seconds per rollout (no API cost: local or simulated models)"


def row_sections(frame: pl.DataFrame, rows: Sequence[tuple[str, str]], rng: random.Random,
                 n_boot: int) -> tuple[list[tuple[str, str]], pl.DataFrame]:
    """(title, markdown) of the sections over the rows (pass@k, cost per row, the two plots) and the pass@k table."""
    pk, table = pass_k_section(frame, rows, rng, n_boot)
    costs = row_costs(frame, rows)
    plot_md = "_(no rollouts)_\n" if costs.is_empty() else (
        f"![success per family]({PLOTS['family_success']})\n\n![success vs cost]({PLOTS['cost_vs_success']})\n\n"
        f"Success vs cost: x = {cost_axis(costs)[1]}; y = the row's success (the mean of its family rates).\n")
    return [("pass@1, pass@k and pass^k per family", pk),
            ("Cost per row (test split)", "Model-seconds: the seconds the model spent answering (the sum of the "
             "rollout's call latencies); wall: the whole rollout, tools included.\n\n" + row_cost_markdown(costs)),
            ("Plots", plot_md)], table


def write_row_plots(frame: pl.DataFrame, rows: Sequence[tuple[str, str]], out_dir: Path) -> dict[str, Path]:
    """family_success.png (bars per family; SEM over evaluation seeds, a trained arm's over its training seeds, as in
    the main table) and cost_vs_success.png (one point per row)."""
    rows = present_rows(frame, rows)
    if not rows:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    label = dict(rows)
    sub = frame.filter(pl.col("group").is_in(list(label))).with_columns(  # SEM as in the main table: a trained
        pl.col("group").replace_strict(label, return_dtype=pl.String()).alias("row"),  # arm's over training seeds
        pl.coalesce(pl.col("train_seed"), pl.col("seed")).alias("seed"))
    costs = row_costs(frame, rows)
    x, xlabel = cost_axis(costs)
    return {"family_success": plots.family_bars(sub, out_dir / PLOTS["family_success"], [lab for _, lab in rows],
                                                group="row"),
            "cost_vs_success": plots.cost_vs_success(costs, out_dir / PLOTS["cost_vs_success"], x, xlabel)}


def stage_cost_markdown(stages: Sequence[dict[str, Any]], kept_corrections: int | None = None) -> str:
    """Per stage: status, wall seconds, API dollars, model-seconds, rollouts and model calls it ran; a total; and the
    correction stage's cost per kept correction."""
    if not stages:
        return "_(no stage ran)_\n"
    rows, total = [], {"wall_s": 0.0, "cost_usd": 0.0, "model_s": 0.0, "rollouts": 0, "model_calls": 0}
    for s in stages:
        rows.append({"stage": s["stage"], "status": s.get("status", ""), "wall s": _num(s.get("wall_s"), 1),
                     "API $": _num(s.get("cost_usd"), 4), "model-s": _num(s.get("model_s"), 1),
                     "rollouts": s.get("rollouts", "–"), "model calls": s.get("model_calls", "–")})
        for k in total:
            total[k] += s.get(k) or 0
    rows.append({"stage": "**total**", "status": "", "wall s": _num(total["wall_s"], 1),
                 "API $": _num(total["cost_usd"], 4), "model-s": _num(total["model_s"], 1),
                 "rollouts": total["rollouts"], "model calls": total["model_calls"]})
    md = ("Wall: the stage's seconds (a stage skipped on resume: the seconds it took when it ran). API $: dollars "
          "its model calls cost. Model-s: seconds the models spent answering the calls of the rollouts it stored "
          "(a rollout copied from an earlier stage counts there). Rollouts and model calls: those it stored.\n\n"
          + markdown_table(rows))
    corr = next((s for s in stages if s["stage"] == "arm_data"), None)
    if corr is not None and kept_corrections:
        md += (f"\nThe correction stage (arm_data) kept {kept_corrections} corrections: "
               f"${(corr.get('cost_usd') or 0) / kept_corrections:.4f} and "
               f"{(corr.get('model_s') or 0) / kept_corrections:.1f} model-s per kept correction "
               "(the stage's whole cost, its imitation rollouts included).\n")
    return md


def _num(v: Any, digits: int) -> str:
    return "–" if v is None else f"{float(v):.{digits}f}"
