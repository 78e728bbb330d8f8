"""How the correction arm runs episodes: an injected `RolloutFn` (a batch of `RolloutJob`s in, their
trajectories out, in order), so `correction/` never starts Ray; the flows wire the pool or use `local_rollouts`.

    run = CachedRollouts(local_rollouts(concurrency=4), cache_dir=out / "cache")   # content-keyed resume
    trajs = await run([job, ...])

`CachedRollouts` keeps every finished episode under its job key (`RolloutJob.key`: instance, harness, model,
seed, tag and the prefix's content hash), so a rerun after a kill repeats no model call; it also counts
calls and time per role (tag) for the throughput table (the key also hashes the job's limits), and with a
`SpendCap` (agents/budget.py) it stops the stage at the run's API budget before the next batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from agents.budget import SpendCap
from agents.jobs import RolloutJob
from agents.records import Trajectory
from agents.rollout import run_episode
from agents.tables.trajectories import read_trajectories, write_trajectories

RolloutFn = Callable[[Sequence[RolloutJob]], Awaitable[list[Trajectory]]]


def local_rollouts(concurrency: int = 4) -> RolloutFn:
    """Run jobs in this process (real environments, real rollout runtime), `concurrency` at a time."""
    import tasks

    sem = asyncio.Semaphore(concurrency)

    async def one(job: RolloutJob) -> Trajectory:
        async with sem:
            env = tasks.make_env(job.instance)
            try:
                return await run_episode(job.model, job.harness, env, job.seed, job.limits, prefix=job.prefix,
                                         tag=job.tag, tool_choice=job.tool_choice)
            finally:
                env.close()

    async def run(jobs: Sequence[RolloutJob]) -> list[Trajectory]:
        return list(await asyncio.gather(*(one(j) for j in jobs)))

    return run


class CachedRollouts:
    """A `RolloutFn` that reads finished jobs from `cache_dir` and runs (then stores) only the rest.

    `calls[tag]` counts episodes actually run, `model_s[tag]` the model-call seconds of their generated turns,
    `other_s[tag]` the rest of their wall time (prefix replay, tools, verify); cached jobs count nothing.
    """

    def __init__(self, inner: RolloutFn, cache_dir: str | Path | None = None, cap: SpendCap | None = None) -> None:
        self.inner = inner
        self.cap = cap  # checked before each batch that runs a model; every fresh episode's cost is added
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.calls: dict[str, int] = defaultdict(int)
        self.model_s: dict[str, float] = defaultdict(float)
        self.other_s: dict[str, float] = defaultdict(float)
        self.wall_s = 0.0

    def _path(self, job: RolloutJob, legacy: bool = False) -> Path | None:
        """Keyed by the job key and its limits (the key alone does not hold the limits), with the model's server
        left out: where an episode was served does not change it, so a resume with a server on another port
        or host finds its episodes. `legacy`: the key with the server in it (caches written before)."""
        if self.cache_dir is None:
            return None
        served = job if legacy or job.model.api_base is None else \
            job.model_copy(update={"model": job.model.model_copy(update={"api_base": None})})
        key = hashlib.sha256(f"{served.key}|{job.limits.model_dump_json()}".encode()).hexdigest()[:20]
        return self.cache_dir / key[:2] / f"{key}.parquet"

    def _cached(self, job: RolloutJob) -> Trajectory | None:
        for path in (self._path(job), self._path(job, legacy=True)):
            if path is not None and path.exists():
                found = read_trajectories(path)
                return found[0] if found else None
        return None

    async def __call__(self, jobs: Sequence[RolloutJob]) -> list[Trajectory]:
        out: list[Trajectory | None] = [self._cached(j) for j in jobs]
        todo = [i for i, t in enumerate(out) if t is None]
        if todo:
            if self.cap is not None:
                self.cap.check()
            t0 = time.perf_counter()
            fresh = await self.inner([jobs[i] for i in todo])
            self.wall_s += time.perf_counter() - t0
            for i, traj in zip(todo, fresh, strict=True):
                self._account(jobs[i].tag, traj)
                path = self._path(jobs[i])
                if path is not None:
                    write_trajectories(path, [traj])
                out[i] = traj
        return [t for t in out if t is not None]

    def _account(self, tag: str, traj: Trajectory) -> None:
        model = sum(t.latency_s or 0.0 for t in traj.turns[traj.prefix_turns:])
        if self.cap is not None:
            self.cap.add(sum(t.cost_usd for t in traj.turns[traj.prefix_turns:]))
        self.calls[tag] += 1
        self.model_s[tag] += model
        self.other_s[tag] += max(0.0, traj.wall_s - model)
