"""The harness-reading recipe (M1): demonstrations under generated harnesses, weighted minimal pairs, and the
probe that scores how much a model's actions depend on its harness.

Where M0 (training/micro/build.py with `reading` unset) learned from a mixture of a few harnesses whose
knowledge items were always worded as the card words them, and one demonstration carried its one
harness-dependent token among thousands, this recipe:
1. demonstrates every episode under a harness of the generator (training/micro/prompts.py: random items in
   random wordings and order, distractor sections, hooks and context edits) and tells the show-your-work policy
   which items it states (an unstated item is missed with probability `miss[family][item]`);
2. adds fresh-value copies: every rename with fresh names, anomaly_detection's demonstrations with fresh sensor
   ids (so the ids are copied, not guessed from the few prefixes);
3. finds each demonstration's decision points (training/micro/decisions.py) and trains minimal pairs on them:
   one batch = the same prefix under a harness stating the item and under the same harness without it, the
   turn's differing tokens weighted `decision_weight` times;
4. scores the model with `probe`: on validation instances (never trained on), the probability it puts on the
   applied action under h0 and under hK, per family.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# family -> item -> probability that the policy misses the item when the harness does not state it. Lower
# than M0's 0.8 where a family's h0 success would otherwise sit near 0 (docs/students.md).
M1_MISS: dict[str, dict[str, float]] = {
    "code_refactor": {"update_every_reference": 0.7, "run_tests_before_finishing": 0.75},
    "anomaly_detection": {"bounds_are_normal": 0.65},
    "payroll_audit": {"break_deduction_over_six_hours": 0.65},
}
PROBE_ITEM = {"code_refactor": "update_every_reference", "anomaly_detection": "bounds_are_normal",
              "payroll_audit": "break_deduction_over_six_hours"}


class ReadingSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    miss: dict[str, dict[str, float]] = Field(default_factory=lambda: {f: dict(m) for f, m in M1_MISS.items()})
    p_card: float = Field(default=0.35, ge=0, le=1,
                          description="share of stated items worded as the card words them")
    easy_only: tuple[str, ...] = Field(default=("anomaly_detection",),
                                       description="families demonstrated on easy instances only")
    id_copies: int = Field(default=1, ge=0, description="fresh-sensor-id copies of each anomaly_detection demonstration")
    pairs: int = Field(default=1200, ge=0, description="minimal-pair batches (one training step each)")
    phase_pairs: int = Field(default=0, ge=0, description="of them, trained first in a phase of their own (after "
                                                         "the copy phase; the rest are shuffled with the demonstrations)")
    phase_demos: int = Field(default=0, ge=0, description="demonstrations shuffled into that phase (seeded sample)")
    decision_weight: float = Field(default=8.0, ge=1, description="loss weight of a decision's differing tokens")
    records: float = Field(default=0.3, ge=0, le=1, description="share of record-row segments in copy sequences")
    probe_instances: int = Field(default=10, ge=1, description="validation instances per family the probe reads")
    blocks: tuple[str, ...] = Field(
        default=(), description="reading blocks trained after the main phase, in order: 'FAMILY:STEPS' (a share "
                                "`block_pairs` of the steps are that family's minimal pairs, the rest "
                                "demonstrations of every family) or 'mixed:STEPS' (every family's pairs)")
    block_pairs: float = Field(default=0.75, gt=0, le=1, description="share of a block's steps that are pairs")
    block_lr: float = Field(default=1e-3, gt=0, description="peak learning rate of each block (20-step warmup, "
                                                            "cosine to half)")

    @field_validator("blocks")
    @classmethod
    def _blocks(cls, blocks: tuple[str, ...]) -> tuple[str, ...]:
        for block in blocks:
            name, _, steps = block.partition(":")
            if name not in (*PROBE_ITEM, "mixed") or not steps.isdigit() or int(steps) < 1:
                raise ValueError(f"reading block {block!r}: write FAMILY:STEPS or mixed:STEPS "
                                 f"(families: {', '.join(PROBE_ITEM)})")
        return blocks

    def parsed_blocks(self) -> list[tuple[str, int]]:
        """(family or 'mixed', steps) of each block."""
        return [(name, int(steps)) for name, _, steps in (b.partition(":") for b in self.blocks)]


def augmentable(trajectory: Any) -> tuple[list[str], Any] | None:
    """(values to replace, their fresh-value drawer) of a demonstration whose values come from a small pool."""
    from tasks.code_refactor.show_work import rename_request
    from tasks.code_refactor.show_work_kinds import kind_values
    from training.micro.augment import fresh_code, fresh_like, fresh_name

    inst = trajectory.instance
    if inst.family == "code_refactor":
        names = rename_request(inst)
        if names:
            return list(names), fresh_name
        values = kind_values(inst.instruction)  # the names a refactoring kind's program copies
        return (values, [fresh_like(v) for v in values]) if values else None
    if inst.family == "anomaly_detection":
        ids = [s["id"] for s in inst.payload["sensors"]]
        return ids, fresh_code(ids[0])
    return None


def id_copies(pairs: Sequence[tuple[str, Any]], k: int, rng: random.Random) -> list[tuple[str, Any]]:
    """`k` fresh-sensor-id copies of every anomaly_detection show-your-work demonstration."""
    from training.micro.augment import substituted_copies

    out = []
    for label, traj in pairs if k else []:
        found = augmentable(traj) if traj.instance.family == "anomaly_detection" else None
        if found and ":showwork:" in traj.tag:
            out.extend((label, t) for t in substituted_copies(traj, found[0], found[1], k, rng, "reid"))
    return out


async def episode(family: str, index: int, harness: Any, knows: frozenset[str], seed: int, tag: str,
                  options: dict[str, Any] | None = None) -> Any:
    """One show-your-work demonstration of pretrain/val instance `index` under `harness`, applying `knows`."""
    import tasks
    from agents.rollout import run_episode
    from training.micro.policies import ShowWorkClient

    fam = tasks.get(family)
    client = ShowWorkClient(family, options, knows=knows)
    env = fam.make_env(fam.generate(index))
    try:
        with env:
            return await run_episode(client, harness, env, seed=seed, tag=tag)
    finally:
        client.close()


def options(family: str, programs: Mapping[str, str]) -> dict[str, Any]:
    """The family's show-your-work options: `programs` is family -> program (MicroSpec.programs())."""
    return {"program": programs[family]} if family in programs else {}


