"""The Ray actor behind `RolloutPool`: one process running many episodes concurrently on its event loop.

The actor is stateless between jobs: a job arrives as JSON, runs as `run_episode` on a fresh environment
(closed even when the episode fails), and goes back to the driver as JSON with its timings. A failure
inside one episode never escapes as an exception: it becomes a `Trajectory` with stop reason `error`
(score 0), as the rollout error policy says. Only the death of the actor process reaches the driver,
which retries the job elsewhere.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import time
import traceback
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.jobs import RolloutJob
from agents.records import Trajectory
from tasks.base import Environment
from tasks.records import Verdict

# Environment methods whose time counts as "the tool's" (not the pool's) in the overhead figure.
_ENV_TIMED = ("reset", "call", "submit", "verify", "replay")
MAX_ERROR_CHARS = 4000


class JobTiming(BaseModel):
    """Where one job's time went. The pool's own overhead is what is left after model and environment time."""

    model_config = ConfigDict(extra="forbid")

    key: str
    server: str | None = Field(default=None, description="api_base the episode ran against (None: in-process provider).")
    attempts: int = Field(default=1, ge=1)
    turns: int = Field(default=0, ge=0)
    actor_s: float = Field(default=0.0, description="Inside the actor: job received .. result serialised.")
    episode_s: float = Field(default=0.0, description="Inside the actor: make_env .. close.")
    model_s: float = Field(default=0.0, description="Sum of the turns' model-call latencies.")
    env_s: float = Field(default=0.0, description="Time inside the environment: make_env, its methods, close.")
    roundtrip_s: float = Field(default=0.0, description="At the driver: dispatch of the last attempt .. result back.")
    server_down: bool = Field(default=False, description="The episode ended in model_error and its server then "
                              "failed a health probe (GET /models): the pool retries the job on another replica.")

    @property
    def overhead_s(self) -> float:
        """Time of the job not spent waiting on the model or the environment (Ray transport included)."""
        return max(0.0, self.roundtrip_s - self.model_s - self.env_s)

    @property
    def in_actor_overhead_s(self) -> float:
        """The rollout loop's own time: harness rendering, hooks, records, (de)serialising the job."""
        return max(0.0, self.actor_s - self.model_s - self.env_s)

    @property
    def transport_s(self) -> float:
        """Driver <-> actor: dispatch, queueing for the actor's event loop, the result's way back."""
        return max(0.0, self.roundtrip_s - self.actor_s)

    def per_turn(self, seconds: float) -> float:
        return seconds / max(self.turns, 1)


