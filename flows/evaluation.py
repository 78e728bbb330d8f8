"""The evaluation flow: serve models, collect rollouts per (model, harness) pair, evaluate, report.

    evaluation_flow(config)                        # a new run under <runs_dir>/<run_id>/
    evaluation_flow(config, run_id="...")          # resume: finished chunks are loaded, not re-run

Stages (Prefect tasks/subflows; inputs and outputs live in the run store, results are small JSON records,
never a Ray handle or a client; Prefect caching is off because the store's content keys are the cache):

    serve_models      start (or reuse) the configured vLLM servers, build the tiny model if missing
    evaluate[pair]    subflow: collect_rollouts (retried on transient failures, restarting dead servers),
                      then the per-family table as a Prefect table artifact
    train_adapter     (when `training:` is set) LoRA on the passed trajectories of `training.source_pair`,
                      hot-loaded as `training.adapter_name`; then evaluate[adapter pair] (flows/training_stage.py)
    report            report.md + PNGs in <run>/reports/, a markdown artifact
    stop_models       stop the servers the run started (always, also after a failure)
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import ray
import ray.exceptions
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict, Field

from agents.pool import LOCAL_RAY_SYSTEM_CONFIG, RolloutPool
from agents.records import Trajectory
from analysis.report import long_family_table
from deploy import tiny_model
from deploy.vllm_server import ServerStartError, is_ready
from flows import faults, servers
from flows.config import RunConfig, preflight
from flows.plan import Chunk, api_bases, pair_stage, plan_pair
from flows.reporting import RunReport, write_run_report
from flows.servers import ServerRecord, ServerUnavailable
from flows.store import RunStore, new_run_id
from flows.training_stage import TrainingRecord, adapter_pairs, train_and_serve, with_trained_adapter

TRANSIENT: tuple[type[BaseException], ...] = (
    ServerUnavailable, ServerStartError, ConnectionError, TimeoutError, httpx.HTTPError, ray.exceptions.RayError,
)
PROGRESS_EVERY_S = 2.0


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry only what a retry can fix (a server that died, a timeout, a lost actor), not a bug or a bad config."""
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
    """What one collect_rollouts call did (the resume test counts `rollouts_run`)."""

    model_config = ConfigDict(extra="forbid")

    pair: str
    chunks: int
    chunks_loaded: int = Field(description="Finished earlier (this run or a previous attempt): read, not re-run.")
    chunks_run: int
    rollouts: int
    rollouts_run: int
    model_calls: int = Field(description="Model turns of the rollouts run now.")
    restarted_servers: list[str] = Field(default_factory=list)


# --- stages ---------------------------------------------------------------------------------------

@task(name="serve_models", retries=1, retry_delay_seconds=5, retry_condition_fn=_retry_transient, cache_policy=NONE)
def serve_models(config: RunConfig, run_dir: str, base_dir: str) -> list[ServerRecord]:
    base = Path(base_dir)
    if config.tiny_model is not None:
        out = base / config.tiny_model.out
        if not tiny_model.is_built(out):
            get_run_logger().info("building the tiny model at %s", out)
            tiny_model.build_tiny_model(out, tiny_model.TinyModelSpec(seed=config.tiny_model.seed))
    records = servers.start_all(config, Path(run_dir) / "logs" / "servers", base)
    for r in records:
        get_run_logger().info("server %s at %s (%s)", r.name, r.api_base, "started" if r.owned else "reused")
    return records


@task(name="stop_models", cache_policy=NONE)
def stop_models(config: RunConfig, run_dir: str) -> list[int]:
    return servers.stop_owned(config, Path(run_dir) / "logs" / "servers")


def _server_down(config: RunConfig, chunk: Chunk, trajs: list[Trajectory]) -> str | None:
    """A chunk whose model calls failed while its server is down is not a result: it is an outage."""
    if not any(t.stop_reason in ("model_error", "error") for t in trajs):
        return None
    role = chunk.jobs[0].model
    bases = api_bases(config).get(role.model) or ([role.api_base] if role.api_base else [])
    down = [b for b in bases if not is_ready(b)]
    return f"model server(s) {down} for {role.model} stopped answering during chunk {chunk.key}" if down else None


