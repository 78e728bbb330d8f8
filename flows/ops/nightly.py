"""The nightly evaluation: every promoted (student, harness) pair on the test split, compared with the night before.

    nightly_evaluation(runs_dir="runs", config_path="deploy/configs/local.yaml", night=None)

1. The promotion registry under `runs_dir` (flows/ops/registry.py) names the current pair of each family.
2. Each pair is one run of the round [evaluate_pairs, report] (`coevolution_run` as a subflow, run id
   `nightly-<night>-<family>`, so a rerun of the same night resumes and reuses its finished rollouts): the
   config file supplies the split size, seeds, limits, Ray and the student's serving options (api_base,
   sampling); the pair supplies the student's model string, its merged weights (served under the student's
   name on the config's first server when `student_path` is set; no server otherwise) and the harness file.
   Attribution and training are off.
3. The mean score over the pair's rollouts (instances x seeds) is recorded in the registry, and compared
   with the same pair's latest score from an earlier night.

Regression rule (one-sided, stated up front): a pair regressed when its mean fell by more than
`max(MIN_DROP, Z * SE)` below the previous night's, where SE = sqrt(p1(1-p1)/n1 + p0(1-p0)/n0) is the
standard error of the difference of two means of scores in [0, 1] (p(1-p)/n bounds the variance of such a
mean), MIN_DROP = 0.05 (5 points) and Z = 1.645 (95% one-sided). A first night has nothing to compare with.

Each family's run is then paired with the family's previous night (flows/ops/nightly_compare.py, the numbers
`coevo compare` prints): the report links to `<runs_dir>/nightly/<night>-compare.md`.

Regressions are in the report (`<runs_dir>/nightly/<night>.md` and `.json`), in the flow's table and
markdown artifacts, and in the outcome: with `fail_on_regression` (the default, what the deployment runs)
the flow fails after everything is recorded, so the failed run is the alarm; `coevo nightly` exits 3.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, ConfigDict, Field

from flows.config import RunConfig, load_config, parse_config
from flows.ops.nightly_compare import NightLink, comparison_path, comparisons_markdown, link_night, links_markdown
from flows.ops.registry import NightlyScore, Promotion, PromotionRegistry
from flows.rollouts import slug
from flows.round.eval import EvalRecord, frame_of
from flows.round.stages import PAIRS_PREFIX
from flows.store import RunStore, atomic_write_text

MIN_DROP = 0.05
Z = 1.645
PAIR = "promoted"  # the label of the one pair of each nightly run
STAGES = ["evaluate_pairs", "report"]


class NightlyRegression(RuntimeError):
    """At least one promoted pair scored significantly below its previous night (raised after recording)."""


class PairNight(BaseModel):
    """One promoted pair's score tonight, next to its previous night."""

    model_config = ConfigDict(frozen=True)

    family: str
    student: str
    harness_id: str
    harness_path: str
    run_id: str
    mean: float
    n: int
    previous_night: str | None = None
    previous_mean: float | None = None
    previous_n: int | None = None
    threshold: float | None = None
    regression: bool = False


class NightlyReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    night: str
    runs_dir: str
    pairs: list[PairNight]
    report_path: str
    links: list[NightLink] = Field(default_factory=list, description="Each family against its previous night.")
    comparison_path: str | None = Field(default=None, description="<runs_dir>/nightly/<night>-compare.md")

    @property
    def regressions(self) -> list[PairNight]:
        return [p for p in self.pairs if p.regression]


def check_night(night: str | None) -> str | None:
    """A night label names files and run ids: letters, digits, '.', '_', '-' (YYYY-MM-DD by default)."""
    if night is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", night):
        raise ValueError(f"night '{night}' must be letters, digits, '.', '_' or '-' (e.g. 2026-12-01)")
    return night


def regressed(previous_mean: float, previous_n: int, mean: float, n: int) -> tuple[bool, float]:
    """The module's rule: (regressed, the drop that counts as one) for tonight's mean against the previous one."""
    var = previous_mean * (1 - previous_mean) / max(previous_n, 1) + mean * (1 - mean) / max(n, 1)
    threshold = max(MIN_DROP, Z * math.sqrt(var))
    return previous_mean - mean > threshold, threshold


def pair_config(base: RunConfig, promo: Promotion, runs_dir: str) -> RunConfig:
    """The run config of one promoted pair: the base config's scale and serving, the pair's model and harness, the
    round [evaluate_pairs, report]."""
    data = base.model_dump(mode="json")
    models = data["models"]
    models["student"] = {**models.get("student", {}), "model": promo.student}
    served = promo.student.split("/", 1)[-1]
    servers = [{**data["servers"][0], "model": promo.student_path, "name": served}] \
        if promo.student_path and data.get("servers") else []
    data.update(name=f"nightly-{promo.family}", runs_dir=runs_dir, families=[promo.family], servers=servers,
                adapters=[], tiny_model=None, attribution=None, round={"stages": STAGES})
    data["evaluation"] = {**data["evaluation"], "split": "test",
                          "pairs": [{"model": "student", "harness": promo.harness_path, "label": PAIR}]}
    return parse_config(data, f"nightly pair {promo.family}")


