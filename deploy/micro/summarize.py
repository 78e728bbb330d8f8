"""Success of a micro student per family under h0 and each other harness measured (runs/micro-eval, written by
deploy/micro/evaluate.sh: h0, hK, and for M1 hKp) with the paired bootstrap of <harness> - h0 per family (units:
(instance, seed); resampled by instance).

    PYTHONPATH=$PWD .venv/bin/python deploy/micro/summarize.py [runs/micro-eval]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import polars as pl

from agents.tables.trajectories import read_frame
from analysis.stats import paired_bootstrap


def harnesses(root: Path) -> list[str]:
    """The harnesses measured under `root`: h0 first, then the others in name order."""
    names = sorted(d.name for d in root.iterdir() if d.is_dir())
    return ["h0"] + [n for n in names if n != "h0"] if "h0" in names else names


def main(root: Path) -> None:
    frames = []
    for harness in harnesses(root):
        for d in sorted((root / harness).glob("*")):
            f = read_frame(d)
            if not f.is_empty():
                frames.append(f.with_columns(pl.lit(harness).alias("pair")))
    frame = pl.concat(frames, how="diagonal_relaxed")
    for other in harnesses(root)[1:]:
        print(f"\n| family | h0 success | {other} success | {other} - h0 (95% CI, paired bootstrap) | significant |")
        print("|---|---|---|---|---|")
        for family in sorted(frame["family"].unique().to_list()):
            print(_row(frame.filter(pl.col("family") == family), family, other))
    stops = frame.group_by("pair", "family", "stop_reason").len().sort("pair", "family", "stop_reason")
    print("\nstop reasons:\n" + "\n".join(f"  {r['pair']} {r['family']} {r['stop_reason']}: {r['len']}"
                                         for r in stops.iter_rows(named=True)))
    by_seed = (frame.group_by("pair", "family", "seed").agg(pl.col("passed").sum().alias("won"), pl.len())
               .sort("pair", "family", "seed").group_by("pair", "family", maintain_order=True)
               .agg(pl.format("{}/{}", "won", "len").alias("rates")))
    print("\npassed per sampling seed (seeds that decide every instance alike make the instances one draw):\n"
          + "\n".join(f"  {r['pair']} {r['family']}: {', '.join(r['rates'])}" for r in by_seed.iter_rows(named=True)))


def _row(sub: pl.DataFrame, family: str, other: str) -> str:
    cells = []
    for harness in ("h0", other):
        h = sub.filter(pl.col("pair") == harness)
        n_inst = h["instance_id"].n_unique()
        cells.append(f"{h['passed'].sum()}/{h.height} = {100 * h['passed'].mean():.1f}% ({n_inst} inst.)"
                     if h.height else "-")
    try:
        d = paired_bootstrap(sub, other, "h0", family=family)
        diff = f"{100 * d.diff:+.1f} pts [{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]"
        sig = "yes" if d.significant else "no"
    except ValueError as e:
        diff, sig = str(e), "-"
    return f"| {family} | {cells[0]} | {cells[1]} | {diff} | {sig} |"


def _by_kind(trajectories: list) -> str:
    """`kind passed/episodes` of code_refactor episodes, per refactoring kind (the instance's spec)."""
    from collections import Counter

    kinds = [t.instance.payload["spec"]["kind"] for t in trajectories]
    n, won = Counter(kinds), Counter(k for k, t in zip(kinds, trajectories) if t.verdict.score >= 1.0)
    return ", ".join(f"{k} {won[k]}/{n[k]}" for k in sorted(n))


FIRST_CALL = {"anomaly_detection": ("bucket_get", "describe_tables"), "code_refactor": ("shell",),
              "stock_alert": ("get_email_template",), "budget_approval": ("list_documents",),
              "payroll_audit": ("python",), "website_admin": ("goto",)}
# what a demonstration opens with, under any of the family's programs (anomaly_detection's `paste` program, M0's,
# opens with bucket_get; its `values` and `flag` programs, M1's, with describe_tables)


def behaviour(root: Path) -> None:
    """How far the episodes got: the demonstrated first call, malformed calls, and (code_refactor renames)
    whether the instruction's old name was copied into any call."""
    from agents.tables.trajectories import read_trajectories
    from training.micro.policies import has_policy

    print("\nbehaviour:")
    for harness in harnesses(root):
        for d in sorted((root / harness).glob("*")):
            ts = read_trajectories(d)
            if not ts:
                continue
            family = ts[0].instance.family
            opening = FIRST_CALL.get(family, ())
            first = sum(bool(t.turns and t.turns[0].tool_calls and t.turns[0].tool_calls[0].name in opening) for t in ts)
            calls = sum(len(u.tool_calls) for t in ts for u in t.turns)
            malformed = sum(u.malformed_tool_calls for t in ts for u in t.turns)
            covered = [t for t in ts if has_policy(t.instance)]  # instances a show-your-work policy demonstrates
            won = sum(t.verdict.score >= 1.0 for t in covered)
            line = (f"  {harness} {family}: {len(ts)} episodes, demonstrated first call {first}, calls {calls}, "
                    f"malformed {malformed}; on the {len(covered)} episodes of covered instances {won} succeeded")
            renames = [(t, re.search(r"Rename the function `(\w+)`", t.instance.instruction)) for t in ts]
            renames = [(t, m.group(1)) for t, m in renames if m]
            if renames:
                copied = sum(any(old in str(c.arguments) for u in t.turns for c in u.tool_calls) for t, old in renames)
                line += f"; rename episodes {len(renames)}, old name copied into a call in {copied}"
            print(line)
            if family == "code_refactor":
                print("    passed by refactoring kind: " + _by_kind(ts))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/micro-eval"))
    behaviour(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/micro-eval"))
