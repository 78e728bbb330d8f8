"""The promotion gate's error rates, measured by simulation: how often it promotes a no-op candidate (the null
rate) and how often it promotes a candidate with a real gain (the power), for a given validation size.

    rates = gate_rates(GateSimulation(instances=30, eval_seeds=8, train_seeds=3), random.Random(0))
    rates.null_promoted, rates.power

One simulated gate: `instances` validation instances (the families' together), each with M_t's success chance
p_i ~ Beta(base_rate x concentration, (1 - base_rate) x concentration) (instances differ in difficulty); every
training seed k of the candidate succeeds with q_ik = p_i + g_k (1 - p_i), where g_k = 0 for a no-op and, under
the alternative, g_k = max(0, gain / (1 - base_rate) + N(0, seed_sd)) (the candidate fixes a share of each
instance's failures, so its mean gain is about `gain`; training seeds differ by `seed_sd`). Each of M_t and the
candidate's seeds is sampled `eval_seeds` times per instance, independently. The simulated rollouts go through
the gate's own functions (`analysis.gate.judge_candidates`, `promotion_rule` with the rule `gain` and no fit
flag), so what is measured is the rule the round runs.

`legacy` is the rule before it (kept here only to measure it): the best seed chosen on the units it is then
judged on, promoted when its mean is above M_t's and the CI's high end is not below 0.
"""

from __future__ import annotations

import random

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.gate import SeedChoice, judge_candidates, promotion_rule
from analysis.stats import paired_bootstrap

INCUMBENT = "M_t"


class GateSimulation(BaseModel):
    """The simulated validation set and the gate's settings (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instances: int = Field(default=30, ge=2, description="Validation instances judged (all families together).")
    eval_seeds: int = Field(default=1, ge=1, description="Sampling seeds per instance (round.gate.val_seeds).")
    train_seeds: int = Field(default=3, ge=1, description="Training seeds of the correction arm (lora.seeds).")
    base_rate: float = Field(default=0.24, gt=0, lt=1, description="M_t's mean validation success.")
    concentration: float = Field(default=2.0, gt=0, description="Beta concentration of the instances' difficulty "
                                 "(small: most instances always or never pass).")
    gain: float = Field(default=0.10, ge=0, lt=1, description="The candidate's true gain under the alternative.")
    seed_sd: float = Field(default=0.03, ge=0, description="Spread of the gain between training seeds.")
    seed_choice: SeedChoice = "average"
    draws: int = Field(default=400, ge=1, description="Simulated gates per condition.")
    n_boot: int = Field(default=1000, ge=100, description="Bootstrap draws per gate.")
    confidence: float = Field(default=0.95, gt=0.5, lt=1)


class GateRates(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    settings: GateSimulation
    null_promoted: float = Field(description="Share of no-op candidates the gate promoted.")
    power: float = Field(description="Share of candidates with the true gain the gate promoted.")
    legacy_null_promoted: float = Field(description="The same no-op draws under the rule before (module docstring).")
    mean_gain: float = Field(description="The alternative's mean simulated gain over the draws (q - p).")


def _beta(rng: random.Random, mean: float, concentration: float) -> float:
    return rng.betavariate(mean * concentration, (1 - mean) * concentration)


def simulate_frame(s: GateSimulation, rng: random.Random, gain: float) -> tuple[pl.DataFrame, float]:
    """One simulated validation set: rows (pair, family, instance_id, seed, passed); and its true mean gain."""
    shares = [0.0 if gain == 0 else max(0.0, gain / (1 - s.base_rate) + rng.gauss(0.0, s.seed_sd))
              for _ in range(s.train_seeds)]
    rows: list[tuple[str, str, str, int, bool]] = []
    true_gain = 0.0
    for i in range(s.instances):
        p = _beta(rng, s.base_rate, s.concentration)
        iid = f"sim/{i}"
        rows += [(INCUMBENT, "sim", iid, e, rng.random() < p) for e in range(s.eval_seeds)]
        for k, g in enumerate(shares):
            q = p + g * (1 - p)
            true_gain += (q - p) / (s.instances * s.train_seeds)
            rows += [(f"cand.s{k}", "sim", iid, e, rng.random() < q) for e in range(s.eval_seeds)]
    schema = {"pair": pl.String(), "family": pl.String(), "instance_id": pl.String(), "seed": pl.Int64(),
              "passed": pl.Boolean()}
    return pl.DataFrame(rows, schema=schema, orient="row"), true_gain


def promotes(frame: pl.DataFrame, s: GateSimulation, seed: int) -> bool:
    """The round's gate (rule `gain`, no fit flag) on one simulated validation set."""
    names = {k: f"cand.s{k}" for k in range(s.train_seeds)}
    ev = judge_candidates(frame, INCUMBENT, names, s.seed_choice, n_boot=s.n_boot, confidence=s.confidence, seed=seed)
    return promotion_rule(ev.diff, ev.candidate, ev.incumbent, fit_flag=False, fit_reason="simulated").promoted


def legacy_promotes(frame: pl.DataFrame, s: GateSimulation, seed: int) -> bool:
    """The rule before: the best seed on all units, promoted when its mean is above M_t's and not significantly
    below it."""
    means = {k: float(frame.filter(pl.col("pair") == f"cand.s{k}")["passed"].mean() or 0.0)
             for k in range(s.train_seeds)}
    best = max(sorted(means), key=lambda k: (means[k], -k))
    inc = float(frame.filter(pl.col("pair") == INCUMBENT)["passed"].mean() or 0.0)
    diff = paired_bootstrap(frame, f"cand.s{best}", INCUMBENT, n_boot=s.n_boot, confidence=s.confidence, seed=seed)
    return means[best] > inc and not diff.ci_high < 0


def gate_rates(s: GateSimulation, rng: random.Random) -> GateRates:
    """`s.draws` no-op gates and `s.draws` gates with the gain, each from `rng` (seeded by the caller)."""
    null = legacy = power = 0
    gains = 0.0
    for d in range(s.draws):
        frame, _ = simulate_frame(s, rng, 0.0)
        null += promotes(frame, s, seed=d)
        legacy += legacy_promotes(frame, s, seed=d)
        frame, g = simulate_frame(s, rng, s.gain)
        gains += g
        power += promotes(frame, s, seed=d)
    return GateRates(settings=s, null_promoted=null / s.draws, power=power / s.draws,
                     legacy_null_promoted=legacy / s.draws, mean_gain=gains / s.draws)
