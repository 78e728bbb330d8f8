"""The nightly deployment of deploy/prefect.yaml on a real Prefect server process and a process worker.

Not the ephemeral API: `prefect server start` on a free port (its own PREFECT_HOME), a `process` work pool,
`prefect deploy` of the project's own deploy/prefect.yaml (the `nightly-evaluation` deployment), a run of
it started through the API, and `prefect worker start --run-once` that picks it up and runs the flow in a
child process from this checkout (the yaml's pull step: COEVO_CHECKOUT). The registry holds one promoted
offline pair (the SIMULATED `flawed/{family}@expert` student), so the flow is the real nightly at tiny scale.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from deploy.vllm_server import free_port
from flows.rollouts import slug
from flows.local import server_env
from flows.ops.registry import Promotion, PromotionRegistry
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


def test_nightly_deployment_runs_on_a_server_and_worker(tmp_path: Path) -> None:
    runs = _seed_registry(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    base = child_env(tmp_path / "prefect", PREFECT_SERVER_ANALYTICS_ENABLED="false",
                     PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false")
    client = {**base, "PREFECT_API_URL": f"{url}/api", "COEVO_CHECKOUT": str(REPO)}
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], cwd=REPO,
                              env=server_env("127.0.0.1", port, base), stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    worker = None
    try:
        wait_healthy(url, server, timeout=180)
        _prefect(["work-pool", "create", "coevo", "--type", "process"], client)
        _prefect(["--no-prompt", "deploy", "--prefect-file", "deploy/prefect.yaml", "--name", "nightly-evaluation"],
                 client, timeout=180)
        params = {"runs_dir": str(runs), "config_path": str(small_config(tmp_path)), "night": NIGHT}
        started = _prefect(["deployment", "run", "nightly-evaluation/nightly-evaluation", "--params", json.dumps(params)],
                           client)
        [flow_run] = api_post(url, "flow_runs/filter", {"deployments": {"name": {"any_": ["nightly-evaluation"]}}})
        assert flow_run["state_type"] == "SCHEDULED", started.stdout
        wlog = (tmp_path / "worker.log").open("w")
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "coevo", "--run-once"], cwd=tmp_path,
                                  env=client, stdout=wlog, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        run = _wait_final(url, flow_run["id"], worker)
        assert run["state_type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-4000:]
        assert worker.returncode == 0
        keys = {a["key"] for a in api_post(url, "artifacts/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})}
        assert {f"nightly-report-{NIGHT}", f"nightly-{NIGHT}"} <= keys, keys
        subflows = api_post(url, "flow_runs/filter", {"flow_runs": {"name": {"any_": [f"coevolution-nightly-{NIGHT}-{FAMILY}"]}}})
        assert [r["state_type"] for r in subflows] == ["COMPLETED"]
        sub_keys = {a["key"] for a in api_post(url, "artifacts/filter", {"flow_runs": {"id": {"any_": [subflows[0]["id"]]}}})}
        assert slug("round-report", f"nightly-{NIGHT}-{FAMILY}", "r0") in sub_keys, sub_keys
    finally:
        if worker is not None:
            stop_group(worker)
        stop_group(server)
        log.close()
    # what the run left on disk: the nightly report and the score in the registry
    assert run["deployment_id"] and run["name"] == f"nightly-{NIGHT}"
    [score] = PromotionRegistry.under(runs).nightly(FAMILY)
    assert score.night == NIGHT and score.n == 2 and score.run_id == f"nightly-{NIGHT}-{FAMILY}"
    assert "No regression." in (runs / "nightly" / f"{NIGHT}.md").read_text()