class _EnvTimer:
    """Accumulates wall time spent in an environment's methods; nested calls (replay -> call) count once."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._depth = 0
        self._t0 = 0.0

    def timed(self, fn: Any, *args: Any) -> Any:
        """Call `fn(*args)` (environment set-up or teardown) and count its time as the environment's."""
        self._enter()
        try:
            return fn(*args)
        finally:
            self._exit()

    def _enter(self) -> None:
        if self._depth == 0:
            self._t0 = time.perf_counter()
        self._depth += 1

    def _exit(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.total_s += time.perf_counter() - self._t0

    def instrument(self, env: Environment) -> None:
        # Instance attributes shadow the class methods for this one environment only, so run_episode
        # stays unaware of the measurement and nothing else is affected.
        for name in _ENV_TIMED:
            method = getattr(env, name, None)
            if method is not None:
                setattr(env, name, self._wrap(method))

    def _wrap(self, method: Any) -> Any:
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                self._enter()
                try:
                    return await method(*args, **kwargs)
                finally:
                    self._exit()
            return timed_async

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._enter()
            try:
                return method(*args, **kwargs)
            finally:
                self._exit()
        return timed


def error_trajectory(job: RolloutJob, error: str, wall_s: float = 0.0) -> Trajectory:
    """The record of a job that produced no episode: score 0, the error text kept for the reader."""
    error = error[-MAX_ERROR_CHARS:]
    return Trajectory(
        id=job.key,
        instance=job.instance,
        harness_id=job.harness.id,
        model_id=job.model.id,
        seed=job.seed,
        messages=[],
        stop_reason="error",
        verdict=Verdict(score=0.0, failed_checks=["rollout_error"], feedback=error),
        error=error,
        wall_s=wall_s,
        tag=job.tag,
    )


async def execute_job(job: RolloutJob, api_base: str | None) -> tuple[Trajectory, JobTiming]:
    """Run one job in this process. Never raises for the job's own failure."""
    import tasks
    from agents.rollout import run_episode

    # Routing may put the conversation on a different replica than the job names; the record keeps the
    # job's model id so the trajectory id stays the job key wherever it ran.
    role = job.model if api_base is None else job.model.model_copy(update={"api_base": api_base})
    timer = _EnvTimer()
    t0 = time.perf_counter()
    env = None
    try:
        env = timer.timed(tasks.make_env, job.instance)
        timer.instrument(env)
        traj = await run_episode(role, job.harness, env, job.seed, job.limits, tag=job.tag, tool_choice=job.tool_choice,
                                 prefix=job.prefix, on_divergence="record")
    except Exception as e:  # one job's failure is scored 0, never a crash of the actor
        traj = error_trajectory(job, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
    finally:
        if env is not None:
            try:
                timer.timed(env.close)
            except Exception as e:  # a leaky close must not turn a finished episode into a failure
                logging.getLogger(__name__).warning("env.close() for %s raised %s: %s", job.instance.id, type(e).__name__, e)
    episode_s = time.perf_counter() - t0
    down = traj.stop_reason == "model_error" and api_base is not None and not await server_answers(api_base)
    traj = traj.model_copy(update={"id": job.key, "model_id": job.model.id, "tag": job.tag})
    timing = JobTiming(
        key=job.key, server=api_base, turns=len(traj.turns), episode_s=episode_s,
        model_s=sum(t.latency_s for t in traj.turns), env_s=timer.total_s, server_down=down,
    )
    return traj, timing


async def server_answers(api_base: str, timeout_s: float = 5.0) -> bool:
    """Whether the model server at `api_base` still answers (any reply below 500 to GET /models, a 401 included).

    Asked after an episode ended in `model_error`: a server that is gone (connection refused, reset, timeout)
    means the episode was lost to the infrastructure, not answered by the model."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            r = await client.get(f"{api_base.rstrip('/')}/models")
    except httpx.HTTPError:
        return False
    return r.status_code < 500


def _undo_worker_niceness() -> None:
    """Run at the default priority. Ray starts workers at nice 15 (`worker_niceness`); a rollout actor only
    relays between the model server and the environment, and behind a busy co-located server (vLLM's engine
    keeps a core busy) a niced actor waits hundreds of ms for the CPU on every turn (measured). Niceness is
    per thread on Linux, so every thread that exists now is reset; threads started later inherit it."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # not Linux: leave it
        return
    try:
        for tid in tids:
            if os.getpriority(os.PRIO_PROCESS, tid) > 0:
                os.setpriority(os.PRIO_PROCESS, tid, 0)
    except OSError as e:  # lowering niceness needs CAP_SYS_NICE or RLIMIT_NICE; start Ray with worker_niceness 0
        logging.getLogger(__name__).warning("rollout actor keeps Ray's worker niceness (%s); start Ray with "
                                            "RAY_worker_niceness=0 for lower latency", e)


def _warm_up() -> None:
    """Import what every episode needs now (seconds of imports, not charged to the first job), then move
    those long-lived objects out of the garbage collector's sight: a full collection otherwise walks ~0.5 M
    module-level objects and stalls all of the actor's episodes for 50-200 ms (measured)."""
    import gc

    import agents.rollout  # noqa: F401  (LiteLLM, harness)
    import tasks  # noqa: F401  (every family)

    gc.collect()
    gc.freeze()


class RolloutActor:
    """Async Ray actor: `run` calls overlap on one event loop (model calls are awaits, not threads)."""

    def __init__(self) -> None:
        _undo_worker_niceness()
        _warm_up()
        # Browser families: one Chromium for the actor's life, a fresh context per environment (and per oracle
        # copy), instead of a Chromium start per environment (tasks/runtime/browser_host.py).
        from tasks.runtime.browser_host import keep_browser_alive

        keep_browser_alive()

    async def ping(self) -> bool:
        return True

    async def cpu_seconds(self) -> float:
        """CPU time this actor process has used (all its threads): what a benchmark charges to the pool."""
        return time.process_time()

    async def run(self, job_json: str, api_base: str | None) -> tuple[str, str]:
        t0 = time.perf_counter()
        job = RolloutJob.model_validate_json(job_json)
        traj, timing = await execute_job(job, api_base)
        traj_json = traj.model_dump_json()
        timing.actor_s = time.perf_counter() - t0
        return traj_json, timing.model_dump_json()