@task(name="collect_rollouts", retries=2, retry_delay_seconds=[5, 15], retry_condition_fn=_retry_transient,
      cache_policy=NONE)
def collect_rollouts(config: RunConfig, run_dir: str, base_dir: str, pair_name: str) -> CollectSummary:
    """Run every unfinished chunk of one pair; a chunk is written (atomically) only when all its jobs are in."""
    log = get_run_logger()
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    pair = next(p for p in config.evaluation.pairs if p.name == pair_name)
    chunks = plan_pair(config, pair, Path(base_dir))
    restarted = servers.ensure_up(config, store.root / "logs" / "servers", Path(base_dir))
    if restarted:
        log.warning("restarted server(s) %s before collecting", restarted)
    todo = [c for c in chunks if not store.has(c.stage, c.key)]
    total = sum(len(c.jobs) for c in chunks)
    finished = total - sum(len(c.jobs) for c in todo)
    progress_id = create_progress_artifact(
        progress=100.0 * finished / max(total, 1), key=slug("progress", store.run_id, pair_name),
        description=f"{pair_name}: rollouts finished of {total} ({len(chunks) - len(todo)} chunks loaded from the store)")
    summary = CollectSummary(pair=pair_name, chunks=len(chunks), chunks_loaded=len(chunks) - len(todo), chunks_run=0,
                             rollouts=total, rollouts_run=0, model_calls=0, restarted_servers=restarted)
    if not todo:
        return summary
    log.info("%s: %d of %d chunks to run (%d rollouts)", pair_name, len(todo), len(chunks), total - finished)
    owner = {job.key: c for c in todo for job in c.jobs}
    buckets: dict[str, list[Trajectory]] = {c.key: [] for c in todo}
    pool = RolloutPool(config.ray.actors, address=config.ray.address, num_cpus=config.ray.num_cpus,
                       concurrency_per_server=config.ray.concurrency_per_server, api_bases=api_bases(config))
    last = 0.0
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
            if time.monotonic() - last > PROGRESS_EVERY_S or finished == total:
                update_progress_artifact(progress_id, 100.0 * finished / max(total, 1))
                last = time.monotonic()
    finally:
        pool.shutdown()
    return summary


