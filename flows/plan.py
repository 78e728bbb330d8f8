"""The evaluation plan: which rollout jobs a (model, harness) pair runs, grouped into resumable chunks.

A chunk is (pair, family, seed): its trajectories are written together as one Parquet file whose name
carries a content key of everything that changes the result (model and sampling options, harness id,
instance ids, seed, limits, tag, tool choice). A re-run finds the file and skips the chunk; change any
of those and the key changes, so stale work is never reused. The server URL is not part of the key: the
same model behind another port gives the same rollouts.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

import tasks
from agents.jobs import RolloutJob
from agents.records import ModelRole
from flows.config import EvalPair, RunConfig
from flows.store import content_key
from harness import Harness, baseline

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


def model_signature(role: ModelRole) -> dict[str, object]:
    """What about a role changes its rollouts (not where it is served, nor timeouts and retries)."""
    return role.model_dump(include={"model", "temperature", "top_p", "max_tokens", "extra_body", "strict_tools"})


def pair_stage(pair: EvalPair) -> str:
    return f"evaluate/{pair.name}"


def harness_for(pair: EvalPair, family: str, repo_root: Path) -> Harness:
    return baseline(family) if pair.harness == "baseline" else Harness.load(repo_root / pair.harness)


def plan_pair(config: RunConfig, pair: EvalPair, repo_root: Path) -> list[Chunk]:
    ev = config.evaluation
    chunks = []
    for family in config.family_names():
        insts = tasks.instances(family, ev.split)
        insts = insts if ev.n_instances is None else insts[: ev.n_instances]
        role = config.role(pair.model, family, pair.adapter)
        harness = harness_for(pair, family, repo_root)
        for seed in range(ev.seeds):
            key = content_key(EVAL_TAG, model_signature(role), harness.id, [i.id for i in insts], seed,
                              config.limits.model_dump(), pair.tool_choice)
            jobs = [RolloutJob(instance=i, harness=harness, model=role, seed=seed, limits=config.limits, tag=EVAL_TAG,
                               tool_choice=pair.tool_choice) for i in insts]
            chunks.append(Chunk(pair=pair.name, family=family, seed=seed, stage=pair_stage(pair),
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
