"""Driver of the two-node Ray test (tests/test_scaleout_ray.py), run as its own process so it can connect to the
test's cluster with `ray.init(address=...)` while the pytest process keeps its own local Ray.

    python tests/scaleout_ray_driver.py --address 127.0.0.1:PORT --worker-pgid PGID --out result.json

Waits for the two nodes, runs oracle rollouts on a RolloutPool whose actors sit one per node, kills the
worker node (SIGKILL to `ray start --block` and every process under it: raylet, agents, and the worker
processes, which Ray puts in process groups of their own) while its actor has episodes in flight, and writes what the test checks as JSON: the trajectories' ids and scores, the pool's counters and
per-job attempts, where the actors ran before and after.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import ray  # noqa: E402

import harness  # noqa: E402
import tasks  # noqa: E402
from agents.jobs import Limits, RolloutJob  # noqa: E402
from agents.pool.driver import RolloutPool  # noqa: E402
from agents.records import ModelRole  # noqa: E402

WORKER_RESOURCE = "scaleout_worker"


def _alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n["Alive"]]


def _wait_for_nodes(n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(_alive_nodes()) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(_alive_nodes())} of {n} Ray nodes came up in {timeout_s:.0f}s")
        time.sleep(0.5)


def _node_of(handle: Any) -> str:
    return ray.get(handle.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id()), timeout=120)


def _jobs(family: str, n_instances: int, seeds: int) -> list[RolloutJob]:
    h = harness.baseline(family)
    role = ModelRole(model=f"oracle/{family}")
    return [RolloutJob(instance=i, harness=h, model=role, seed=s, limits=Limits(max_turns=40), tag="scaleout-ray")
            for i in tasks.instances(family, "val")[:n_instances] for s in range(seeds)]


def _kill_node(root_pid: int) -> None:
    """The node's whole process tree at once, like a machine that lost power."""
    import psutil

    procs = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def _wait_node_dead(node_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while node_id in {n["NodeID"] for n in _alive_nodes()} and time.monotonic() < deadline:
        time.sleep(0.5)


def _killer(pool: RolloutPool, worker_node: str, slot_nodes: dict[int, str], pgid: int,
            record: dict[str, Any], stop: threading.Event) -> None:
    """Kill the worker node once some jobs are done and its actor has episodes in flight."""
    while not stop.is_set():
        on_worker = [a for a in pool.actor_loads() if slot_nodes.get(a.slot) == worker_node]
        if pool.stats.finished >= 2 and any(a.in_flight > 0 for a in on_worker):
            record["in_flight_on_worker"] = sum(a.in_flight for a in on_worker)
            record["finished_before_kill"] = pool.stats.finished
            _kill_node(pgid)
            record["killed_at"] = time.time()
            return
        time.sleep(0.002)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--worker-pgid", type=int, required=True)
    ap.add_argument("--family", default="stock_alert")
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    ray.init(address=args.address, log_to_driver=False, configure_logging=False)
    _wait_for_nodes(2, timeout_s=120)
    worker_node = next(n["NodeID"] for n in _alive_nodes() if WORKER_RESOURCE in n["Resources"])
    jobs = _jobs(args.family, args.instances, args.seeds)
    record: dict[str, Any] = {"jobs": [j.key for j in jobs], "worker_node": worker_node}
    with RolloutPool(n_actors=2, concurrency_per_server=3, max_attempts=3) as pool:
        slot_nodes = {a.slot: _node_of(a.handle) for a in pool.actor_loads()}
        record["actor_nodes_before"] = sorted(slot_nodes.values())
        if worker_node not in slot_nodes.values():
            raise SystemExit(f"no actor on the worker node: {record}")
        stop = threading.Event()
        killer = threading.Thread(target=_killer, args=(pool, worker_node, slot_nodes, args.worker_pgid, record, stop))
        killer.start()
        t0 = time.time()
        try:
            trajs = list(pool.stream(jobs))
        finally:
            stop.set()
            killer.join()
        record["stage_s"] = time.time() - t0
        _wait_node_dead(worker_node, timeout_s=30)
        record["actor_nodes_after"] = sorted(_node_of(a.handle) for a in pool.actor_loads())
        record["stats"] = pool.stats.model_dump()
        record["attempts"] = {k: t.attempts for k, t in pool.timings.items()}
    record["trajectories"] = [{"id": t.id, "passed": t.passed, "stop_reason": t.stop_reason, "error": t.error}
                              for t in trajs]
    record["alive_nodes_after"] = [n["NodeID"] for n in _alive_nodes()]
    Path(args.out).write_text(json.dumps(record, indent=1))
    ray.shutdown()


if __name__ == "__main__":
    main()
