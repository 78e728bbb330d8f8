"""`coevo dashboard --port N` in headless Chromium: the UI calls the API on N and shows a finished run's artifacts.

The run is a real `coevo run` of a config without `round:` (the round [evaluate_pairs, report]) at the smallest
offline scale (the SIMULATED flawed
student and the oracle; no vLLM) in a fresh PREFECT_HOME; the dashboard then serves that same database on
a free port that is not Prefect's default 4200 (the bug: the UI kept calling :4200, "Can't connect to
Server API", no runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.vllm_server import free_port
from tests.ops_helpers import api_post, child_env, coevo, dashboard, small_config

pytestmark = pytest.mark.slow


def _runs(url: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in api_post(url, "flow_runs/filter", {"limit": 50})}


def _artifact_keys(url: str, flow_run_id: str) -> set[str]:
    arts = api_post(url, "artifacts/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    return {a["key"] for a in arts if a["key"]}


def _artifacts_tab(page: Any, url: str, flow_run_id: str, keys: set[str]) -> str:
    """Open the flow run's page (Prefect's default UI, V2), its Artifacts tab, wait for every key; returns the text."""
    page.goto(f"{url}/v2/runs/flow-run/{flow_run_id}", wait_until="networkidle", timeout=90_000)
    page.get_by_text("Artifacts", exact=True).first.click()
    for key in sorted(keys):
        page.get_by_text(key, exact=True).first.wait_for(timeout=60_000)
    return page.inner_text("body")


def test_dashboard_on_any_port_shows_the_runs_stage_artifacts(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    env = child_env(tmp_path / "prefect")
    done = coevo(["run", "--config", str(small_config(tmp_path))], env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    port = free_port()
    assert port != 4200
    with dashboard(port, env, tmp_path / "dashboard.log") as url:
        assert httpx.get(f"{url}/ui-settings", timeout=10).json()["api_url"] == f"{url}/api"
        runs = _runs(url)
        top = next(r for n, r in runs.items() if n.startswith("coevolution-"))
        stage = runs["r0-evaluate_pairs"]
        assert top["state_type"] == stage["state_type"] == "COMPLETED"
        top_keys, stage_keys = _artifact_keys(url, top["id"]), _artifact_keys(url, stage["id"])
        run_id = top["name"].removeprefix("coevolution-").lower()
        wanted = {f"round-{run_id}-r0-evaluate-pairs", f"round-report-{run_id}-r0"}
        assert wanted <= top_keys, top_keys
        assert any(k.startswith("progress-") for k in stage_keys), stage_keys
        api_hosts: set[str] = set()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
            try:
                page = browser.new_page()
                page.on("request", lambda r: api_hosts.add(r.url.split("/api/")[0]) if "/api/" in r.url else None)
                page.goto(f"{url}/runs", wait_until="networkidle", timeout=90_000)  # the V1 UI too
                page.get_by_text(top["name"]).first.wait_for(timeout=60_000)
                v1_text = page.inner_text("body")
                top_text = _artifacts_tab(page, url, top["id"], wanted)
                progress_keys = {k for k in stage_keys if k.startswith("progress-")}
                stage_text = _artifacts_tab(page, url, stage["id"], progress_keys)
            finally:
                browser.close()
    assert top["name"] in top_text and "Completed" in top_text
    assert "r0-evaluate_pairs" in stage_text
    for text in (v1_text, top_text, stage_text):
        assert "Can't connect" not in text
    assert api_hosts == {url}, f"the UI called the API at {api_hosts}, not only at {url}"