def draw_knows(family: str, stated: frozenset[str], spec: ReadingSpec, rng: random.Random) -> frozenset[str]:
    from training.micro.policies import applied

    return applied(stated, spec.miss.get(family, {}), rng)


def run_all(jobs: list[Any], concurrency: int = 4, desc: str = "", progress: bool = True) -> list[Any]:
    """Run coroutines with at most `concurrency` at once, in order, with a progress bar."""
    from tqdm import tqdm

    from agents.providers.registry import close_provider_environments

    async def go() -> list[Any]:
        sem = asyncio.Semaphore(concurrency)
        bar = tqdm(total=len(jobs), desc=desc, unit="episode", disable=not progress, dynamic_ncols=True)

        async def one(job: Any) -> Any:
            async with sem:
                out = await job
            bar.update(1)
            return out
        try:
            return list(await asyncio.gather(*(one(j) for j in jobs)))
        finally:
            bar.close()
    try:
        return asyncio.run(go())
    finally:
        close_provider_environments()


def demonstrations(families: Sequence[str], indices: dict[str, list[int]], spec: ReadingSpec, seed: int,
                   programs: Mapping[str, str], rename_copies: int = 1,
                   progress: bool = True) -> list[tuple[str, Any, frozenset[str]]]:
    """(label, Trajectory, applied items) of every demonstration, each under its own generated harness, in a
    fixed order (seeded), then the fresh-name and fresh-id copies (their applied items are the original's)."""
    from training.micro.augment import substituted_copies
    from training.micro.prompts import generate

    rng = random.Random(f"reading:{seed}")
    jobs, applied = [], []
    for family in families:
        for index in indices[family]:
            harness, stated = generate(family, rng, p_card=spec.p_card, extras=True)
            knows = draw_knows(family, stated, spec, rng)
            applied.append(knows)
            jobs.append(episode(family, index, harness, knows, seed * 1_000_003 + index,
                                "micro-demo:showwork:gen", options(family, programs)))
    trajs = run_all(jobs, desc="micro demonstrations", progress=progress)
    out = [("gen", t, k) for t, k in zip(trajs, applied)]
    copies_rng = random.Random(f"rename:{seed}")  # renames and the other refactoring kinds ("kinds" program)
    for _, traj, knows in list(out):
        found = augmentable(traj) if traj.instance.family == "code_refactor" else None
        if found:
            out.extend(("gen", t, knows) for t in substituted_copies(traj, *found, rename_copies, copies_rng,
                                                                      "renamed"))
    id_rng = random.Random(f"reid:{seed}")
    for _, traj, knows in list(out[:len(trajs)]):
        out.extend(("gen", t, knows) for _, t in id_copies([("gen", traj)], spec.id_copies, id_rng))
    return out


