"""The evaluation flow: serve models, collect rollouts per (model, harness) pair, evaluate, report.

    evaluation_flow(config)                        # a new run under <runs_dir>/<run_id>/
    evaluation_flow(config, run_id="...")          # resume: finished chunks are loaded, not re-run

Stages (Prefect tasks/subflows; inputs and outputs live in the run store, results are small JSON records,
never a Ray handle or a client; Prefect caching is off because the store's content keys are the cache):

    build_tiny_model  (when `tiny_model:` is set) build the tiny local model if missing
    evaluate[pair]    subflow: collect_rollouts (retried on timeouts and Ray errors), then the per-family
                      table as a Prefect table artifact
    imitation_data    (when `training:` is set) the source pair's rollouts on `training.data_split` (train), then
                      the imitation set: its successes + own successes (flows/evaluation/imitation.py)
    train_adapter     (when `training:` is set) LoRA on the imitation set,
                      then hot-loaded as `training.adapter_name`; then evaluate[adapter pair] (flows/evaluation/training.py)
    attribute         (when `attribution:` is set and enabled) every failing rollout of every finished pair gets a
                      failure category; <run>/attributions/<pair>-<key>.parquet, content-keyed, so a resumed run
                      reuses them (flows/evaluation/attribution.py)
    report            report.md + PNGs in <run>/reports/, a markdown artifact; with `attribution:`, the failure
                      composition, trigger-rate and fit sections

The model servers are one scope around the stages (`flows.servers.ModelServers`): started before the first,
stopped after the last (also after a failure); every stage runs through `servers.run`, which restarts a
server that died during the stage once and runs the stage again.
"""

from __future__ import annotations

import logging
import os
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

from agents.pool.driver import LOCAL_RAY_SYSTEM_CONFIG, RolloutPool
from agents.records import Trajectory
from analysis.report import long_family_table
from deploy import tiny_model
from flows import faults, servers
from flows.evaluation.attribution import AttributionRecord, attribute_run, report_sections
from flows.config import RunConfig, parse_config, preflight, resolved
from flows.plan import Chunk, api_bases, pair_stage, plan_pair
from flows.progress import Progress
from flows.reporting import RunReport, write_run_report
from flows.servers import ModelServers, ServerRestart, ServerUnavailable
from flows.store import RunStore, new_run_id
from flows.evaluation.imitation import STAGE as IMITATION_STAGE
from flows.evaluation.imitation import ImitationDataRecord, build_imitation_data, data_chunks
from flows.evaluation.training import TrainingRecord, adapter_pairs, train, with_trained_adapter

# What a plain retry of a task can fix. A server that stopped answering is not among them: the server scope
# restarts it and runs the stage again (flows/servers.py).
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, httpx.HTTPError, ray.exceptions.RayError)
PROGRESS_EVERY_S = 2.0


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
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
    """What one collect_rollouts call did (the resume test counts `rollouts_run`)."""

    model_config = ConfigDict(extra="forbid")

    pair: str
    chunks: int
    chunks_loaded: int = Field(description="Finished earlier (this run or a previous attempt): read, not re-run.")
    chunks_run: int
    rollouts: int
    rollouts_run: int
    model_calls: int = Field(description="Model turns of the rollouts run now.")


# --- stages ---------------------------------------------------------------------------------------

@task(name="build_tiny_model", cache_policy=NONE)
def build_tiny_model(config: RunConfig, base_dir: str) -> str:
    assert config.tiny_model is not None
    out = Path(base_dir) / config.tiny_model.out
    if not tiny_model.is_built(out):
        get_run_logger().info("building the tiny model at %s", out)
        tiny_model.build_tiny_model(out, tiny_model.TinyModelSpec(seed=config.tiny_model.seed))
    return str(out)


def _server_down(config: RunConfig, chunk: Chunk, trajs: list[Trajectory]) -> str | None:
    """A chunk whose model calls failed while its server is down is not a result: it is an outage."""
    if not any(t.stop_reason in ("model_error", "error") for t in trajs):
        return None
    role = chunk.jobs[0].model
    bases = api_bases(config).get(role.model) or ([role.api_base] if role.api_base else [])
    down = servers.unreachable(bases, os.environ.get(role.api_key_env) if role.api_key_env else None)
    return f"model server(s) {down} for {role.model} stopped answering during chunk {chunk.key}" if down else None


@task(name="collect_rollouts", retries=2, retry_delay_seconds=[5, 15], retry_condition_fn=_retry_transient,
      cache_policy=NONE)
