"""Calibrate the fit monitor's threshold (analysis/fit.py, `FitConfig.threshold_nats`) on measured KLs.

    python benchmarks/fit_threshold.py --base runs/native --compare expert=runs/expert --compare uniform=runs/uniform

`--base` holds rollouts of one student with seeds 0..2S-1 (e.g. `coevo rollout --seeds 6`). The null
distribution is the KL between two disjoint seed halves of that same student (no drift: what sampling noise
alone gives at this number of rollouts): every split of the seeds into two equal halves, the overall KL (mean
over families) of each. Each `--compare NAME=DIR` is a set of rollouts of another student (a different
profile, a different harness) whose KL from one half of the base is the "drift" to detect. The suggested
threshold is the null maximum times `--margin`; the table says which comparisons it flags. Raw results:
benchmarks/results/fit_threshold-<date>.json (benchmarks/results_io.py).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from agents.records import Trajectory
from agents.tables.trajectories import read_trajectories
from analysis.fit import FitConfig, fit_alarm
from results_io import REPO, save_results  # benchmarks/ is sys.path[0] when this script runs


def halves(trajs: list[Trajectory]) -> list[tuple[list[Trajectory], list[Trajectory]]]:
    """Every split of the seeds into two equal halves (each unordered pair once)."""
    seeds = sorted({t.seed for t in trajs})
    if len(seeds) < 2 or len(seeds) % 2:
        raise ValueError(f"--base needs an even number (>= 2) of seeds, got {seeds}")
    out = []
    for a in itertools.combinations(seeds, len(seeds) // 2):
        if seeds[0] not in a:
            continue
        b = [s for s in seeds if s not in a]
        out.append(([t for t in trajs if t.seed in a], [t for t in trajs if t.seed in b]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, type=Path)
    ap.add_argument("--compare", action="append", default=[], help="NAME=DIR of another student's rollouts")
    ap.add_argument("--margin", type=float, default=1.5)
    args = ap.parse_args()
    base = read_trajectories(args.base)
    splits = halves(base)
    null = [fit_alarm(a, b)[1].kl_base for a, b in splits]
    threshold = max(null) * args.margin
    cfg = FitConfig(threshold_nats=threshold)
    half_seeds = sorted({t.seed for t in splits[0][1]})
    print(f"base {args.base}: {len(base)} rollouts, seeds {sorted({t.seed for t in base})}; "
          f"null = KL between seed halves, {len(null)} splits")
    print(f"null KL (nats): min {min(null):.4f}  mean {sum(null) / len(null):.4f}  max {max(null):.4f}")
    print(f"suggested threshold = max x {args.margin:g} = {threshold:.4f}\n")
    print("| comparison | rollouts | KL vs base half (seeds " + ",".join(map(str, half_seeds)) + ") | per family | flagged |")
    print("|---|---|---|---|---|")
    comparisons = []
    for spec in args.compare:
        name, _, path = spec.partition("=")
        other = read_trajectories(Path(path))
        flag, ev = fit_alarm(other, splits[0][1], config=cfg)
        fams = ", ".join(f"{f} {v:.3f}" for f, v in sorted(ev.per_family.items()))
        print(f"| {name} | {len(other)} | {ev.kl_base:.4f} | {fams} | {'yes' if flag else 'no'} |")
        comparisons.append({"name": name, "dir": path, "rollouts": len(other), "kl_base": ev.kl_base,
                            "per_family": dict(ev.per_family), "flagged": flag})
    report = {"base_rollouts": len(base), "base_seeds": sorted({t.seed for t in base}), "null_kl": null,
              "margin": args.margin, "threshold_nats": threshold, "half_seeds": half_seeds,
              "comparisons": comparisons}
    print(f"raw results: {save_results('fit_threshold', report, args).relative_to(REPO)}")


if __name__ == "__main__":
    main()
