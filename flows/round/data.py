"""The round's training data: rollouts on the train split, then one set per arm (never a val or test row).

    imit_h0  the expert's successes under h0 + M_t's own successes under h0       (mask: every assistant turn)
    imit     the expert's successes under h*_t + M_t's own successes under h*_t  (mask: every assistant turn)
    corr     M_t's failures under h*_t, t* localized and rewritten by the expert, selected by the verifier
             (flows/round/correct.py), mixed with M_t's own successes under h*_t, boundary instances first
             (correction/mix.py)                                                  (mask: the marked turns)
    self     the control: exactly the own-success rows of the corr set (same rows, same count, same training
             settings), without its corrections; corr - self is what the corrections themselves add

Every row is marked trained turn by turn (`training.dataset.TRAIN_TURN_TRIGGER`), so all three arms build their
datasets with `mask="turns"`. A set is stored as `trajectories/sets/<arm>/<key>.parquet` with its card in
`datasets/sets/<arm>-<key>.json`; the key hashes its sources and the mix, so a resumed round finds it.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict, Field

from agents.budget import SpendCap
from agents.records import ModelRole, Trajectory
from correction.arm_set import correction_arm_items
from correction.imitation import TAG_SELF, build_imitation_set
from correction.leakage import check_no_leakage
from correction.mix import MixConfig, mix, pass_rates
from correction.records import correction_yield
from flows.round.correct import CorrectionConfig, correct_run, pool_rollouts
from flows.rollouts import rollout_pool
from flows.round.budget import spent_usd
from flows.plan import harness_for
from flows.round.context import PairPlan, RoundContext
from flows.round.eval import EvalRecord, evaluate_pairs, trajectories_of
from flows.store import atomic_write_text, content_key
from harness.program import Harness


class ArmSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arm: str
    harness: str = Field(description="'baseline' or the h*_t directory the rows ran under.")
    key: str = ""
    rows: int = 0
    card: dict = Field(default_factory=dict)
    reason: str = Field(default="", description="Why the set is empty, when it is.")


class ArmDataRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollouts: dict[str, EvalRecord]
    sets: dict[str, ArmSet]


def _data_pairs(ctx: RoundContext, h_star: str) -> list[PairPlan]:
    arms, pairs = set(ctx.r.arms), []
    if "imit_h0" in arms:
        pairs += [PairPlan(name="data.expert.h0", role=ctx.expert(), harness="baseline", label="expert h0 (train)"),
                  PairPlan(name="data.M_t.h0", role=ctx.student(), harness="baseline", label="M_t h0 (train)")]
    if arms & {"imit", "corr"}:
        pairs.append(PairPlan(name="data.M_t.hstar", role=ctx.student(), harness=h_star, label="M_t h* (train)"))
    if "imit" in arms:
        pairs.append(PairPlan(name="data.expert.hstar", role=ctx.expert(), harness=h_star, label="expert h* (train)"))
    return pairs


def _collect_data(ctx: RoundContext, h_star: str) -> dict[str, EvalRecord]:
    d = ctx.r.data
    out: dict[str, EvalRecord] = {}
    pairs = _data_pairs(ctx, h_star)
    experts = [p for p in pairs if ".expert." in p.name]
    students = [p for p in pairs if ".M_t." in p.name]
    if experts:
        out.update(evaluate_pairs(ctx, experts, "train", d.instances, d.expert_seeds, tag="data"))
    if students:
        out.update(evaluate_pairs(ctx, students, "train", d.instances, d.student_samples, tag="data"))
    return out


def _seed(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def _store_set(ctx: RoundContext, arm: str, harness: str, key: str, rows: list[Trajectory], card: dict) -> ArmSet:
    rows = check_no_leakage(rows, f"{arm} set of round {ctx.t}")
    ctx.store.write_trajectories(f"sets/{arm}", key, rows, harnesses=[])  # rows keep their rollouts' harness ids
    atomic_write_text(ctx.store.path("datasets", "sets", f"{arm}-{key}.json"), json.dumps(card, indent=2, default=str))
    return ArmSet(arm=arm, harness=harness, key=key, rows=len(rows), card=card)


def _found(ctx: RoundContext, arm: str, harness: str, key: str) -> ArmSet | None:
    card = ctx.store.root / "datasets" / "sets" / f"{arm}-{key}.json"
    if not (ctx.store.has(f"sets/{arm}", key) and card.exists()):
        return None
    data = json.loads(card.read_text())
    return ArmSet(arm=arm, harness=harness, key=key, rows=int(data.get("rows", 0)), card=data)


def imitation_set(ctx: RoundContext, arm: str, harness: str, expert: list[Trajectory],
                  own: list[Trajectory]) -> ArmSet:
    """correction/imitation.py on the stored rollouts: expert successes + own successes under one harness."""
    mixcfg = MixConfig(corrections=0, self_successes=ctx.r.data.self_successes, imitation=None)
    key = content_key(arm, sorted(t.id for t in expert), sorted(t.id for t in own), mixcfg.model_dump())
    found = _found(ctx, arm, harness, key)
    if found is not None:
        return found
    if not any(t.verdict.score >= 1.0 for t in expert):
        return ArmSet(arm=arm, harness=harness, reason=f"none of the expert's {len(expert)} train rollouts passed")
    built = build_imitation_set(expert, own, lambda fam: harness_for(harness, fam, ctx.base), mixcfg,
                                random.Random(_seed(key)))
    card = {**built.card.model_dump(mode="json", exclude={"sources"}), "rows": len(built.trajectories)}
    return _store_set(ctx, arm, harness, key, built.trajectories, card)


def _role(ctx: RoundContext, spec: str) -> ModelRole:
    """A role name under `models`, else a model string."""
    return ctx.config.models.get(spec) or ModelRole(model=spec)


def correction_config(ctx: RoundContext) -> CorrectionConfig:
    c = ctx.r.correction
    return CorrectionConfig(student=ctx.student(), expert=ctx.correction_expert(), locator_expert=_role(ctx, c.locator_expert),
                            locator=c.locator, selector=c.selector, n=c.n, replays=c.replays,
                            extra_turns=c.extra_turns, mode=c.mode, concurrency=c.concurrency, suffix=c.suffix,
                            loss_on=c.loss_on, keep=c.keep,
                            locator_role=ctx.config.models.get("locator"), judge_role=ctx.config.models.get("judge"))


def correction_set(ctx: RoundContext, h_star: str, samples: list[Trajectory]) -> ArmSet:
    """Correct M_t's failing train samples under h*_t, then mix corrections with its own successes."""
    harnesses: dict[str, Harness] = {h.id: h for h in (harness_for(h_star, f, ctx.base) for f in ctx.families())}
    cfg = correction_config(ctx)
    run_root = ctx.store.root.parent.parent
    cap = SpendCap(ctx.r.budget_usd, spent_usd(run_root), hint="Raise round.budget_usd and continue with: "
                   f"coevo run --resume {run_root.name} --config FILE")
    with rollout_pool(ctx.config) as pool, ThreadPoolExecutor(cfg.concurrency, "correction") as threads:
        result = correct_run(ctx.store, samples, harnesses, cfg, run=pool_rollouts(pool, threads), cap=cap)
    items = correction_arm_items(result.corrections, result.corrected, samples)
    mixcfg = MixConfig(corrections=ctx.r.data.corrections, self_successes=ctx.r.data.self_successes)
    key = content_key("corr", sorted(i.value.id for i in items), mixcfg.model_dump())
    found = _found(ctx, "corr", h_star, key)
    if found is not None:
        return found
    drawn = [(t.family, t.passed) for t in samples]
    if not any(i.kind == "correction" for i in items):
        return ArmSet(arm="corr", harness=h_star, card={**result.card, "yield": correction_yield(
            drawn, result.corrections, {})}, reason=f"no correction kept out of {result.card.get('sources', 0)} "
            f"failing rollouts (statuses: {result.card.get('per_family')})")
    mixed = mix(items, pass_rates(samples), mixcfg, random.Random(_seed(key)))
    rows = [i.value for i in mixed.items]
    in_set = Counter(i.value.family for i in mixed.items if i.kind == "correction")
    card = {"correction_card": result.card, "mix": mixed.card.model_dump(mode="json"), "rows": len(rows),
            "episodes_run": result.calls, "yield": correction_yield(drawn, result.corrections, in_set)}
    return _store_set(ctx, "corr", h_star, key, rows, card)


