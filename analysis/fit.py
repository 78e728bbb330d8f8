"""Fit monitor: has training moved the student's way of planning away from what its harness was evolved for?

Planning-action distribution of a set of trajectories (one family, one (model, harness) pair):
- the rollout's action sequence: each tool call's name in order, then `<finish>` when it ended with an answer;
- two feature families, each a distribution: tool-name bigrams (with `<start>` before the first action) and
  action type by position bucket (`q<k>:<type>`, k = floor(position * B / length), type read / compute /
  write / finish / other from `analysis.actions`);
- each rollout's counts are normalised to sum 1 and averaged over rollouts (a long rollout weighs as much as
  a short one);
- smoothing, when two distributions are compared: P(x) = (N p(x) + alpha) / (N + alpha |V|), V the union of
  both supports, N the number of rollouts (additive smoothing on the rollout scale).

KL(trained || reference) = KL of the bigram distributions + KL of the position distributions (nats). It is
0 for identical trajectory sets. Per family, against the base student under the same harness and against
the expert; the overall row averages families. An adapter is **fit at risk** when its overall KL from the
base student exceeds `FitConfig.threshold_nats`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from analysis.actions import FINISH, action_of

START = "<start>"
OVERALL = "overall"


class FitConfig(BaseModel):
    """Fit-monitor settings (a run config section; every field has a default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold_nats: float = Field(default=0.05, gt=0, description="KL from the base student above which an "
                                  "adapter is 'fit at risk' (calibrated at 60 rollouts per family: 3x the largest "
                                  "KL between seed halves of one student; docs/attribution.md, Fit monitor).")
    alpha: float = Field(default=0.5, gt=0, description="Additive smoothing per feature, on the rollout scale.")
    position_buckets: int = Field(default=4, ge=1, description="Position buckets of the action-type feature.")


class PlanningDistribution(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bigram: dict[str, float]
    position: dict[str, float]
    n: int = Field(description="Rollouts averaged.")


def actions(t: Trajectory) -> list[str]:
    """Tool names in call order, then `<finish>` when the rollout ended with a final answer."""
    seq = [c.name for turn in t.turns for c in turn.tool_calls]
    if t.stop_reason == "submitted":
        seq.append(FINISH)
    return seq


def _events(t: Trajectory, buckets: int) -> tuple[Counter[str], Counter[str]]:
    seq = actions(t)
    bigram = Counter(f"{a}>{b}" for a, b in zip([START, *seq], seq, strict=False))
    n = len(seq)
    position = Counter(f"q{min(buckets - 1, i * buckets // n)}:{action_of(a)}" for i, a in enumerate(seq))
    return bigram, position


def _normalised_mean(counters: list[Counter[str]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for c in counters:
        total = sum(c.values())
        for k, v in c.items():
            out[k] += v / total / len(counters) if total else 0.0
    return dict(out)


def planning_distribution(trajectories: Sequence[Trajectory], config: FitConfig | None = None) -> PlanningDistribution:
    cfg = config or FitConfig()
    if not trajectories:
        raise ValueError("no trajectories to build a planning distribution from")
    events = [_events(t, cfg.position_buckets) for t in trajectories]
    return PlanningDistribution(bigram=_normalised_mean([b for b, _ in events]),
                                position=_normalised_mean([p for _, p in events]), n=len(trajectories))


def smoothed_kl(p: Mapping[str, float], n_p: int, q: Mapping[str, float], n_q: int, alpha: float) -> float:
    """KL(P || Q) in nats after additive smoothing over the union of both supports (module docstring)."""
    support = set(p) | set(q)
    if not support:
        return 0.0
    v = len(support)
    total = 0.0
    for x in support:
        px = (n_p * p.get(x, 0.0) + alpha) / (n_p + alpha * v)
        qx = (n_q * q.get(x, 0.0) + alpha) / (n_q + alpha * v)
        total += px * math.log(px / qx)
    return max(0.0, total)


class FitDivergence(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bigram: float
    position: float

    @property
    def total(self) -> float:
        return self.bigram + self.position


def divergence(trained: Sequence[Trajectory], reference: Sequence[Trajectory], config: FitConfig | None = None) -> FitDivergence:
    """KL(trained || reference) of the two planning distributions, per feature family."""
    cfg = config or FitConfig()
    p, q = planning_distribution(trained, cfg), planning_distribution(reference, cfg)
    return FitDivergence(bigram=smoothed_kl(p.bigram, p.n, q.bigram, q.n, cfg.alpha),
                         position=smoothed_kl(p.position, p.n, q.position, q.n, cfg.alpha))


FIT_SCHEMA: dict[str, pl.DataType] = {
    "pair": pl.String(), "family": pl.String(), "kl_base": pl.Float64(), "kl_base_bigram": pl.Float64(),
    "kl_base_position": pl.Float64(), "kl_expert": pl.Float64(), "same_harness": pl.Boolean(),
    "at_risk": pl.Boolean(),
}


def _by_family(trajs: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    out: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        out[t.family].append(t)
    return out


def _family_row(pair: str, family: str, trained: list[Trajectory], base: list[Trajectory], expert: list[Trajectory],
                cfg: FitConfig) -> dict[str, object]:
    d = divergence(trained, base, cfg)
    kl_expert = divergence(trained, expert, cfg).total if expert else float("nan")
    same = {t.harness_id for t in trained} == {t.harness_id for t in base}
    return {"pair": pair, "family": family, "kl_base": d.total, "kl_base_bigram": d.bigram,
            "kl_base_position": d.position, "kl_expert": kl_expert, "same_harness": same,
            "at_risk": d.total > cfg.threshold_nats}


def _mean(values: list[float]) -> float:
    real = [v for v in values if v == v]
    return sum(real) / len(real) if real else float("nan")


def fit_table(by_pair: Mapping[str, Sequence[Trajectory]], base: str, expert: str | None = None,
              config: FitConfig | None = None) -> pl.DataFrame:
    """Per pair other than `base` (and `expert`) and family it shares with `base`: KL from base and expert.

    Row `overall` per pair = mean over its families; its `at_risk` is the adapter's verdict.
    """
    cfg = config or FitConfig()
    if base not in by_pair:
        raise ValueError(f"fit: base pair '{base}' is not among the pairs {sorted(by_pair)}")
    base_fam = _by_family(by_pair[base])
    expert_fam = _by_family(by_pair[expert]) if expert and expert in by_pair else {}
    rows: list[dict[str, object]] = []
    for pair, trajs in by_pair.items():
        if pair in (base, expert):
            continue
        fam_rows = [_family_row(pair, f, ts, base_fam[f], expert_fam.get(f, []), cfg)
                    for f, ts in sorted(_by_family(trajs).items()) if f in base_fam]
        if not fam_rows:
            continue
        overall = {k: _mean([float(r[k]) for r in fam_rows]) for k in ("kl_base", "kl_base_bigram", "kl_base_position", "kl_expert")}  # type: ignore[arg-type]
        rows += fam_rows + [{"pair": pair, "family": OVERALL, **overall,
                             "same_harness": all(bool(r["same_harness"]) for r in fam_rows),
                             "at_risk": overall["kl_base"] > cfg.threshold_nats}]
    return pl.DataFrame(rows, schema=FIT_SCHEMA)


def fit_markdown(table: pl.DataFrame, threshold: float) -> str:
    """The overall row per adapter, then the per-family rows."""
    if table.is_empty():
        return "_No trained pair to compare with the base student._\n"
    lines = ["| pair | family | KL vs base (bigram + position) | KL vs expert | same harness | fit |",
             "|---|---|---|---|---|---|"]
    ordered = table.sort(pl.col("family") != OVERALL, "pair", "family")
    for r in ordered.iter_rows(named=True):
        risk = f"**at risk** (> {threshold:g})" if r["at_risk"] else "ok"
        exp = "–" if r["kl_expert"] != r["kl_expert"] else f"{r['kl_expert']:.3f}"
        lines.append(f"| {r['pair']} | {r['family']} | {r['kl_base']:.3f} ({r['kl_base_bigram']:.3f} + "
                     f"{r['kl_base_position']:.3f}) | {exp} | {'yes' if r['same_harness'] else 'no'} | {risk} |")
    return "\n".join(lines) + "\n"


class FitEvidence(BaseModel):
    """Why `fit_alarm` raised (or did not raise) the flag: the figures the promotion gate shows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold_nats: float
    kl_base: float = Field(description="Overall KL(trained || base): the mean over the families both have.")
    kl_expert: float = Field(description="Overall KL(trained || expert); NaN without expert trajectories.")
    per_family: dict[str, float] = Field(description="Family -> KL(trained || base).")
    same_harness: bool = Field(description="Trained and base ran under the same harness ids (the comparison "
                                           "the threshold was calibrated for).")
    n_trained: int
    n_base: int
    reason: str


def fit_alarm(trained: Sequence[Trajectory], base: Sequence[Trajectory], expert: Sequence[Trajectory] = (),
              config: FitConfig | None = None) -> tuple[bool, FitEvidence]:
    """Is the trained student's fit with its harness at risk? (flag, evidence) for the round's promotion gate.

    flag = the overall KL of the trained student's planning-action distribution from the base student's (same
    harness) exceeds `config.threshold_nats` (calibration: docs/attribution.md, "Fit monitor").
    """
    cfg = config or FitConfig()
    if not trained or not base:
        raise ValueError("fit_alarm needs trained and base trajectories (got "
                         f"{len(trained)} trained, {len(base)} base)")
    table = fit_table({"trained": trained, "base": base, **({"expert": expert} if expert else {})}, "base",
                      "expert" if expert else None, cfg)
    if table.is_empty():
        raise ValueError("fit_alarm: the trained and base trajectories share no family")
    overall = table.filter(pl.col("family") == OVERALL).row(0, named=True)
    fams = {r["family"]: float(r["kl_base"]) for r in table.iter_rows(named=True) if r["family"] != OVERALL}
    flag = bool(overall["at_risk"])
    reason = (f"KL from the base student {overall['kl_base']:.3f} nats {'>' if flag else '<='} threshold "
              f"{cfg.threshold_nats:g} over {len(fams)} families"
              + ("" if overall["same_harness"] else "; NOTE: the harnesses differ, so the KL also measures them"))
    return flag, FitEvidence(threshold_nats=cfg.threshold_nats, kl_base=float(overall["kl_base"]),
                             kl_expert=float(overall["kl_expert"]), per_family=fams,
                             same_harness=bool(overall["same_harness"]), n_trained=len(trained), n_base=len(base),
                             reason=reason)