def _fresh_point(point: Any, trajectory: Any, rng: random.Random) -> Any:
    """The decision point with the demonstration's pool values (names, sensor ids) replaced by fresh ones."""
    from dataclasses import replace

    from training.micro.augment import substitute

    found = augmentable(trajectory)
    if not found:
        return point
    messages, _ = substitute([*point.prefix, point.applied, point.missed], found[0], found[1], rng)
    return replace(point, prefix=messages[:-2], applied=messages[-2], missed=messages[-1])


def decision_pool(demos: Sequence[tuple[str, Any, frozenset[str]]], spec: ReadingSpec,
                  programs: Mapping[str, str]) -> list[tuple[Any, Any, frozenset[str]]]:
    """(decision point, its demonstration, the items it applied) of every original demonstration (not the
    fresh-value copies), in the demonstrations' order: what `pair_batches` draws from."""
    from training.micro.decisions import decision_points

    points = []
    for _, traj, knows in demos:
        if traj.tag.endswith((":renamed", ":reid")):
            continue
        family = traj.instance.family
        items = sorted(spec.miss.get(family, {}))
        points += [(p, traj, knows) for p in decision_points(traj, knows, items, options(family, programs))]
    return points


def pair_batches(pool: Sequence[tuple[Any, Any, frozenset[str]]], tokenizer: Any, spec: ReadingSpec, seed: int,
                 progress: bool = True, family: str | None = None, n: int | None = None) -> list[Any]:
    """`n` (default `spec.pairs`) minimal-pair batches over the decision points of `pool` (`decision_pool`; of
    `family` only, when given), the points visited in seeded shuffled rounds; the pool values of each pair are
    replaced by fresh ones."""
    from tqdm import tqdm

    from training.micro.decisions import pair_batch
    from training.micro.prompts import minimal_pair

    points, n = [x for x in pool if family in (None, x[0].family)], spec.pairs if n is None else n
    if not points or not n:
        return []
    rng = random.Random(f"pairs:{seed}" if family is None else f"pairs:{seed}:{family}")
    plan: list[Any] = []
    while len(plan) < n:
        plan += rng.sample(points, len(points))
    out = []
    for point, traj, knows in tqdm(plan[:n], desc="minimal pairs", unit="pair", disable=not progress,
                                   dynamic_ncols=True):
        forced = {k: False for k in spec.miss[point.family] if k != point.item and k not in knows}
        stating, not_stating = minimal_pair(point.family, point.item, rng, forced=forced, p_card=spec.p_card)
        out.append(pair_batch(tokenizer, _fresh_point(point, traj, rng), stating, not_stating,
                              spec.miss[point.family][point.item], spec.decision_weight, tokenizer.pad_token_id))
    return out


def probe_points(families: Sequence[str], spec: ReadingSpec, programs: Mapping[str, str],
                 progress: bool = False) -> list[Any]:
    """The probe's decision points: each family's first `spec.probe_instances` validation instances its policy
    covers (easy ones only where the recipe demonstrates only those), the family's probe item missed."""
    import tasks
    from harness.baseline import baseline
    from training.micro.decisions import decision_points
    from training.micro.policies import has_policy

    jobs, items = [], []
    for family in families:
        if family not in PROBE_ITEM:
            continue
        fam = tasks.get(family)
        chosen = [i for i in range(20, 40) if has_policy(fam.generate(i), programs.get(family, ""))
                  and (family not in spec.easy_only or fam.generate(i).difficulty == "easy")]
        for index in chosen[:spec.probe_instances]:
            jobs.append(episode(family, index, baseline(family), frozenset(), index, "micro-probe",
                                options(family, programs)))
            items.append(PROBE_ITEM[family])
    trajs = run_all(jobs, desc="probe sources", progress=progress)
    points = []
    for traj, item in zip(trajs, items):
        points += decision_points(traj, frozenset(), [item], options(traj.instance.family, programs))
    return points


def probe(model: Any, tokenizer: Any, points: Sequence[Any], harnesses: dict[str, Any]) -> dict[str, dict[str, float]]:
    """family -> harness name -> mean probability of the applied action (teacher-forced, over the probe's
    points); `harnesses`: name -> function family -> Harness. Adds `dependence` = hK - h0 when both are named."""
    from training.micro.decisions import apply_probability

    was_training = model.training
    model.eval()
    out: dict[str, dict[str, float]] = {}
    for family in sorted({p.family for p in points}):
        mine = [p for p in points if p.family == family]
        out[family] = {name: round(sum(apply_probability(model, tokenizer, p, make(family)) for p in mine)
                                   / len(mine), 4) for name, make in harnesses.items()}
        if "hK" in out[family] and "h0" in out[family]:
            out[family]["dependence"] = round(out[family]["hK"] - out[family]["h0"], 4)
    model.train(was_training)
    return out
