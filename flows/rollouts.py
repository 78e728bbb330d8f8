"""Rollouts through the run's Ray pool, stored chunk by chunk, and the run-level pieces every stage shares.

    summary = run_chunks(config, store, chunks, label)   # run the chunks not yet stored; write each when complete

A chunk is written (atomically) only when all its jobs are in, so a stage killed midway resumes from its
finished chunks. A chunk whose model calls failed while its server is down is an outage (`ServerUnavailable`,
which the server scope turns into one restart and a rerun of the stage), not a result. `retry_transient` is the
rollout tasks' retry condition: only what a retry can fix (a timeout, a lost actor).
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import httpx
import ray
import ray.exceptions
from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict, Field

from agents.pool.driver import LOCAL_RAY_SYSTEM_CONFIG, RolloutPool
from agents.records import Trajectory
from deploy import tiny_model
from flows import faults, servers
from flows.config import RunConfig
from flows.plan import Chunk, api_bases
from flows.progress import Progress
from flows.servers import ServerUnavailable
from flows.store import RunStore

# What a plain retry of a task can fix. A server that stopped answering is not among them: the server scope
# restarts it and runs the stage again (flows/servers.py).
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, httpx.HTTPError, ray.exceptions.RayError)
PROGRESS_EVERY_S = 2.0


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only what a retry can fix (a timeout, a lost actor), not a bug, a bad config or a dead server."""
    try:
        state.result()
    except TRANSIENT:
        return True
    except BaseException:  # noqa: BLE001 - anything else is not worth a retry
        return False
    return False


def slug(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")[:120]


class CollectSummary(BaseModel):
    """What one run_chunks call did (the resume tests count `rollouts_run`)."""

    model_config = ConfigDict(extra="forbid")

    pair: str
    chunks: int
    chunks_loaded: int = Field(description="Finished earlier (this run or a previous attempt): read, not re-run.")
    chunks_run: int
    rollouts: int
    rollouts_run: int
    model_calls: int = Field(description="Model turns of the rollouts run now.")


@task(name="build_tiny_model", cache_policy=NONE)
def build_tiny_model(config: RunConfig, base_dir: str) -> str:
    """The tiny random model of `tiny_model:`, built when missing (same seed, byte-identical weights)."""
    assert config.tiny_model is not None
    out = Path(base_dir) / config.tiny_model.out
    if not tiny_model.is_built(out):
        get_run_logger().info("building the tiny model at %s", out)
        tiny_model.build_tiny_model(out, tiny_model.TinyModelSpec(seed=config.tiny_model.seed))
    return str(out)


def start_ray(config: RunConfig) -> bool:
    """Ray once per run (pools then reuse it); True when this call started it and the caller must shut it down."""
    if ray.is_initialized():
        return False
    if config.ray.address:
        ray.init(address=config.ray.address, log_to_driver=False)
    else:
        ray.init(num_cpus=config.ray.num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    return True


def rollout_pool(config: RunConfig) -> RolloutPool:
    """The run's Ray pool of rollout actors (`ray:` section; every server of a model is a route)."""
    return RolloutPool(config.ray.actors, address=config.ray.address, num_cpus=config.ray.num_cpus,
                       concurrency_per_server=config.ray.concurrency_per_server, api_bases=api_bases(config),
                       family_limits=config.ray.family_limits)


def _server_down(config: RunConfig, chunk: Chunk, trajs: list[Trajectory]) -> str | None:
    """A chunk whose model calls failed while its server is down is not a result: it is an outage."""
    if not any(t.stop_reason in ("model_error", "error") for t in trajs):
        return None
    role = chunk.jobs[0].model
    bases = api_bases(config).get(role.model) or ([role.api_base] if role.api_base else [])
    down = servers.unreachable(bases, os.environ.get(role.api_key_env) if role.api_key_env else None)
    return f"model server(s) {down} for {role.model} stopped answering during chunk {chunk.key}" if down else None


def run_chunks(config: RunConfig, store: RunStore, chunks: list[Chunk], label: str) -> CollectSummary:
    """Run the chunks not yet stored through the Ray pool, writing each when all its jobs are in."""
    log = get_run_logger()
    todo = [c for c in chunks if not store.has(c.stage, c.key)]
    total = sum(len(c.jobs) for c in chunks)
    finished = total - sum(len(c.jobs) for c in todo)
    progress_id = create_progress_artifact(
        progress=100.0 * finished / max(total, 1), key=slug("progress", store.run_id, label),
        description=f"{label}: rollouts finished of {total} ({len(chunks) - len(todo)} chunks loaded from the store)")
    summary = CollectSummary(pair=label, chunks=len(chunks), chunks_loaded=len(chunks) - len(todo), chunks_run=0,
                             rollouts=total, rollouts_run=0, model_calls=0)
    if not todo:
        return summary
    log.info("%s: %d of %d chunks to run (%d rollouts)", label, len(todo), len(chunks), total - finished)
    owner = {job.key: c for c in todo for job in c.jobs}
    buckets: dict[str, list[Trajectory]] = {c.key: [] for c in todo}
    pool = rollout_pool(config)
    last = 0.0
    ticker = Progress(f"{label} rollouts", total, finished, emit=log.info)  # done/total, ETA on the terminal
    try:
        for traj in pool.stream([j for c in todo for j in c.jobs]):
            chunk = owner[traj.id]
            bucket = buckets[chunk.key]
            bucket.append(traj)
            finished += 1
            if len(bucket) == len(chunk.jobs):
                outage = _server_down(config, chunk, bucket)
                if outage:
                    raise ServerUnavailable(outage)
                store.write_trajectories(chunk.stage, chunk.key, bucket,
                                         harnesses={j.harness.id: j.harness for j in chunk.jobs}.values())
                summary.chunks_run += 1
                summary.rollouts_run += len(bucket)
                summary.model_calls += sum(len(t.turns) for t in bucket)
                if finished < total:  # a kill point of the reliability tests (e.g. gate_rollouts)
                    faults.maybe_kill(f"{chunk.jobs[0].tag}_rollouts", store.root)
            ticker.update(finished)
            if time.monotonic() - last > PROGRESS_EVERY_S or finished == total:
                update_progress_artifact(progress_id, 100.0 * finished / max(total, 1))
                last = time.monotonic()
    finally:
        pool.shutdown()
    return summary
