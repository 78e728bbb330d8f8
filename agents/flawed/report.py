"""Success and injected-fault counts of flawed-student rollouts, as markdown (the tables in docs/flawed.md).

    python -m agents.flawed.report runs/flawed-expert runs/flawed-native ...

Reads trajectory Parquet files (`coevo rollout --out DIR` writes DIR/trajectories.parquet). It reads the
simulation ground truth on purpose: it reports what was injected, for people; no pipeline stage calls it.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

from agents.flawed.profiles import CATEGORIES
from agents.records import Trajectory
from agents.tables.trajectories import read_trajectories


def success_table(trajectories: list[Trajectory]) -> str:
    groups: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[(t.model_id.split("/", 1)[-1].split("@", 1)[-1], t.family)].append(t)
    lines = ["| profile | family | rollouts | success | mean score | faults / rollout | failing with 1 fault |",
             "|---|---|---|---|---|---|---|"]
    for (profile, family), ts in sorted(groups.items()):
        n = len(ts)
        passed = sum(t.passed for t in ts)
        faults = sum(len(t.injected_faults) for t in ts)
        single = sum(not t.passed and len(t.injected_faults) == 1 for t in ts)
        lines.append(f"| {profile} | {family} | {n} | {passed / n:.1%} ({passed}/{n}) | "
                     f"{sum(t.score for t in ts) / n:.3f} | {faults / n:.2f} | {single} |")
    return "\n".join(lines)


def fault_table(trajectories: list[Trajectory]) -> str:
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for t in trajectories:
        profile = t.model_id.split("@", 1)[-1]
        for f in t.injected_faults:
            counts[(profile, t.family)][f.category] += 1
    lines = ["| profile | family | " + " | ".join(CATEGORIES) + " | all |", "|---|---|" + "---|" * (len(CATEGORIES) + 1)]
    for (profile, family), c in sorted(counts.items()):
        lines.append(f"| {profile} | {family} | " + " | ".join(str(c[k]) for k in CATEGORIES) + f" | {sum(c.values())} |")
    return "\n".join(lines)


def kind_table(trajectories: list[Trajectory]) -> str:
    kinds: Counter[tuple[str, str]] = Counter((f.category, f.kind) for t in trajectories for f in t.injected_faults)
    lines = ["| category | kind | injected |", "|---|---|---|"]
    lines += [f"| {c} | {k} | {n} |" for (c, k), n in sorted(kinds.items())]
    return "\n".join(lines)


def main(paths: list[str]) -> None:
    trajectories = [t for p in paths for t in read_trajectories(Path(p))]
    print("## Success\n\n" + success_table(trajectories))
    print("\n## Injected faults per category\n\n" + fault_table(trajectories))
    print("\n## Injected faults per kind\n\n" + kind_table(trajectories))


if __name__ == "__main__":
    main(sys.argv[1:])
