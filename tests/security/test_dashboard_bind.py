"""`coevo dashboard --host` on a shared host: off loopback only with Prefect's API auth string, which then guards
every API request while the UI (after its login prompt) still lists the runs.

- `--host` a non-loopback address without PREFECT_SERVER_API_AUTH_STRING: exit 2, one line naming the variable;
- with it (bound to 0.0.0.0, a real `prefect server`): an API request without the string, or with a wrong one,
  is refused (401); a client with PREFECT_API_AUTH_STRING reports a flow run; `coevo run`'s Prefect setup
  without the client string stays on its local API and says why; headless Chromium signs in with the string
  and lists the run.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from typer.testing import CliRunner

from deploy.vllm_server import free_port
from flows.cli import app
from tests.ops_helpers import REPO, child_env, stop_group, wait_healthy

RUN_A_FLOW = """
from prefect import flow

@flow(name="coevo-shared-host-probe", flow_run_name="shared-host-probe-run")
def probe() -> int:
    return 1

probe()
"""
WHERE = "from flows.local import configure_prefect_env as c; print(c())"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.org"])
def test_a_non_loopback_host_without_the_auth_string_is_refused(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_SERVER_API_AUTH_STRING", raising=False)
    result = CliRunner().invoke(app, ["dashboard", "--host", host, "--port", str(free_port())])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"--host {host}" in lines[0] and "PREFECT_SERVER_API_AUTH_STRING" in lines[0]


@pytest.mark.slow
def test_with_the_auth_string_the_api_refuses_strangers_and_the_ui_lists_the_runs(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    auth = f"admin:{secrets.token_hex(12)}"
    port = free_port()
    env = child_env(tmp_path / "prefect", PREFECT_SERVER_API_AUTH_STRING=auth)
    env.pop("PREFECT_API_AUTH_STRING", None)
    with (tmp_path / "dashboard.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "dashboard", "--host", "0.0.0.0", "--port",
                                 str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        bound = {c.laddr.ip for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN
                 and c.laddr.port == port}
        assert bound == {"0.0.0.0"}, bound
        assert auth not in (tmp_path / "prefect" / "coevo-dashboard.json").read_text()  # only that auth is needed
        good = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
        bad = {"Authorization": "Basic " + base64.b64encode(b"admin:wrong").decode()}
        for headers in ({}, bad):
            assert httpx.post(f"{url}/api/flow_runs/filter", json={}, headers=headers, timeout=30).status_code == 401
        client = {**env, "PREFECT_API_URL": f"{url}/api", "PREFECT_API_AUTH_STRING": auth}
        ran = subprocess.run([sys.executable, "-c", RUN_A_FLOW], cwd=REPO, env=client, capture_output=True, text=True,
                             timeout=300)
        assert ran.returncode == 0, ran.stderr[-2000:]
        runs = httpx.post(f"{url}/api/flow_runs/filter", json={}, headers=good, timeout=30).json()
        assert [r["name"] for r in runs] == ["shared-host-probe-run"]
        where = subprocess.run([sys.executable, "-c", WHERE], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=120).stdout
        assert "requires the API auth string and PREFECT_API_AUTH_STRING is not set" in where, where
        with_string = subprocess.run([sys.executable, "-c", WHERE], cwd=REPO, timeout=120, capture_output=True,
                                     text=True, env={**env, "PREFECT_API_AUTH_STRING": auth}).stdout
        assert f"Prefect dashboard {url}" in with_string, with_string
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
            try:
                page = browser.new_page()
                page.goto(f"{url}/runs", wait_until="networkidle", timeout=90_000)
                page.get_by_placeholder("admin:pass").fill(auth)
                page.get_by_role("button", name="Login").click()
                page.goto(f"{url}/runs", wait_until="networkidle", timeout=90_000)
                page.get_by_text("shared-host-probe-run").first.wait_for(timeout=60_000)
                text = page.inner_text("body")
            finally:
                browser.close()
        assert "shared-host-probe-run" in text and "Authentication failed" not in text
    finally:
        stop_group(proc)
    assert auth not in (tmp_path / "dashboard.log").read_text()
    print(f"dashboard on 0.0.0.0:{port}: API requests without the string or with a wrong one: 401; the UI listed "
          "the run after its login")