@flow(name="evaluate", flow_run_name="evaluate-{pair_name}", log_prints=True)
def evaluate(config: RunConfig, run_dir: str, base_dir: str, pair_name: str) -> dict[str, Any]:
    """One (model, harness) pair on the split × seeds: rollouts in the store, then its per-family table."""
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    pair = next(p for p in config.evaluation.pairs if p.name == pair_name)
    summary = collect_rollouts(config, run_dir, base_dir, pair_name)
    faults.maybe_fail("evaluate_once", store.root)
    chunks = plan_pair(config, pair, Path(base_dir))
    frame = store.chunk_frame(pair_stage(pair), [c.key for c in chunks])
    if frame.height != summary.rollouts or frame["id"].n_unique() != frame.height:
        raise RuntimeError(f"{pair_name}: store holds {frame.height} rollouts ({frame['id'].n_unique()} distinct), "
                           f"expected {summary.rollouts}")
    rows = long_family_table(frame.with_columns(pl.lit(pair_name).alias("pair")))
    create_table_artifact(table=[{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
                          key=slug("eval", store.run_id, pair_name),
                          description=f"{pair_name}: success per family (mean, SEM over seeds)")
    role = config.models[pair.model]
    desc = f"{role.model} × {pair.harness}" + (f" (adapter {pair.adapter})" if pair.adapter else "")
    store.mark_done("evaluate", pair_name, {"stage": pair_stage(pair), "chunks": [c.key for c in chunks],
                                            "rollouts": frame.height, "desc": desc})
    return summary.model_dump()


@task(name="train_adapter", retries=1, retry_delay_seconds=10, retry_condition_fn=_retry_transient,
      cache_policy=NONE)
def train_adapter(config: RunConfig, run_dir: str, base_dir: str) -> TrainingRecord:
    """Dataset from the source pair's passed rollouts, LoRA per seed (finished seeds skipped), seed 0 served."""
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    rec = train_and_serve(config, store, Path(base_dir))
    store.mark_done("train_adapter", rec.adapter_name, rec.model_dump(mode="json", exclude={"dataset"}))
    get_run_logger().info("adapter %s served at %s: %d examples (%s), seeds trained %s, reused %s, final loss %s",
                          rec.adapter_name, rec.served_at, rec.dataset.examples,
                          "built" if rec.dataset_built else "from the store", rec.seeds_trained, rec.seeds_reused,
                          rec.final_loss)
    return rec


@task(name="report", cache_policy=NONE)
def report(run_dir: str, n_boot: int = 2000) -> RunReport:
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    rep = write_run_report(store, n_boot=n_boot)
    create_markdown_artifact(markdown=rep.markdown, key=slug("report", store.run_id),
                             description=f"Evaluation report of run {store.run_id}")
    create_link_artifact(link=Path(rep.report_path).as_uri(), link_text="report.md", key=slug("report-file", store.run_id))
    return rep


# --- flows ----------------------------------------------------------------------------------------

class EvaluationResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    run_dir: str
    report: RunReport
    collected: list[dict[str, Any]]
    training: TrainingRecord | None = None


def _start_ray(config: RunConfig) -> bool:
    """Ray once per flow (pools then reuse it); True when this flow started it and must shut it down."""
    if ray.is_initialized():
        return False
    if config.ray.address:
        ray.init(address=config.ray.address, log_to_driver=False)
    else:
        ray.init(num_cpus=config.ray.num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    return True


@flow(name="evaluation", flow_run_name="evaluation-{run_id}", log_prints=True)
def evaluation_flow(config: RunConfig, run_id: str | None = None, base_dir: str | None = None) -> EvaluationResult:
    """Every configured (model, harness) pair on the test split × seeds, then the report. Resumes a run_id."""
    base = Path(base_dir or Path.cwd()).resolve()
    config = config.with_adapter_pair()  # stored with the run, so the report orders the adapter pair too
    preflight(config, base)
    run_id = run_id or new_run_id(config.name)
    store = RunStore(base / config.runs_dir, run_id)
    store.save_config(config.model_dump(mode="json", exclude_defaults=False))
    run_dir = str(store.root.resolve())
    create_link_artifact(link=store.root.resolve().as_uri(), link_text=f"run directory {run_id}",
                         key=slug("run-dir", run_id), description=run_dir)
    owns_ray = _start_ray(config)
    try:
        serve_models(config, run_dir, str(base))
        try:
            trained_pairs = adapter_pairs(config)
            collected = [evaluate(config, run_dir, str(base), p.name) for p in config.evaluation.pairs
                         if p.name not in trained_pairs]
            trained = None
            if config.training is not None:
                trained = train_adapter(config, run_dir, str(base))
                with_adapter = with_trained_adapter(config, trained)
                collected += [evaluate(with_adapter, run_dir, str(base), name) for name in trained_pairs]
            rep = report(run_dir, config.evaluation.bootstrap_samples)
        finally:
            stop_models(config, run_dir)
    finally:
        if owns_ray:
            ray.shutdown()
    return EvaluationResult(run_id=run_id, run_dir=run_dir, report=rep, collected=collected, training=trained)


@flow(name="report", flow_run_name="report-{run_id}")
def report_flow(run_id: str, runs_dir: str = "runs", n_boot: int = 2000) -> RunReport:
    """`coevo report RUN_ID`: rebuild report.md and the plots from the stored trajectories."""
    return report(str((Path(runs_dir) / run_id).resolve()), n_boot)
