"""Rollouts of a round's pairs: one chunk per rollout (a resumed stage re-runs only unfinished rollouts), all
pairs of a stage as one parallel batch on the Ray pool, then one small `EvalRecord` per pair.

    records = evaluate_pairs(ctx, pairs, split="test", n_instances=5, seeds=3, tag="eval")

Stored under the round's store as `trajectories/eval/<pair name>/<chunk key>.parquet`; a chunk key hashes the
model's sampling options, harness id, instance, seed, limits and tag (flows/plan.py), so a changed input is a
new rollout and a finished one is read back.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from flows.rollouts import CollectSummary, retry_transient, run_chunks
from flows.evolution_pool import search_key, search_stage
from flows.plan import Chunk, RolloutSpec, plan
from flows.round.context import PairPlan, RoundContext
from flows.store import RunStore, content_key
from tasks.records import Split


class EvalRecord(BaseModel):
    """One evaluated pair: where its rollouts are and what they scored (success = verifier score 1.0)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    model: str
    harness: str
    split: str
    stage: str
    chunk_keys: list[str]
    rollouts: int
    rollouts_run: int = Field(description="Rollouts run by this call (0 when every one was stored).")
    model_calls: int
    success: float
    cost_usd: float


def per_rollout(chunks: list[Chunk]) -> list[Chunk]:
    """Every (family, seed) chunk split into one chunk per rollout (instance ids hold '/', so keys are hashed)."""
    return [Chunk(pair=c.pair, family=c.family, seed=c.seed, stage=c.stage, jobs=[j],
                  key=f"{c.family}-s{c.seed}-{content_key(c.key, j.instance.id)}") for c in chunks for j in c.jobs]


def pair_chunks(ctx: RoundContext, pair: PairPlan, split: Split, n_instances: int | None, seeds: int,
                tag: str, skip: int = 0) -> list[Chunk]:
    spec = RolloutSpec(name=pair.name, model=pair.role, harness=pair.harness, families=ctx.families(), split=split,
                       n_instances=n_instances, seeds=seeds, limits=ctx.config.limits, tag=tag,
                       stage=f"eval/{pair.name}", tool_choice=pair.tool_choice, skip=skip)
    return per_rollout(plan(spec, ctx.base))


@task(name="collect", retries=2, retry_delay_seconds=[5, 15], retry_condition_fn=retry_transient, cache_policy=NONE)
def collect(ctx_config: Any, run_root: str, round_id: str, chunks: list[Chunk], label: str) -> CollectSummary:
    """Run the unfinished rollouts (retried on timeouts and lost actors only)."""
    store = RunStore.open_existing(run_root, round_id)
    return run_chunks(ctx_config, store, chunks, label)


def evaluate_pairs(ctx: RoundContext, pairs: list[PairPlan], split: Split, n_instances: int | None, seeds: int,
                   tag: str = "eval", skip: int = 0) -> dict[str, EvalRecord]:
    """Every pair's rollouts (one batch), then a record per pair read back from the store; the instances are the
    first `n_instances` of the split after `skip`."""
    planned = {p.name: pair_chunks(ctx, p, split, n_instances, seeds, tag, skip) for p in pairs}
    primary: dict[str, Chunk] = {}  # job key -> the chunk that runs it (two pairs can share a job: h* == h0)
    for c in (c for cs in planned.values() for c in cs):
        primary.setdefault(c.jobs[0].key, c)
    run_id = ctx.store.root.parent.parent.name  # progress artifacts are keyed by run, round and pairs
    label = f"{run_id}-r{ctx.t}-" + "+".join(p.name for p in pairs)[:80]
    reused = reuse_earlier(ctx.store, list(primary.values()))
    if reused:
        get_run_logger().info("%s: %d rollout(s) reused from earlier stages of this round (same job key)", label,
                              reused)
    from_search = reuse_search(ctx.store, list(primary.values()))
    if from_search:
        get_run_logger().info("%s: %d rollout(s) reused from this round's harness search (same instance, harness, "
                              "model and sampling, seed, limits)", label, from_search)
    summary = collect(ctx.config, str(ctx.store.root.parent), ctx.store.run_id, list(primary.values()), label)
    _copy_shared(ctx.store, planned, primary)
    out = {}
    for p in pairs:
        chunks = planned[p.name]
        frame = ctx.store.chunk_frame(f"eval/{p.name}", [c.key for c in chunks])
        if frame.height != len(chunks):
            raise RuntimeError(f"{p.name}: store holds {frame.height} rollouts, expected {len(chunks)}")
        out[p.name] = EvalRecord(
            name=p.name, label=p.label, model=p.role.model, harness=p.harness, split=split, stage=f"eval/{p.name}",
            chunk_keys=[c.key for c in chunks], rollouts=frame.height, rollouts_run=0, model_calls=0,
            success=float(frame["passed"].mean() or 0.0), cost_usd=float(frame["cost_usd"].sum() or 0.0))
    _split_counts(out, summary)
    return out


