"""A two-node Ray cluster on this machine (`ray start --head` + `ray start --address`), the rollout pool's actors
spread over both nodes, the worker node killed mid-stage: every rollout comes back exactly once, and passes.

The cluster has its own temp dir and ports, so it never meets the session's local Ray (`ray_local`); the
driver is a separate process (tests/scaleout_ray_driver.py) that connects with `ray.init(address=...)`. The
rollouts are the oracle's (no model server), so the test is about the cluster. Node death is detected by the
GCS health check, shortened here (RAY_health_check_*) so the stage does not wait ~30 s for it. The cluster
uses Ray's token authentication with a token of its own (RAY_AUTH_TOKEN, given to both nodes and the driver),
whatever ~/.ray/auth_token holds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RAY = Path(sys.executable).with_name("ray")
FAST_NODE_DEATH = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "1000",
                   "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "1000"}


def _free_ports(n: int) -> list[int]:
    """n distinct free ports (all held open while choosing, so the OS cannot hand out one twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_cmd(temp_dir: str, resource: str, head_port: int | None, ports: list[int]) -> list[str]:
    """`ray start ... --block` for one node with every listening port its own (two nodes share this host)."""
    cmd = [str(RAY), "start", "--block", "--num-cpus", "1", "--resources", json.dumps({resource: 1}),
           "--disable-usage-stats", "--min-worker-port", "0", "--max-worker-port", "0",
           "--node-manager-port", "0", "--object-manager-port", "0", "--object-store-memory", str(200 * 2**20),
           "--dashboard-agent-listen-port", str(ports[0]), "--dashboard-agent-grpc-port", str(ports[1]),
           "--runtime-env-agent-port", str(ports[2]), "--metrics-export-port", str(ports[3])]
    if head_port is None:
        return cmd + ["--address", "", "--temp-dir", temp_dir]
    return cmd + ["--head", "--port", str(head_port), "--include-dashboard", "false", "--temp-dir", temp_dir]


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start --head exited with {proc.returncode}: {log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"Ray head did not listen on {port} within {timeout_s}s")


def _stop(proc: subprocess.Popen) -> None:
    """SIGKILL the node's process group: `ray start --block` and everything it started (GCS, raylet, agents,
    workers). SIGTERM to `ray start --block` leaves its GCS and monitor running for many seconds (seen)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.fixture
def ray_cluster() -> Iterator[dict]:
    """Head + worker node; yields the GCS address and the worker's process group id. Torn down in any case."""
    temp_dir = tempfile.mkdtemp(prefix="rc-", dir="/tmp")  # short: Ray's unix sockets live under it
    port, *ports = _free_ports(9)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    env = {**os.environ, **FAST_NODE_DEATH, **auth, "RAY_worker_niceness": "0"}
    logs = Path(temp_dir) / "start-logs"
    logs.mkdir()
    procs: list[subprocess.Popen] = []
    try:
        head_cmd = _node_cmd(temp_dir, "scaleout_head", port, ports[:4])
        procs.append(subprocess.Popen(head_cmd, env=env, start_new_session=True, stdout=open(logs / "head.out", "w"),
                                      stderr=subprocess.STDOUT))
        _wait_port(port, procs[0], logs / "head.out", timeout_s=90)
        worker_cmd = _node_cmd(temp_dir, "scaleout_worker", None, ports[4:])
        worker_cmd[worker_cmd.index("--address") + 1] = f"127.0.0.1:{port}"
        procs.append(subprocess.Popen(worker_cmd, env=env, start_new_session=True,
                                      stdout=open(logs / "worker.out", "w"), stderr=subprocess.STDOUT))
        yield {"address": f"127.0.0.1:{port}", "worker_pgid": procs[1].pid, "logs": logs, "auth": auth}
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_killed_worker_node_loses_and_duplicates_no_rollout(ray_cluster: dict, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    env = {**os.environ, **ray_cluster["auth"], "PYTHONPATH": str(REPO), "RAY_ADDRESS": ""}
    done = subprocess.run([sys.executable, str(REPO / "tests" / "scaleout_ray_driver.py"), "--address",
                           ray_cluster["address"], "--worker-pgid", str(ray_cluster["worker_pgid"]), "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    logs = "".join(p.read_text()[-2000:] for p in ray_cluster["logs"].iterdir())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:] + logs
    r = json.loads(out.read_text())

    # The actors ran on both nodes, and the worker node died with episodes in flight on it.
    assert len(set(r["actor_nodes_before"])) == 2 and r["worker_node"] in r["actor_nodes_before"], r
    assert r.get("in_flight_on_worker", 0) > 0, "the driver never caught the worker node's actor with work"
    assert 0 < r["finished_before_kill"] < len(r["jobs"])  # mid-stage: some done, some not
    assert r["worker_node"] not in r["alive_nodes_after"]
    assert r["worker_node"] not in r["actor_nodes_after"]  # the replacement actor lives on the surviving node

    # Every job came back exactly once, as a real (passing) oracle episode, none as an error.
    ids = [t["id"] for t in r["trajectories"]]
    assert len(ids) == len(set(ids)) == len(r["jobs"]) and set(ids) == set(r["jobs"])
    assert all(t["passed"] and t["stop_reason"] == "submitted" for t in r["trajectories"]), r["trajectories"]
    stats = r["stats"]
    assert stats["finished"] == len(r["jobs"]) and stats["gave_up"] == 0
    assert stats["actor_deaths"] >= 1 and stats["retries"] >= r["in_flight_on_worker"]
    assert sum(a > 1 for a in r["attempts"].values()) >= r["in_flight_on_worker"]  # the lost episodes re-ran
