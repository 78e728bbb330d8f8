"""The deployments of deploy/prefect.yaml on a real Prefect server process and a process worker.

Not the ephemeral API: `prefect server start` on a free port (its own PREFECT_HOME), a `process` work pool,
`prefect deploy` of the project's own deploy/prefect.yaml (one deployment per test), a run of it started through
the API, and `prefect worker start --run-once` that picks it up and runs the flow in a child process from this
checkout (the yaml's pull step: COEVO_CHECKOUT). One server serves both tests.
- `nightly-evaluation`: the registry holds one promoted offline pair (the SIMULATED `flawed/{family}@expert`
  student), so the flow is the real nightly at tiny scale.
- `evaluation-local` (the on-demand evaluation): an offline config (the SIMULATED flawed student and the oracle,
  one family) at two test instances.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agents.tables.trajectories import read_frame
from deploy.vllm_server import free_port
from flows.rollouts import slug
from flows.local import server_env
from flows.ops.registry import Promotion, PromotionRegistry
from flows.store import RunStore
from harness import baseline
from tests.ops_helpers import FAMILY, REPO, api_post, child_env, small_config, stop_group, wait_healthy

pytestmark = pytest.mark.slow
PREFECT = str(Path(sys.executable).parent / "prefect")
NIGHT = "2026-12-01"


def _prefect(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([PREFECT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _seed_registry(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    h = baseline(FAMILY)
    h.dump(tmp_path / "h_star.yaml")
    PromotionRegistry.under(runs).promote(Promotion(
        family=FAMILY, student=f"flawed/{FAMILY}@expert", harness_id=h.id, harness_path=str(tmp_path / "h_star.yaml"),
        run_id="seed", round=1))
    return runs


def _wait_final(url: str, flow_run_id: str, worker: subprocess.Popen[str], timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = httpx.get(f"{url}/api/flow_runs/{flow_run_id}", timeout=10).json()
        if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") and worker.poll() is not None:
            return run
        time.sleep(2)
    raise AssertionError(f"flow run {flow_run_id} still {run['state_type']} after {timeout} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """`prefect server start` on a free port (its own PREFECT_HOME, scheduler off) with the `coevo` process pool;
    yields (url, the clients' environment) and stops the server (its process group) after the module."""
    tmp = tmp_path_factory.mktemp("server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    base = child_env(tmp / "prefect", PREFECT_SERVER_ANALYTICS_ENABLED="false",
                     PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false")
    client = {**base, "PREFECT_API_URL": f"{url}/api", "COEVO_CHECKOUT": str(REPO)}
    with (tmp / "server.log").open("w") as log:
        proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=REPO,
                                env=server_env("127.0.0.1", port, base), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            wait_healthy(url, proc, timeout=180)
            _prefect(["work-pool", "create", "coevo", "--type", "process"], client)
            yield url, client
        finally:
            stop_group(proc)


def _deploy_and_run(url: str, client: dict[str, str], tmp_path: Path, deployment: str, flow_name: str,
                    params: dict[str, object]) -> dict:
    """`prefect deploy` of one deployment of deploy/prefect.yaml, a run of it through the API, and a process worker
    (`--run-once`) that runs it from this checkout; returns the finished flow run."""
    _prefect(["--no-prompt", "deploy", "--prefect-file", "deploy/prefect.yaml", "--name", deployment], client,
             timeout=180)
    started = _prefect(["deployment", "run", f"{flow_name}/{deployment}", "--params", json.dumps(params)], client)
    [flow_run] = api_post(url, "flow_runs/filter", {"deployments": {"name": {"any_": [deployment]}}})
    assert flow_run["state_type"] == "SCHEDULED", started.stdout
    with (tmp_path / "worker.log").open("w") as wlog:
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "coevo", "--run-once"], cwd=tmp_path,
                                  env=client, stdout=wlog, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            run = _wait_final(url, flow_run["id"], worker)
        finally:
            stop_group(worker)
    assert run["state_type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]
    assert worker.returncode == 0 and run["deployment_id"]
    return run


def _keys(url: str, flow_run_id: str) -> set[str]:
    return {a["key"] for a in api_post(url, "artifacts/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})}


def test_nightly_deployment_runs_on_a_server_and_worker(server: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, client = server
    runs = _seed_registry(tmp_path)
    params = {"runs_dir": str(runs), "config_path": str(small_config(tmp_path)), "night": NIGHT}
    run = _deploy_and_run(url, client, tmp_path, "nightly-evaluation", "nightly-evaluation", params)
    assert {f"nightly-report-{NIGHT}", f"nightly-{NIGHT}"} <= _keys(url, run["id"])
    subflows = api_post(url, "flow_runs/filter", {"flow_runs": {"name": {"any_": [f"coevolution-nightly-{NIGHT}-{FAMILY}"]}}})
    assert [r["state_type"] for r in subflows] == ["COMPLETED"]
    assert slug("round-report", f"nightly-{NIGHT}-{FAMILY}", "r0") in _keys(url, subflows[0]["id"])
    # what the run left on disk: the nightly report and the score in the registry
    assert run["name"] == f"nightly-{NIGHT}"
    [score] = PromotionRegistry.under(runs).nightly(FAMILY)
    assert score.night == NIGHT and score.n == 2 and score.run_id == f"nightly-{NIGHT}-{FAMILY}"
    assert "No regression." in (runs / "nightly" / f"{NIGHT}.md").read_text()


def test_on_demand_evaluation_deployment_runs_on_a_server_and_worker(server: tuple[str, dict[str, str]],
                                                                     tmp_path: Path) -> None:
    """`evaluation-local` (flows/ops/deployments.py): the config's student and expert on one family x two test
    instances, the round [evaluate_pairs, report] as a subflow; its report and artifacts."""
    url, client = server
    params = {"config_path": str(small_config(tmp_path, name="ondemand")), "n_instances": 2}
    run = _deploy_and_run(url, client, tmp_path, "evaluation-local", "evaluation-on-demand", params)
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if (p / "state.json").exists()]
    subflows = api_post(url, "flow_runs/filter", {"flow_runs": {"name": {"any_": [f"coevolution-{run_dir.name}"]}}})
    assert [r["state_type"] for r in subflows] == ["COMPLETED"] and subflows[0]["parent_task_run_id"]
    r0 = run_dir / "rounds" / "r0"
    assert set(RunStore.open_existing(run_dir / "rounds", "r0").done("round")) == {"evaluate_pairs", "report"}
    for pair in ("student", "expert"):
        frame = read_frame(r0 / "trajectories" / "eval" / f"pairs.{pair}")
        assert frame.height == 2 and set(frame["family"]) == {FAMILY} and frame["instance_id"].n_unique() == 2
    report = (r0 / "reports" / "report.md").read_text()
    assert "| student |" in report and "| expert |" in report and "## pass@1, pass@k and pass^k per family" in report
    slug_id = run_dir.name.lower()
    assert {f"round-report-{slug_id}-r0", f"round-pass-k-{slug_id}-r0"} <= _keys(url, subflows[0]["id"])
    assert run["name"] and run["state_type"] == "COMPLETED"
