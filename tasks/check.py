"""The suite's self-check: on every instance the oracle must score 1.0 and the do-nothing policy < 1.0.

Instances run in a pool of worker processes (verifiers and sandboxed commands are CPU-bound, and CI has
two cores); inside a worker a few instances overlap on one event loop (their tool calls await subprocesses
or browsers). Used by `coevo tasks check` and by the tests.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from pydantic import BaseModel, ConfigDict

import tasks
from tasks.base import SPLIT_RANGES
from tasks.policies import PolicyRun, run_policy
from tasks.records import SPLITS, Split

CHUNK = 10  # instances per job: small enough to balance two workers, large enough to amortise startup
IN_WORKER_CONCURRENCY = 4


class InstanceCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    instance_id: str
    family: str
    split: Split
    oracle: PolicyRun
    do_nothing: PolicyRun

    @property
    def ok(self) -> bool:
        return self.oracle.verdict.score >= 1.0 and self.do_nothing.verdict.score < 1.0


class GroupSummary(BaseModel):
    """One row of the check table: a family x split."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    family: str
    split: Split
    n: int
    oracle_mean: float
    oracle_min: float
    nothing_mean: float
    nothing_max: float
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


async def _check_one(family: str, index: int, sem: asyncio.Semaphore) -> InstanceCheck:
    async with sem:
        inst = tasks.get(family).generate(index)
        oracle = await run_policy(inst, "oracle")
        nothing = await run_policy(inst, "do_nothing")
    return InstanceCheck(instance_id=inst.id, family=family, split=inst.split, oracle=oracle, do_nothing=nothing)


async def _check_many(family: str, indices: Sequence[int]) -> list[InstanceCheck]:
    sem = asyncio.Semaphore(IN_WORKER_CONCURRENCY)
    return list(await asyncio.gather(*(_check_one(family, i, sem) for i in indices)))


def _job(family: str, indices: list[int]) -> list[dict]:
    return [r.model_dump(mode="json") for r in asyncio.run(_check_many(family, indices))]


def check_instances(
    families: Sequence[str] | None = None,
    splits: Sequence[Split] | None = None,
    workers: int | None = None,
    indices: Sequence[int] | None = None,
) -> list[InstanceCheck]:
    """Run oracle and do-nothing on every selected instance (of `splits`, and among `indices` if given);
    results in (family, index) order."""
    fams = list(families or tasks.families())
    for f in fams:
        tasks.get(f)  # fail fast on an unknown or missing family, before any worker starts
    jobs: list[tuple[str, list[int]]] = []
    keep = None if indices is None else set(indices)
    for f in fams:
        chosen = sorted(i for s in (splits or SPLITS) for i in SPLIT_RANGES[s] if keep is None or i in keep)
        jobs += [(f, chosen[k:k + CHUNK]) for k in range(0, len(chosen), CHUNK)]
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    if not jobs:
        return []
    if workers == 1:
        raw = [r for f, idx in jobs for r in _job(f, idx)]
    else:
        # spawn, not fork: the parent may hold threads (event loops, browsers) that fork would copy broken
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            raw = [r for rows in pool.map(_job, *zip(*jobs)) for r in rows]
    return [InstanceCheck.model_validate(r) for r in raw]


def summarize(results: Sequence[InstanceCheck]) -> list[GroupSummary]:
    groups: dict[tuple[str, Split], list[InstanceCheck]] = {}
    for r in results:
        groups.setdefault((r.family, r.split), []).append(r)
    out = []
    for (family, split), rs in groups.items():
        o = [r.oracle.verdict.score for r in rs]
        n = [r.do_nothing.verdict.score for r in rs]
        out.append(GroupSummary(
            family=family, split=split, n=len(rs), oracle_mean=sum(o) / len(o), oracle_min=min(o),
            nothing_mean=sum(n) / len(n), nothing_max=max(n), failures=[r.instance_id for r in rs if not r.ok],
        ))
    return out


def run_check(
    families: Sequence[str] | None = None,
    splits: Sequence[Split] | None = None,
    workers: int | None = None,
    indices: Sequence[int] | None = None,
) -> tuple[list[GroupSummary], list[InstanceCheck], float]:
    start = time.monotonic()
    results = check_instances(families, splits, workers, indices)
    return summarize(results), results, time.monotonic() - start


__all__ = ["GroupSummary", "InstanceCheck", "check_instances", "run_check", "summarize"]
