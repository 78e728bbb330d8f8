"""The `correction_data` stage: failing student rollouts -> corrections and corrected trajectories (resumable).

    result = correct_run(store, failing, harnesses, CorrectionConfig(student=..., expert=...))

Per source trajectory, content-keyed (`content_key(source id, harness id, the config)`):
- `trajectories/correction_data/<key>.parquet`: the corrected trajectory (only t* marked for training), with
  its harness saved in the run;
- `datasets/correction_data/<key>.corrections.parquet`: its `Correction` record (also when nothing was
  corrected, with the reason), then `state.json` marks the key done.
Every episode the stage runs (expert probes, rewrites, student replays) is kept under its job key in
`cache/correction_data/`, so a stage killed midway and run again repeats no expert or student call: finished
sources are skipped, unfinished ones read their finished episodes back. At the end the stage writes
`datasets/correction_data/corrections.parquet` and `card.json` (the dataset card) over the given sources.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.budget import SpendCap
from agents.role_calls import FILE_NAME as ROLE_CALLS
from agents.role_calls import RoleCallLog
from agents.jobs import RolloutJob
from agents.records import ModelRole, Trajectory
from correction.locators import make_locator
from correction.locators.base import parse_locator
from correction.pipeline import Keep, RowOptions, SuffixOptions, correct_one
from correction.rows import LossOn, Suffix
from correction.records import Correction, boundary_instances, dataset_card, read_corrections, write_corrections
from correction.runner import CachedRollouts, RolloutFn, local_rollouts
from correction.selectors import Selector, make_selector
from correction.selectors.base import parse_selector
from flows.progress import Progress, run_emitter
from flows.store import RunStore, atomic_write_text, content_key
from harness.program import Harness

if TYPE_CHECKING:
    from agents.pool.driver import RolloutPool

STAGE = "correction_data"
log = logging.getLogger(__name__)


class CorrectionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    student: ModelRole = Field(description="The student (replays under h*); '{family}' is filled per instance.")
    expert: ModelRole = Field(default=ModelRole(model="flawed/{family}@expert"), description="Rewrites t*.")
    locator_expert: ModelRole = Field(default=ModelRole(model="oracle/{family}"),
                                      description="Continues prefixes for the counterfactual R(t).")
    locator: str = Field(default="counterfactual", description="counterfactual | divergence | mle_agent:MODEL")
    locator_api_base: str | None = Field(default=None, description="Server URL of a hosted_vllm mle_agent model.")
    selector: str = Field(default="verifier_replay", description="verifier_replay | judge:MODEL")
    judge: str | None = Field(default=None, description="Also rank with judge:MODEL and record the agreement.")
    judge_api_base: str | None = Field(default=None, description="Server URL of a hosted_vllm judge.")
    locator_role: ModelRole | None = Field(default=None, description="How the mle_agent locator is called: the run's "
                                           "`locator` role (api_base, api_key_env, max_tokens, timeout_s, prices); "
                                           "the model is the one after 'mle_agent:'.")
    judge_role: ModelRole | None = Field(default=None, description="How the judge is called: the run's `judge` role, "
                                         "as for locator_role.")
    n: int = Field(default=3, ge=1, description="Expert candidates per t*.")
    replays: int = Field(default=2, ge=1, description="Student continuations per candidate (verifier_replay).")
    extra_turns: int = Field(default=30, ge=1, description="Turns a continuation may add after its prefix.")
    concurrency: int = Field(default=2, ge=1, description="Source trajectories corrected at once.")
    mode: Literal["single_turn", "suffix"] = Field(default="single_turn", description="suffix: repair t*..t*+m when "
                                                   "the single corrected turn does not let the student succeed.")
    max_suffix: int = Field(default=4, ge=0, description="Suffix mode: at most t*..t*+max_suffix.")
    suffix: Suffix = Field(default="none", description="What the training row holds after t*: none | replay (the "
                           "student's continuation in the chosen candidate's best replay; a judge selector runs "
                           "none, so it falls back to none, recorded) | original (the failing rollout's own turns).")
    loss_on: LossOn = Field(default="corrected", description="corrected: loss on the corrected turn only; "
                            "all_student: also on every student turn kept (a suffix from a replay that did not "
                            "pass carries no loss).")
    keep: Keep = Field(default="controlled", description="controlled: keep a correction only when its decision "
                       "replays (seeds the selection did not use) beat the control, the student's own turn t* "
                       "resampled from the same prefix with the same seeds; improved: when the chosen candidate's "
                       "mean replay score exceeds the failing rollout's score (a judge-chosen candidate gets one "
                       "student replay for it); any: keep every chosen candidate (correction/pipeline.py).")
    splits: list[str] = Field(default=["train", "pretrain"], description="Splits whose rollouts may become training "
                              "rows (leakage guard); add val/test only for measurement, never for training.")

    @field_validator("selector")
    @classmethod
    def _known_selector(cls, v: str) -> str:
        parse_selector(v)  # ValueError names the accepted forms
        return v

    @field_validator("locator")
    @classmethod
    def _known_locator(cls, v: str) -> str:
        parse_locator(v)  # ValueError names the accepted forms
        return v


def build_selector(spec: str, config: CorrectionConfig, calls: RoleCallLog | None = None) -> Selector:
    name, _ = parse_selector(spec)
    if name == "judge":
        return make_selector(spec, role=config.judge_role, api_base=config.judge_api_base, calls=calls)
    return make_selector(spec, student=config.student, replays=config.replays, extra_turns=config.extra_turns)


class CorrectionResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corrections: list[Correction]
    corrected: list[Trajectory]
    reused: int = Field(description="Sources found finished in the store.")
    calls: dict[str, int] = Field(description="Episodes run now, per role tag (cached ones not counted).")
    model_s: dict[str, float]
    other_s: dict[str, float]
    wall_s: float
    card: dict


def source_key(traj: Trajectory, config: CorrectionConfig) -> str:
    return content_key(traj.id, traj.harness_id, config.model_dump(exclude={"concurrency"}))


def _paths(store: RunStore, key: str) -> Path:
    return store.path("datasets", STAGE, f"{key}.corrections.parquet")


async def _one(store: RunStore, view: Trajectory, harness: Harness, config: CorrectionConfig, run: RolloutFn,
               sem: asyncio.Semaphore, calls: RoleCallLog | None = None,
               on_done: Callable[[Correction], object] = lambda corr: None) -> None:
    async with sem:
        agent = parse_locator(config.locator)[0] == "mle_agent"
        locator = make_locator(config.locator, role=config.locator_role, api_base=config.locator_api_base,
                               calls=calls) if agent else \
            make_locator(config.locator, expert=config.locator_expert, extra_turns=config.extra_turns)
        also = build_selector(f"judge:{config.judge}", config, calls) if config.judge else None
        suffix = SuffixOptions(student=config.student, max_m=config.max_suffix, replays=config.replays) \
            if config.mode == "suffix" else None
        rows = RowOptions(suffix=config.suffix, loss_on=config.loss_on, keep=config.keep, student=config.student,
                          extra_turns=config.extra_turns, replays=config.replays)
        corr, row = await correct_one(view, harness, locator, build_selector(config.selector, config, calls), config.expert,
                                      run, n=config.n, also=also, suffix=suffix, rows=rows)
    key = source_key(view, config)
    if row is not None:
        store.write_trajectories(STAGE, key, [row], harnesses=[harness])
    write_corrections(_paths(store, key), [corr])
    store.mark_done(STAGE, key, {"source": view.id, "status": corr.status, "corrected": corr.corrected_trajectory_id})
    on_done(corr)


def pool_rollouts(pool: RolloutPool, executor: ThreadPoolExecutor) -> RolloutFn:
    """A `RolloutFn` on the Ray pool: each batch streams on the pool from a thread of `executor` (several
    streams share the pool's actors and per-server limits), so concurrent sources keep the servers busy."""

    async def run(jobs: Sequence[RolloutJob]) -> list[Trajectory]:
        return await asyncio.get_running_loop().run_in_executor(executor, pool.run, list(jobs))

    return run


def _ticker(total: int, done: int) -> Callable[[Correction], None]:
    """The stage's progress line: failing sources finished of `total` (`done` loaded from the store), ETA, and how
    many of those run here were kept (status `corrected`)."""
    ticker = Progress("correction sources", total, done, emit=run_emitter(log))
    kept = [0]

    def on_done(corr: Correction) -> None:
        kept[0] += corr.status == "corrected"
        ticker.label = f"correction sources ({kept[0]} kept of {ticker.done + 1 - done} run here)"
        ticker.update(ticker.done + 1)

    return on_done


def correct_run(store: RunStore, failing: list[Trajectory], harnesses: dict[str, Harness], config: CorrectionConfig,
                run: RolloutFn | None = None, cap: SpendCap | None = None) -> CorrectionResult:
    """Correct every failing rollout (views are taken here; passing ones are skipped but count for the card's
    capability-boundary share: pass the student's samples whole); `harnesses` maps harness
    id -> harness; `run` runs episodes (default: in this process; the round passes the Ray pool's,
    `pool_rollouts`). `cap`: the run's API budget, checked before every batch of episodes (BudgetSpent stops
    the stage; every source finished before it is stored, every episode cached)."""
    boundary = boundary_instances((t.instance.id, t.passed) for t in failing)  # passing samples count here
    failing = [t for t in failing if not t.passed]
    leaked = [t for t in failing if t.instance.split not in config.splits]
    if leaked:
        raise ValueError(f"leakage: {len(leaked)} rollout(s) come from split(s) "
                         f"{', '.join(sorted({t.instance.split for t in leaked}))} (e.g. {leaked[0].instance.id}); "
                         f"correction rows may only come from {', '.join(config.splits)}")
    missing = sorted({t.harness_id for t in failing} - set(harnesses))
    if missing:
        raise ValueError(f"no harness given for harness id(s) {', '.join(missing)} of the trajectories")
    cached = CachedRollouts(run or local_rollouts(config.concurrency * 2), store.path("cache", STAGE, "x").parent,
                            cap=cap)
    done = store.done(STAGE)
    todo = [t.view() for t in failing if source_key(t, config) not in done]

    calls = RoleCallLog(store.path("costs", ROLE_CALLS), cap=cap)  # judge / locator calls: cost and outcome
    on_done = _ticker(len(failing), len(failing) - len(todo))

    async def all_of() -> None:
        sem = asyncio.Semaphore(config.concurrency)
        await asyncio.gather(*(_one(store, v, harnesses[v.harness_id], config, cached, sem, calls, on_done)
                               for v in todo))

    if todo:
        asyncio.run(all_of())
        calls.raise_if_failed(STAGE)  # a role that failed every call: fail loudly, not an empty arm
    keys = [source_key(t, config) for t in failing]
    corrections = [c for k in keys for c in read_corrections(_paths(store, k))]
    rows = store.read_chunks(STAGE, [k for k in keys if store.has(STAGE, k)])
    write_corrections(store.path("datasets", STAGE, "corrections.parquet"), corrections)
    no_keys = {r: {"api_key"} for r in ("student", "expert", "locator_expert")}  # never write a key to disk
    card = {**dataset_card(corrections, boundary), "config": config.model_dump(mode="json", exclude=no_keys)}
    atomic_write_text(store.path("datasets", STAGE, "card.json"), json.dumps(card, indent=2, default=str))
    return CorrectionResult(corrections=corrections, corrected=rows, reused=len(failing) - len(todo),
                            calls=dict(cached.calls), model_s=dict(cached.model_s), other_s=dict(cached.other_s),
                            wall_s=cached.wall_s, card=card)