def collect_rollouts(config: RunConfig, run_dir: str, base_dir: str, pair_name: str) -> CollectSummary:
    """Run every unfinished chunk of one pair; a chunk is written (atomically) only when all its jobs are in."""
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    pair = next(p for p in config.evaluation.pairs if p.name == pair_name)
    return run_chunks(config, store, plan_pair(config, pair, Path(base_dir)), pair_name)


def rollout_pool(config: RunConfig) -> RolloutPool:
    """The run's Ray pool of rollout actors (`ray:` section; every server of a model is a route)."""
    return RolloutPool(config.ray.actors, address=config.ray.address, num_cpus=config.ray.num_cpus,
                       concurrency_per_server=config.ray.concurrency_per_server, api_bases=api_bases(config),
                       family_limits=config.ray.family_limits)


def run_chunks(config: RunConfig, store: RunStore, chunks: list[Chunk], pair_name: str) -> CollectSummary:
    """Run the chunks not yet stored through the Ray pool, writing each when all its jobs are in."""
    log = get_run_logger()
    todo = [c for c in chunks if not store.has(c.stage, c.key)]
    total = sum(len(c.jobs) for c in chunks)
    finished = total - sum(len(c.jobs) for c in todo)
    progress_id = create_progress_artifact(
        progress=100.0 * finished / max(total, 1), key=slug("progress", store.run_id, pair_name),
        description=f"{pair_name}: rollouts finished of {total} ({len(chunks) - len(todo)} chunks loaded from the store)")
    summary = CollectSummary(pair=pair_name, chunks=len(chunks), chunks_loaded=len(chunks) - len(todo), chunks_run=0,
                             rollouts=total, rollouts_run=0, model_calls=0)
    if not todo:
        return summary
    log.info("%s: %d of %d chunks to run (%d rollouts)", pair_name, len(todo), len(chunks), total - finished)
    owner = {job.key: c for c in todo for job in c.jobs}
    buckets: dict[str, list[Trajectory]] = {c.key: [] for c in todo}
    pool = rollout_pool(config)
    last = 0.0
    ticker = Progress(f"{pair_name} rollouts", total, finished, emit=log.info)  # done/total, ETA on the terminal
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


@task(name="imitation_data", retries=2, retry_delay_seconds=[5, 15], retry_condition_fn=_retry_transient,
      cache_policy=NONE)
def imitation_data(config: RunConfig, run_dir: str, base_dir: str) -> ImitationDataRecord:
    """The training split's rollouts (resumed per chunk), then the imitation set (found by content key on resume)."""
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    for name, chunks in data_chunks(config, Path(base_dir)).items():
        if chunks:
            run_chunks(config, store, chunks, f"{IMITATION_STAGE}/{name}")
    rec = build_imitation_data(config, store, Path(base_dir))
    store.mark_done(IMITATION_STAGE, rec.key, rec.model_dump(mode="json", exclude={"card"}))
    get_run_logger().info("imitation set %s: %d rows %s (%s)", rec.key, rec.rows, rec.card.mix.taken,
                          "built" if rec.built else "from the store")
    return rec


@task(name="train_adapter", cache_policy=NONE)
def train_adapter(config: RunConfig, run_dir: str, base_dir: str) -> TrainingRecord:
    """Dataset from the source pair's passed rollouts, LoRA per seed (finished seeds skipped)."""
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    rec = train(config, store, Path(base_dir))
    store.mark_done("train_adapter", rec.adapter_name, rec.model_dump(mode="json", exclude={"dataset"}))
    get_run_logger().info("adapter %s: %d examples (%s), seeds trained %s, reused %s, final loss %s",
                          rec.adapter_name, rec.dataset.examples, "built" if rec.dataset_built else "from the store",
                          rec.seeds_trained, rec.seeds_reused, rec.final_loss)
    return rec


def _train_and_serve(config: RunConfig, run_dir: str, base_dir: str, servers: ModelServers) -> TrainingRecord:
    """train_adapter, then seed 0 hot-loaded into the role's server (and reloaded whenever the scope restarts it)."""
    rec = train_adapter(config, run_dir, base_dir)
    t = config.training
    assert t is not None
    spec = config.server_for(config.models[t.role])
    servers.serve_adapter(spec.name if spec else None, rec.served_at, rec.adapter_name, Path(rec.adapter_dir))
    get_run_logger().info("adapter %s served at %s", rec.adapter_name, rec.served_at)
    return rec