def self_set(ctx: RoundContext, h_star: str, corr: ArmSet) -> ArmSet:
    """The `self` arm: the corr set's own-success rows alone (rejection-sampling fine-tuning, the control)."""
    if not corr.rows:
        return ArmSet(arm="self", harness=h_star, reason=f"the correction arm has no set ({corr.reason or 'empty'}): "
                      "no own-success rows to match")
    key = content_key("self", corr.key)
    found = _found(ctx, "self", h_star, key)
    if found is not None:
        return found
    rows = [t for t in read_set(ctx, corr) if t.tag == TAG_SELF]
    if not rows:
        return ArmSet(arm="self", harness=h_star, reason="the correction arm's set holds no own success")
    card = {"rows": len(rows), "from": f"corr-{corr.key}",
            "per_family": dict(sorted(Counter(t.family for t in rows).items()))}
    return _store_set(ctx, "self", h_star, key, rows, card)


def build_arm_data(ctx: RoundContext, h_star: str) -> ArmDataRecord:
    """The train-split rollouts (resumed per rollout), then the set of every configured arm."""
    recs = _collect_data(ctx, h_star)
    read = {name: trajectories_of(ctx.store, [rec]) for name, rec in recs.items()}
    sets: dict[str, ArmSet] = {}
    if "imit_h0" in ctx.r.arms:
        sets["imit_h0"] = imitation_set(ctx, "imit_h0", "baseline", read["data.expert.h0"], read["data.M_t.h0"])
    if "imit" in ctx.r.arms:
        sets["imit"] = imitation_set(ctx, "imit", h_star, read["data.expert.hstar"], read["data.M_t.hstar"])
    if "corr" in ctx.r.arms:
        sets["corr"] = correction_set(ctx, h_star, read["data.M_t.hstar"])
    if "self" in ctx.r.arms:
        sets["self"] = self_set(ctx, h_star, sets["corr"])
    return ArmDataRecord(rollouts=recs, sets=sets)


def read_set(ctx: RoundContext, s: ArmSet) -> list[Trajectory]:
    return ctx.store.read_chunks(f"sets/{s.arm}", [s.key])


__all__ = ["ArmDataRecord", "ArmSet", "build_arm_data", "read_set"]
