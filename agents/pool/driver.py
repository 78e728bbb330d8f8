"""Parallel rollouts on a pool of Ray actors.

    from agents.jobs import RolloutJob
    jobs = [RolloutJob(instance=i, harness=h, model=role, seed=s) for i in insts for s in range(3)]
    with RolloutPool(n_actors=2) as pool:
        for traj in pool.stream(jobs): ...          # as they finish
        trajs = pool.run(jobs, progress=True)       # in job order

Contract:
- Every job yields exactly one `Trajectory` whose id is the job key (`RolloutJob.key`); jobs with the same
  key are the same job and run once.
- The driver schedules: at most `concurrency_per_server` episodes in flight per model server (api_base);
  a model listed in `api_bases` is routed to its least-loaded server when the episode starts, and the whole
  conversation stays on that server. Jobs go to the actor with the fewest episodes in flight.
- On a cluster the actors are spread over the alive nodes that have CPUs (round robin; a replacement goes to
  the node with the fewest of this pool's actors; pinned hard at the start, softly for a replacement).
- An actor that dies (crash, OOM, `ray.kill`) is replaced and its in-flight jobs are retried; a job tried
  `max_attempts` times without an answer becomes a `stop_reason="error"` trajectory with the last error
  text (score 0). A failure inside an episode is the episode's result, never retried, with one exception:
- A model server that dies: an episode that ends in `model_error` on a server that then fails a health probe
  (`JobTiming.server_down`) marks that server down for the rest of the pool's life (one warning names it)
  and, while the model has another server, the job starts over there (an attempt, counted in
  `stats.rerouted`). With no server left the `model_error` trajectory is the job's result.
- Trajectories come back through Ray object refs to the driver; actors share no state. A stream starts the
  jobs that fit in the slots its finished episodes freed before it hands their trajectories over, so what
  the consumer does with each one (store it, score it) never leaves a server slot idle.
- At most `family_limits[family]` episodes of a family in flight over the pool (default: no family limit).
  A bound on latency for heavy families (a browser episode keeps about a core busy), paid in throughput:
  measured on 2 cores, 10 website_admin episodes ran 2.2x faster each under a limit of 2 than all at once,
  but the 10 took 53 s instead of 30 s (benchmarks/README.md).
- Several threads may stream on one pool at once (the search seeds of a harness search do): they share the
  actors and the per-server limits; a stream whose jobs find every slot of their server taken by other
  streams waits for one to free (first come, first served), it is never refused.

`RolloutJob` and `Limits` live in `agents.jobs` (re-exported here).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
import ray.exceptions
from pydantic import BaseModel, ConfigDict

from agents.jobs import Limits, RolloutJob
from agents.pool.actor import JobTiming, RolloutActor, error_trajectory
from agents.records import Trajectory

# For a Ray this process starts: workers at the default priority, not Ray's nice 15. Rollout actors only
# relay between model servers and environments; niced behind a busy co-located vLLM they wait for the CPU
# on every turn. (Actors also reset their own niceness where allowed; see pool_actor.)
LOCAL_RAY_SYSTEM_CONFIG: dict[str, Any] = {"worker_niceness": 0}
ACTOR_MAX_CONCURRENCY = 1024  # the driver enforces the real limits; this only has to stay out of the way
log = logging.getLogger(__name__)
_WAIT_S = 1.0  # how long one ray.wait blocks; short so a consumer breaking out is noticed promptly


class PoolStats(BaseModel):
    """Counters over the pool's life (what a run report shows next to the success rates)."""

    model_config = ConfigDict(extra="forbid")

    finished: int = 0
    retries: int = 0
    actor_deaths: int = 0
    gave_up: int = 0
    rerouted: int = 0
    servers_down: list[str] = []