def reuse_earlier(store: RunStore, chunks: list[Chunk]) -> int:
    """Copy into place every chunk not yet stored whose rollout an earlier stage of the round already ran under
    another pair's name (a chunk key hashes the job: model and sampling options, harness, instance, seed,
    limits, tag; e.g. M_t on h* when the search kept h0). Returns how many rollouts were copied."""
    root = store.root / "trajectories" / "eval"
    stages = [f"eval/{d.name}" for d in sorted(root.iterdir())] if root.is_dir() else []
    copied = 0
    for c in chunks:
        if store.has(c.stage, c.key):
            continue
        src = next((st for st in stages if st != c.stage and store.has(st, c.key)), None)
        if src is not None:
            store.write_trajectories(c.stage, c.key, store.read_chunks(src, [c.key]), harnesses=[c.jobs[0].harness])
            copied += len(c.jobs)
    return copied


INFRA_FAILURES = ("model_error", "error")  # stop reasons of a rollout the model never answered (not reused)


def reuse_search(store: RunStore, chunks: list[Chunk]) -> int:
    """Copy into place every one-rollout chunk not yet stored whose rollout the round's harness search already ran
    (`flows.evolution_pool.search_key`: the same instance, harness, model and sampling, seed, limits and tool
    choice; e.g. the gate's M_t on h* on the validation split, which the search evaluated h* on). The copy takes
    the chunk's job key and tag; a rollout lost to the infrastructure (`INFRA_FAILURES`) is run again instead.
    Returns how many rollouts were copied."""
    copied = 0
    for c in chunks:
        if len(c.jobs) != 1 or c.jobs[0].prefix is not None or store.has(c.stage, c.key):
            continue
        job = c.jobs[0]
        src, key = search_stage(job.instance.family), search_key(job)
        if not store.has(src, key):
            continue
        (traj,) = store.read_chunks(src, [key])
        if traj.stop_reason in INFRA_FAILURES:  # lost to the infrastructure: run it again rather than copy the loss
            continue
        store.write_trajectories(c.stage, c.key, [traj.model_copy(update={"id": job.key, "tag": job.tag})],
                                 harnesses=[job.harness])
        copied += 1
    return copied


def _copy_shared(store: RunStore, planned: dict[str, list[Chunk]], primary: dict[str, Chunk]) -> None:
    """A chunk whose job another pair ran gets that rollout (same job key: same model, harness, instance, seed)."""
    for chunks in planned.values():
        for c in chunks:
            src = primary[c.jobs[0].key]
            if src is not c and not store.has(c.stage, c.key):
                store.write_trajectories(c.stage, c.key, store.read_chunks(src.stage, [src.key]),
                                         harnesses=[c.jobs[0].harness])


def _split_counts(out: dict[str, EvalRecord], summary: CollectSummary) -> None:
    """The batch's run counts, attributed to its pairs in proportion to their size (exact when 0 or one pair)."""
    total = sum(r.rollouts for r in out.values()) or 1
    for rec in out.values():
        rec.rollouts_run = round(summary.rollouts_run * rec.rollouts / total)
        rec.model_calls = round(summary.model_calls * rec.rollouts / total)


def frame_of(store: RunStore, recs: list[EvalRecord]) -> pl.DataFrame:
    """The rollouts of these pairs with a `pair` column (= the record's name)."""
    return pl.concat([store.chunk_frame(r.stage, r.chunk_keys).with_columns(pl.lit(r.name).alias("pair")) for r in recs])


def trajectories_of(store: RunStore, recs: list[EvalRecord]) -> list[Trajectory]:
    return [t for r in recs for t in store.read_chunks(r.stage, r.chunk_keys)]
