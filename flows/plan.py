"""The rollout plan: which jobs a (model, harness) pair runs, grouped into resumable chunks.

One planning path for every caller: a `RolloutSpec` (model, harness, families, split, N instances, seeds,
limits, tag, tool choice) -> chunks of `RolloutJob`s. A round's evaluation stages make one spec per pair
(flows/round/eval.py `pair_chunks`, then one chunk per rollout); `coevo rollout` makes one from its options.

A chunk is (pair, family, seed): its trajectories are written together as one Parquet file whose name
carries a content key of everything that changes the result (model and sampling options, harness id,
instance ids, seed, limits, tag, tool choice). A re-run finds the file and skips the chunk; change any
of those and the key changes, so stale work is never reused. The server URL is not part of the key: the
same model behind another port gives the same rollouts.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import tasks
from agents.jobs import Limits, RolloutJob
from agents.records import ModelRole, ToolChoice
from flows.config import RunConfig, family_role
from flows.store import content_key
from harness import Harness, baseline
from tasks.records import Split

EVAL_TAG = "eval"


class Chunk(BaseModel):
    """One resumable unit: every instance of one family under one seed, for one pair."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pair: str
    family: str
    seed: int
    stage: str
    key: str
    jobs: list[RolloutJob]


class RolloutSpec(BaseModel):
    """What one (model, harness) pair rolls out: the first N instances of a split per family (after `skip`),
    seeds 0..S-1."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The pair's name; its chunks are stored under `evaluate/<name>` in a run.")
    model: ModelRole = Field(description="The model; '{family}' in its string is filled per family.")
    harness: str = Field(default="baseline", description="'baseline' (h0 per family) or a harness file.")
    families: list[str] = Field(min_length=1)
    split: Split
    n_instances: int | None = Field(gt=0, description="First N of the split per family (after `skip`); None = all.")
    skip: int = Field(default=0, ge=0, description="Instances skipped at the split's start (the promotion gate's "
                      "val instances come after the search's).")
    seeds: int = Field(gt=0, description="Seeds 0..S-1; each instance runs once per seed.")
    limits: Limits = Field(default_factory=Limits)
    tag: str = EVAL_TAG
    tool_choice: ToolChoice | None = None
    stage: str | None = Field(default=None, description="Where its chunks are stored; None = `evaluate/<name>`.")

    def role(self, family: str) -> ModelRole:
        return family_role(self.model, family)


def model_signature(role: ModelRole) -> dict[str, object]:
    """What about a role changes its rollouts (not where it is served, nor timeouts and retries)."""
    return role.model_dump(include={"model", "temperature", "top_p", "max_tokens", "extra_body", "strict_tools"})


def stage_name(pair_name: str) -> str:
    """Where a pair's chunks are stored in a run (`trajectories/evaluate/<pair>/`)."""
    return f"evaluate/{pair_name}"


def harness_for(spec: str, family: str, repo_root: Path) -> Harness:
    """'baseline' (h0), a harness file (every family), or a directory of `<family>.yaml` (one h* per family)."""
    if spec == "baseline":
        return baseline(family)
    path = repo_root / spec
    return Harness.load(path / f"{family}.yaml" if path.is_dir() else path)


def plan(spec: RolloutSpec, repo_root: Path) -> list[Chunk]:
    """One chunk per (family, seed), in that order; a chunk's key hashes everything that changes its rollouts."""
    chunks = []
    for family in spec.families:
        insts = tasks.instances(family, spec.split, None if spec.n_instances is None else spec.skip + spec.n_instances)
        insts = insts[spec.skip:]
        role = spec.role(family)
        harness = harness_for(spec.harness, family, repo_root)
        for seed in range(spec.seeds):
            key = content_key(spec.tag, model_signature(role), harness.id, [i.id for i in insts], seed,
                              spec.limits.model_dump(), spec.tool_choice)
            jobs = [RolloutJob(instance=i, harness=harness, model=role, seed=seed, limits=spec.limits, tag=spec.tag,
                               tool_choice=spec.tool_choice) for i in insts]
            chunks.append(Chunk(pair=spec.name, family=family, seed=seed, stage=spec.stage or stage_name(spec.name),
                                key=f"{family}-s{seed}-{key}", jobs=jobs))
    return chunks


def api_bases(config: RunConfig) -> dict[str, list[str]]:
    """Model string -> every configured server that serves it (the pool spreads conversations over them)."""
    out: dict[str, list[str]] = {}
    for s in config.servers:
        out.setdefault(f"hosted_vllm/{s.name}", []).append(s.api_base)
    for a in config.adapters:
        out.setdefault(f"hosted_vllm/{a.name}", []).extend(s.api_base for s in config.servers if s.name == a.server)
    return out
