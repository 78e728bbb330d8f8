"""Attribution accuracy against simulation ground truth: the ONLY reader of `Trajectory.injected_faults`.

Attributors get views (`Trajectory.view()`); this module gets the original trajectories and the attributions
made from their views, and compares. Units:
- scored: failing trajectories with exactly one injected fault; truth = that fault's category;
- multi-fault failing trajectories are counted and scored separately against their first fault;
- failing trajectories with no injected fault (not the policy's doing) and passing trajectories with faults
  (the fault did not matter) are counted only.
Accuracy = share of scored units whose attributed category equals the truth (`unattributed` counts wrong);
per-category accuracy is the recall of that category (rows of the confusion matrix).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from analysis.attribution.ontology import BUCKETS, CATEGORIES
from analysis.attribution.records import Attribution


def has_ground_truth(trajectories: Sequence[Trajectory]) -> bool:
    return any(t.injected_faults for t in trajectories)


class CategoryAccuracy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else float("nan")


class AccuracyReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attributor: str
    n_scored: int = Field(description="Failing trajectories with exactly one injected fault.")
    correct: int
    matrix: dict[str, dict[str, int]] = Field(description="truth -> predicted -> count (scored units).")
    per_category: dict[str, CategoryAccuracy]
    n_multi_fault: int
    multi_fault_correct_first: int = Field(description="Multi-fault units whose first fault's category was named.")
    n_failed_without_fault: int
    no_fault_predictions: dict[str, int]
    n_passed_with_fault: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n_scored if self.n_scored else float("nan")


def measure(trajectories: Sequence[Trajectory], attributions: Sequence[Attribution]) -> AccuracyReport:
    """Confusion matrix and accuracy of `attributions` (made from views) against the originals' ground truth."""
    by_id = {a.trajectory_id: a for a in attributions}
    names = {a.attributor for a in attributions}
    matrix: dict[str, Counter[str]] = {c: Counter() for c in CATEGORIES}
    multi = multi_ok = passed_fault = 0
    no_fault: Counter[str] = Counter()
    for t in trajectories:
        faults = t.injected_faults
        if t.passed:
            passed_fault += bool(faults)
            continue
        a = by_id.get(t.id)
        if a is None:
            raise ValueError(f"failing trajectory {t.id} has no attribution")
        if not faults:
            no_fault[a.category] += 1
        elif len(faults) == 1:
            matrix.setdefault(faults[0].category, Counter())[a.category] += 1
        else:
            multi += 1
            multi_ok += a.category == sorted(faults, key=lambda f: f.turn)[0].category
    per = {c: CategoryAccuracy(n=sum(row.values()), correct=row[c]) for c, row in matrix.items()}
    return AccuracyReport(
        attributor=", ".join(sorted(names)) or "-", n_scored=sum(p.n for p in per.values()),
        correct=sum(p.correct for p in per.values()), matrix={c: dict(row) for c, row in matrix.items()},
        per_category=per, n_multi_fault=multi, multi_fault_correct_first=multi_ok,
        n_failed_without_fault=sum(no_fault.values()), no_fault_predictions=dict(no_fault),
        n_passed_with_fault=passed_fault)


def _pct(x: float) -> str:
    return "–" if x != x else f"{100 * x:.1f}%"


def accuracy_markdown(report: AccuracyReport) -> str:
    """The confusion matrix (rows = injected category, columns = attributed) and per-category accuracy."""
    cols = list(BUCKETS)
    lines = [f"Attributor `{report.attributor}`: accuracy {_pct(report.accuracy)} "
             f"({report.correct}/{report.n_scored} single-fault failing rollouts).\n",
             "| injected \\ attributed | " + " | ".join(cols) + " | n | accuracy |",
             "|---|" + "---|" * (len(cols) + 2)]
    for truth, row in report.matrix.items():
        acc = report.per_category[truth]
        lines.append(f"| {truth} | " + " | ".join(str(row.get(c, 0)) for c in cols) + f" | {acc.n} | {_pct(acc.accuracy)} |")
    lines.append("")
    lines.append(f"Multi-fault failing rollouts: {report.n_multi_fault} (first fault named in "
                 f"{report.multi_fault_correct_first}); failing without an injected fault: "
                 f"{report.n_failed_without_fault} {report.no_fault_predictions or ''}; passing despite a fault: "
                 f"{report.n_passed_with_fault}.")
    return "\n".join(lines) + "\n"