class ActorLoad(BaseModel):
    """A snapshot of one actor slot: its current handle and how many episodes it runs now."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    slot: int
    handle: Any
    in_flight: int


@dataclass
class _Slot:
    handle: Any
    generation: int = 0
    in_flight: int = 0


@dataclass
class _Flight:
    job: RolloutJob
    attempt: int
    slot: int
    generation: int
    server: str | None
    t0: float
    errors: list[str]


@dataclass
class _Pending:
    job: RolloutJob
    attempt: int = 0
    errors: list[str] = field(default_factory=list)


class RolloutPool:
    """A pool of async Ray actors running rollout jobs; see the module docstring for the contract."""

    def __init__(
        self,
        n_actors: int = 2,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        concurrency_per_server: int = 8,
        max_attempts: int = 3,
        api_bases: dict[str, list[str]] | None = None,
        family_limits: dict[str, int] | None = None,
    ) -> None:
        if n_actors < 1:
            raise ValueError(f"n_actors must be >= 1, got {n_actors}")
        if concurrency_per_server < 1:
            raise ValueError(f"concurrency_per_server must be >= 1, got {concurrency_per_server}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        for model, bases in (api_bases or {}).items():
            if not bases:
                raise ValueError(f"api_bases['{model}'] is empty; give at least one server URL")
        for family, limit in (family_limits or {}).items():
            if limit < 1:
                raise ValueError(f"family_limits['{family}'] must be >= 1, got {limit}")
        self.n_actors = n_actors
        self.concurrency_per_server = concurrency_per_server
        self.max_attempts = max_attempts
        self.api_bases = {m: list(b) for m, b in (api_bases or {}).items()}
        self.family_limits = dict(family_limits or {})
        self.stats = PoolStats()
        self.timings: dict[str, JobTiming] = {}
        self._owns_ray = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                         _system_config=LOCAL_RAY_SYSTEM_CONFIG)
            self._owns_ray = True
        # num_cpus=0: an actor mostly awaits model servers, so it must not hold a core that the
        # replacement of a dead actor (or another pool) would wait for.
        self._actor_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=ACTOR_MAX_CONCURRENCY)(RolloutActor)
        self._slot_nodes: dict[int, str | None] = {}
        self._placed: set[int] = set()
        self._slots = [_Slot(handle=self._new_actor(i)) for i in range(n_actors)]
        self._server_load: collections.Counter[str | None] = collections.Counter()
        self._family_load: collections.Counter[str] = collections.Counter()
        # guards the scheduling state (slots, server loads, stats) across concurrent streams; notified
        # whenever a flight is released, so a stream waiting for room looks again
        self._sched = threading.Condition(threading.RLock())
        self._closed = False

    # --- public -----------------------------------------------------------------------------------
    def stream(self, jobs: Sequence[RolloutJob]) -> Iterator[Trajectory]:
        """Yield one trajectory per distinct job key, in order of completion."""
        if self._closed:
            raise RuntimeError("this RolloutPool was shut down; create a new one")
        unique: dict[str, RolloutJob] = {}
        for job in jobs:
            unique.setdefault(job.key, job)
        pending: collections.deque[_Pending] = collections.deque(_Pending(j) for j in unique.values())
        flights: dict[Any, _Flight] = {}
        done: set[str] = set()
        try:
            while pending or flights:
                if not self._start(pending, flights):
                    continue  # every slot its jobs need is held by other streams; one has freed since
                ready, _ = ray.wait(list(flights), num_returns=1, timeout=_WAIT_S)
                if ready:  # and every other finished flight, so all their slots refill at once
                    more, _ = ray.wait(list(flights), num_returns=len(flights), timeout=0)
                    ready = list(dict.fromkeys([*ready, *more]))
                finished = []
                with self._sched:
                    for ref in ready:
                        traj = self._collect(ref, flights.pop(ref), pending)
                        if traj is not None and traj.id not in done:
                            done.add(traj.id)
                            self.stats.finished += 1
                            finished.append(traj)
                    # refill the freed slots before the consumer gets the trajectories: what it does with
                    # each one (store it, score it) must not leave the servers idle
                    self._dispatch(pending, flights)
                    self._sched.notify_all()
                yield from finished
        finally:
            with self._sched:
                for ref, flight in flights.items():  # the consumer stopped early: free the servers
                    ray.cancel(ref)
                    self._release(flight)
                self._sched.notify_all()

    def run(self, jobs: Sequence[RolloutJob], progress: bool = False) -> list[Trajectory]:
        """All trajectories, in job order (a repeated job gets the same trajectory at each position)."""
        jobs = list(jobs)
        by_key: dict[str, Trajectory] = {}
        n_unique = len({j.key for j in jobs})
        if not progress:
            for traj in self.stream(jobs):
                by_key[traj.id] = traj
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = (TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                       TimeElapsedColumn())
            with Progress(*columns, transient=False) as bar:
                task = bar.add_task("", total=n_unique)
                passed = 0
                for traj in self.stream(jobs):
                    by_key[traj.id] = traj
                    passed += traj.passed
                    bar.update(task, advance=1, description=f"passed {passed}/{len(by_key)}")
        return [by_key[j.key] for j in jobs]

    def actor_loads(self) -> list[ActorLoad]:
        """Current actors and their episodes in flight (for monitoring, and for chaos tests to pick a victim)."""
        return [ActorLoad(slot=i, handle=s.handle, in_flight=s.in_flight) for i, s in enumerate(list(self._slots))]

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            ray.kill(slot.handle, no_restart=True)
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> "RolloutPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- scheduling -------------------------------------------------------------------------------
    def _servers_for(self, job: RolloutJob) -> list[str | None]:
        """The job's servers, less those marked down (all of them if every one is down)."""
        servers = list(self.api_bases.get(job.model.model, [job.model.api_base]))
        alive = [s for s in servers if s not in self.stats.servers_down]
        return alive or servers

    def server_loads(self) -> dict[str | None, int]:
        """Episodes in flight per model server (None: in-process providers), for monitoring and chaos tests."""
        return {s: n for s, n in self._server_load.items() if n}

    def family_loads(self) -> dict[str, int]:
        """Episodes in flight per task family (for monitoring and the family-limit test)."""
        return {f: n for f, n in self._family_load.items() if n}

    def _capacity(self, server: str | None) -> int:
        # Providers running in the actor process (the oracle) have no server; bound them per actor.
        return self.concurrency_per_server * (self.n_actors if server is None else 1)

    def _start(self, pending: collections.deque[_Pending], flights: dict[Any, _Flight]) -> bool:
        """Dispatch what fits; False (after waiting for a release) when this stream has nothing in flight
        because other streams hold the slots its jobs need."""
        with self._sched:
            self._dispatch(pending, flights)
            if flights:
                return True
            if not sum(self._server_load.values()):
                raise RuntimeError("no job could be dispatched (internal scheduling error)")
            self._sched.wait(timeout=_WAIT_S)
            return False

    def _dispatch(self, pending: collections.deque[_Pending], flights: dict[Any, _Flight]) -> None:
        """Start every pending job whose server has room, FIFO per server, on the least-loaded actor."""
        waiting: collections.deque[_Pending] = collections.deque()
        while pending:
            item = pending.popleft()
            server = min(self._servers_for(item.job), key=lambda s: self._server_load[s])
            family = item.job.instance.family
            if (self._server_load[server] >= self._capacity(server)
                    or self._family_load[family] >= self.family_limits.get(family, 1 << 30)):
                waiting.append(item)
                continue
            slot_i = min(range(len(self._slots)), key=lambda i: self._slots[i].in_flight)
            slot = self._slots[slot_i]
            t0 = time.perf_counter()  # before .remote(): the actor may start (and its clock run) before it returns
            ref = slot.handle.run.remote(item.job.model_dump_json(), server)
            flights[ref] = _Flight(item.job, item.attempt + 1, slot_i, slot.generation, server, t0,
                                   item.errors)
            slot.in_flight += 1
            self._server_load[server] += 1
            self._family_load[family] += 1
        pending.extend(waiting)

    def _release(self, flight: _Flight) -> None:
        self._server_load[flight.server] -= 1
        self._family_load[flight.job.instance.family] -= 1
        slot = self._slots[flight.slot]
        if slot.generation == flight.generation:
            slot.in_flight -= 1

    def _replace_actor(self, slot_i: int, generation: int) -> None:
        slot = self._slots[slot_i]
        if slot.generation != generation:
            return  # an earlier failed ref of the same dead actor already replaced it
        self.stats.actor_deaths += 1
        try:
            ray.kill(slot.handle, no_restart=True)
        except Exception:  # already gone; the kill only makes sure a half-alive actor is not reused
            pass
        self._slots[slot_i] = _Slot(handle=self._new_actor(slot_i), generation=generation + 1)

    def _new_actor(self, slot_i: int) -> Any:
        """Start the actor of one slot on the alive node with the fewest of this pool's actors.

        Ray's SPREAD strategy left both actors of a two-node cluster on the head (seen with Ray 2.60 and
        0-CPU actors), so nodes are chosen here. Nodes with no CPU (a KubeRay head started with num-cpus 0)
        take no actors when others have CPUs.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        with_cpu = [n["NodeID"] for n in nodes if n.get("Resources", {}).get("CPU", 0) > 0]
        candidates = with_cpu or [n["NodeID"] for n in nodes]
        self._slot_nodes.pop(slot_i, None)
        soft = slot_i in self._placed
        self._placed.add(slot_i)
        if len(candidates) < 2:
            self._slot_nodes[slot_i] = candidates[0] if candidates else None
            return self._actor_cls.remote()
        used = collections.Counter(self._slot_nodes.values())
        node = min(candidates, key=lambda n: used[n])
        self._slot_nodes[slot_i] = node
        # Hard at the pool's start (soft placement once put both actors on one node of a loaded two-node
        # cluster); soft for a replacement, whose chosen node may be the next to go.
        return self._actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=node, soft=soft)).remote()

    def _collect(self, ref: Any, flight: _Flight, pending: collections.deque[_Pending]) -> Trajectory | None:
        """Turn one finished ref into a trajectory, or queue the job again if its actor died."""
        self._release(flight)
        try:
            traj_json, timing_json = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self._replace_actor(flight.slot, flight.generation)
            return self._retry_or_give_up(flight, f"actor died: {type(e).__name__}: {e}", pending)
        except ray.exceptions.RayTaskError as e:
            # The actor turns every episode failure into a trajectory, so this is a bug in the job's own
            # handling (e.g. it does not deserialise): deterministic, so retrying would only repeat it.
            self.stats.gave_up += 1
            cause = e.cause if e.cause is not None else e
            return error_trajectory(flight.job, f"rollout actor raised {type(cause).__name__}: {cause}")
        except ray.exceptions.RayError as e:  # transport failures (object lost, ...): count an attempt
            return self._retry_or_give_up(flight, f"{type(e).__name__}: {e}", pending)
        traj = Trajectory.model_validate_json(traj_json)
        timing = JobTiming.model_validate_json(timing_json)
        if timing.server_down and flight.server is not None and self._server_failed(flight, traj):
            return self._retry_or_give_up(flight, f"model server {flight.server} down: {traj.error}", pending)
        self.timings[traj.id] = timing.model_copy(
            update={"attempts": flight.attempt, "roundtrip_s": time.perf_counter() - flight.t0})
        return traj

    def _server_failed(self, flight: _Flight, traj: Trajectory) -> bool:
        """Mark the flight's server down; True when the job has another server to start over on."""
        server = flight.server
        if server not in self.stats.servers_down:
            self.stats.servers_down.append(server)
            others = [s for s in self.api_bases.get(flight.job.model.model, []) if s not in self.stats.servers_down]
            error = traj.error.splitlines()[0][:300] if traj.error else ""
            log.warning("model server %s is down (an episode on it ended in model_error: %s; then GET /models "
                        "failed): no more episodes go to it in this pool; its jobs start over on %s", server, error,
                        others or "no other server of the model (they end as model_error)")
        if not [s for s in self._servers_for(flight.job) if s not in self.stats.servers_down]:
            return False
        self.stats.rerouted += 1
        log.info("job %s (%s): lost with server %s, retried on another server", flight.job.key,
                 flight.job.instance.id, server)
        return True

    def _retry_or_give_up(self, flight: _Flight, error: str, pending: collections.deque[_Pending]) -> Trajectory | None:
        errors = [*flight.errors, error]
        if flight.attempt < self.max_attempts:
            self.stats.retries += 1
            pending.appendleft(_Pending(flight.job, attempt=flight.attempt, errors=errors))
            return None
        self.stats.gave_up += 1
        summary = f"gave up after {flight.attempt} attempts; last error: {error}"
        return error_trajectory(flight.job, summary)


__all__ = ["LOCAL_RAY_SYSTEM_CONFIG", "ActorLoad", "Limits", "PoolStats", "RolloutJob", "RolloutPool"]