@task(name="attribute", cache_policy=NONE)
def attribute(config: RunConfig, run_dir: str) -> AttributionRecord:
    """Attribute the failing rollouts of every finished pair (pairs already attributed are read, not redone)."""
    assert config.attribution is not None
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    rec = attribute_run(store, config.attribution, judge_role=config.models.get("judge"))
    get_run_logger().info("attribute (%s): %s failing rollouts attributed per pair; reused %s; fit at risk: %s",
                          rec.attributor, rec.failing, rec.reused or "none", rec.at_risk or "none")
    create_markdown_artifact(markdown=Path(rec.report_path).read_text(), key=slug("attribution", store.run_id),
                             description=f"Failure attribution of run {store.run_id}")
    return rec


def _attribution_sections(store: RunStore) -> list[Any] | None:
    """The attribution report sections when the run's stored config enables attribution and it has run."""
    try:
        cfg = parse_config(store.load_config_dict(), str(store.root / "config.yaml"))
    except FileNotFoundError:
        return None
    if cfg.attribution is None or not cfg.attribution.enabled or not store.done("attribute"):
        return None
    return report_sections(store, cfg.attribution)


@task(name="report", cache_policy=NONE)
def report(run_dir: str, n_boot: int = 2000) -> RunReport:
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    rep = write_run_report(store, n_boot=n_boot, sections=_attribution_sections(store))
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
    attribution: AttributionRecord | None = None
    server_restarts: list[ServerRestart] = Field(default_factory=list, description="Servers the scope restarted.")


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


def _stages(config: RunConfig, run_dir: str, base: str,
            servers: ModelServers) -> tuple[list[dict[str, Any]], TrainingRecord | None]:
    """evaluate every pair, then (with `training:`) train_adapter and evaluate the adapter's pair; each guarded."""
    trained_pairs = adapter_pairs(config)
    collected = [servers.run(f"evaluate[{p.name}]", evaluate, config, run_dir, base, p.name)
                 for p in config.evaluation.pairs if p.name not in trained_pairs]
    if config.training is None:
        return collected, None
    servers.run("imitation_data", imitation_data, config, run_dir, base)
    trained = servers.run("train_adapter", _train_and_serve, config, run_dir, base, servers)
    with_adapter = with_trained_adapter(config, trained)
    collected += [servers.run(f"evaluate[{name}]", evaluate, with_adapter, run_dir, base, name) for name in trained_pairs]
    return collected, trained


@flow(name="evaluation", flow_run_name="evaluation-{run_id}", log_prints=True)
def evaluation_flow(config: RunConfig, run_id: str | None = None, base_dir: str | None = None) -> EvaluationResult:
    """Every configured (model, harness) pair on the test split × seeds, then the report. Resumes a run_id."""
    base = Path(base_dir or Path.cwd()).resolve()
    config = config.with_adapter_pair()  # stored with the run, so the report orders the adapter pair too
    preflight(config, base)
    run_id = run_id or new_run_id(config.name)
    store = RunStore(base / config.runs_dir, run_id)
    store.save_config(resolved(config))  # the merged config, every default filled
    run_dir = str(store.root.resolve())
    create_link_artifact(link=store.root.resolve().as_uri(), link_text=f"run directory {run_id}",
                         key=slug("run-dir", run_id), description=run_dir)
    owns_ray = _start_ray(config)
    try:
        if config.tiny_model is not None:
            build_tiny_model(config, str(base))
        with ModelServers(config, store.root / "logs" / "servers", base, logger=get_run_logger()) as servers:
            collected, trained = _stages(config, run_dir, str(base), servers)
            attributed = servers.run("attribute", attribute, config, run_dir) \
                if config.attribution is not None and config.attribution.enabled else None
            rep = report(run_dir, config.evaluation.bootstrap_samples)
    finally:
        if owns_ray:
            ray.shutdown()
    return EvaluationResult(run_id=run_id, run_dir=run_dir, report=rep, collected=collected, training=trained,
                            attribution=attributed, server_restarts=servers.restarts)


@flow(name="report", flow_run_name="report-{run_id}")
def report_flow(run_id: str, runs_dir: str = "runs", n_boot: int = 2000) -> RunReport:
    """`coevo report RUN_ID`: rebuild report.md and the plots from the stored trajectories."""
    return report(str((Path(runs_dir) / run_id).resolve()), n_boot)