def _score(run_dir: str) -> tuple[float, int]:
    """Mean score and rollout count of the run's one pair, read back from its round's store."""
    store = RunStore.open_existing(Path(run_dir) / "rounds", "r0")
    pairs = store.done("round")["evaluate_pairs"]["output"]["pairs"]
    frame = frame_of(store, [EvalRecord.model_validate(pairs[PAIRS_PREFIX + PAIR])])
    return float(frame["score"].mean() or 0.0), frame.height


def _compare(reg: PromotionRegistry, promo: Promotion, run_id: str, night: str, mean: float, n: int) -> PairNight:
    prev = reg.previous_nightly(promo.family, promo.student, promo.harness_id, night)
    row = PairNight(family=promo.family, student=promo.student, harness_id=promo.harness_id,
                    harness_path=promo.harness_path, run_id=run_id, mean=mean, n=n)
    if prev is None:
        return row
    bad, threshold = regressed(prev.mean, prev.n, mean, n)
    return row.model_copy(update={"previous_night": prev.night, "previous_mean": prev.mean, "previous_n": prev.n,
                                  "threshold": threshold, "regression": bad})


def _label(student: str) -> str:
    return f"{student} (SIMULATED)" if student.startswith("flawed/") else student


def _rows(report_pairs: list[PairNight]) -> list[dict[str, Any]]:
    return [{"family": p.family, "student": _label(p.student), "harness": p.harness_id, "mean": round(p.mean, 4),
             "n": p.n, "previous night": p.previous_night or "-",
             "previous mean": "-" if p.previous_mean is None else round(p.previous_mean, 4),
             "allowed drop": "-" if p.threshold is None else round(p.threshold, 4),
             "regression": "REGRESSION" if p.regression else "ok", "run": p.run_id} for p in report_pairs]


def _markdown(night: str, pairs: list[PairNight]) -> str:
    rows = _rows(pairs)
    head = list(rows[0]) if rows else ["family"]
    lines = [f"# Nightly evaluation {night}", "",
             f"Promoted (student, harness) pairs on the test split. Regression: the mean fell by more than "
             f"max({MIN_DROP}, {Z} x SE of the difference) below the pair's previous night (flows/ops/nightly.py).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[k]) for k in head) + " |" for r in rows]
    bad = [p.family for p in pairs if p.regression]
    lines += ["", f"**Regressions: {', '.join(bad)}**" if bad else "No regression." if pairs
              else "No promoted pair in the registry: nothing evaluated."]
    return "\n".join(lines) + "\n"


def write_report(runs_dir: str, night: str, pairs: list[PairNight], links: list[NightLink] | None = None) -> NightlyReport:
    """<runs_dir>/nightly/<night>.md and .json (and `<night>-compare.md` with the previous nights), and the flow's
    table + markdown artifacts."""
    out = Path(runs_dir) / "nightly"
    cpath = comparison_path(runs_dir, night) if links else None
    report = NightlyReport(night=night, runs_dir=str(runs_dir), pairs=pairs, report_path=str(out / f"{night}.md"),
                           links=links or [], comparison_path=str(cpath) if cpath else None)
    md = _markdown(night, pairs)
    if cpath is not None:
        atomic_write_text(cpath, comparisons_markdown(night, links or []))
        md += "\n" + links_markdown(links or [], cpath.name)
    atomic_write_text(out / f"{night}.md", md)
    atomic_write_text(out / f"{night}.json", json.dumps(report.model_dump(mode="json"), indent=2))
    create_markdown_artifact(markdown=md, key=slug("nightly-report", night), description=f"Nightly evaluation {night}")
    if pairs:
        create_table_artifact(table=_rows(pairs), key=slug("nightly", night),
                              description=f"Nightly scores {night} (regression rule in flows/ops/nightly.py)")
    return report


@flow(name="nightly-evaluation", flow_run_name="nightly-{night}", log_prints=True)
def nightly_evaluation(runs_dir: str = "runs", config_path: str = "deploy/configs/local.yaml",
                       night: str | None = None, fail_on_regression: bool = True) -> NightlyReport:
    """Evaluate every promoted (student, harness) pair on the test split; record it; flag regressions."""
    night = check_night(night) or datetime.now(timezone.utc).strftime("%Y-%m-%d")
    from flows.round.flow import coevolution_run

    log = get_run_logger()
    base = load_config(config_path)
    reg = PromotionRegistry.under(Path(runs_dir))
    promos = reg.current()
    log.info("nightly %s: %d promoted pair(s) in %s", night, len(promos), reg.path)
    pairs = []
    for promo in promos:
        result = coevolution_run(pair_config(base, promo, runs_dir), f"nightly-{night}-{promo.family}",
                                 base_dir=str(Path.cwd()))
        mean, n = _score(result.run_dir)
        reg.record_nightly(NightlyScore(family=promo.family, student=promo.student, harness_id=promo.harness_id,
                                        run_id=result.run_id, night=night, mean=mean, n=n))
        pairs.append(_compare(reg, promo, result.run_id, night, mean, n))
        log.info("%s: %s mean %.3f over %d rollouts%s", promo.family, _label(promo.student), mean, n,
                 " REGRESSION" if pairs[-1].regression else "")
    links = [link_night(reg, runs_dir, night, p.family, p.run_id, PAIR) for p in pairs]
    report = write_report(runs_dir, night, pairs, links)
    log.info("nightly report: %s", report.report_path)
    if report.regressions and fail_on_regression:
        raise NightlyRegression(f"regression in {', '.join(p.family for p in report.regressions)} "
                                f"(report {report.report_path})")
    return report
