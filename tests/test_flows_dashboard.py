"""`coevo dashboard`: a real Prefect server on 127.0.0.1 over the given PREFECT_HOME, found by later runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from deploy.vllm_server import free_port

REPO = Path(__file__).resolve().parent.parent


def test_dashboard_serves_records_its_url_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "dashboard", "--port", str(port)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        healthy = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                healthy = httpx.get(f"{url}/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy:
                break
            time.sleep(1)
        assert healthy, "prefect server did not come up"
        # a later `coevo run` in this PREFECT_HOME finds the running dashboard and reports to it
        probe = subprocess.run([sys.executable, "-c", "from flows.local import configure_prefect_env as c; print(c())"],
                               cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert f"Prefect dashboard {url}" in probe.stdout, probe.stdout + probe.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert f"Prefect dashboard: {url}" in out
    assert not (tmp_path / "prefect" / "coevo-dashboard.json").exists()
    try:
        httpx.get(f"{url}/api/health", timeout=2)
        up = True
    except httpx.HTTPError:
        up = False
    assert not up, "the prefect server outlived `coevo dashboard`"
