"""Screenshots of a finished round in `coevo dashboard`, for docs/operations.md and the README.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/dashboard_screenshot.py [--out-dir docs/images]

1. A fresh PREFECT_HOME and runs directory in a temporary directory.
2. `coevo run` of a small offline round: [evaluate_h0, evolve, evaluate_h_star, attribute, report] on two families,
   three test instances x two seeds, the SIMULATED flawed student `flawed/{family}@native` and the oracle expert
   (no model server, no network; about two minutes on a 2-core machine).
3. `coevo dashboard` on a free port over that PREFECT_HOME, then headless Chromium (Debian's /usr/bin/chromium,
   driven by playwright): the run's flow-run page (its stage subflows, Prefect's V2 UI) and the round report's
   markdown artifact at its pass@k tables.
4. Writes `dashboard-round.png` and `dashboard-report.png` into --out-dir, stops the dashboard.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from deploy.vllm_server import free_port

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def _config(tmp: Path) -> Path:
    data = {"name": "dashboard-demo", "runs_dir": str(tmp / "runs"),
            "models": {"student": {"model": "flawed/{family}@native"}, "expert": {"model": "oracle/{family}"}},
            "families": ["payroll_audit", "stock_alert"],
            "round": {"stages": ["evaluate_h0", "evolve", "evaluate_h_star", "attribute", "report"],
                      "search": {"seeds": 1, "budget_rollouts": 8, "minibatch_size": 2, "train_instances": 3,
                                 "val_instances": 2}},
            "evaluation": {"n_instances": 3, "seeds": 2, "bootstrap_samples": 1000}, "attribution": {},
            "limits": {"max_turns": 30, "wall_s": 120}, "ray": {"num_cpus": 2, "actors": 2}}
    path = tmp / "dashboard-demo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _env(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect"), "PYTHONPATH": str(REPO),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for k in ("PREFECT_API_URL", "PREFECT_UI_API_URL"):
        env.pop(k, None)
    return env


def _wait_healthy(url: str, proc: subprocess.Popen[Any], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"the dashboard at {url} did not become healthy (exit code {proc.poll()})")


def _api(url: str, path: str, body: dict[str, Any]) -> Any:
    r = httpx.post(f"{url}/api/{path}", json=body, timeout=30)
    r.raise_for_status()
    return r.json()


def _shoot(url: str, out_dir: Path) -> list[Path]:
    """The run's page with its stage subflows, then the round report's markdown artifact at its pass@k tables."""
    from playwright.sync_api import sync_playwright

    top = next(r for r in _api(url, "flow_runs/filter", {"limit": 50}) if r["name"].startswith("coevolution-"))
    key = next(a["key"] for a in _api(url, "artifacts/filter", {"flow_runs": {"id": {"any_": [top["id"]]}}})
               if a["key"] and a["key"].startswith("round-report-"))
    shots = [out_dir / "dashboard-round.png", out_dir / "dashboard-report.png"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(240_000)  # a loaded 2-core machine renders the UI slowly
            page.goto(f"{url}/v2/runs/flow-run/{top['id']}", wait_until="networkidle")
            page.get_by_text("Subflow Runs", exact=True).first.click()
            page.get_by_text("r0-report").first.wait_for()
            page.wait_for_timeout(3000)
            page.screenshot(path=str(shots[0]), animations="disabled")
            page.get_by_text("Artifacts", exact=True).first.click()
            page.get_by_text(key, exact=True).first.click()
            section = page.get_by_text("pass@1, pass@k and pass^k per family").first
            section.wait_for()
            section.scroll_into_view_if_needed()  # lands near the bottom of the view: scroll it up to the top
            page.mouse.move(700, 450)  # over the report (the wheel scrolls what is under the pointer)
            page.mouse.wheel(0, 420)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(shots[1]), animations="disabled")
        finally:
            browser.close()
    return shots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=REPO / "docs" / "images", help="Where the PNGs go.")
    ap.add_argument("--work-dir", type=Path, default=None, help="Keep the PREFECT_HOME and runs here (default: a "
                    "temporary directory); a work dir that already holds a finished run is reused.")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="coevo-dashboard-") as d:
        tmp = args.work_dir or Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        env = _env(tmp)
        cli = [sys.executable, "-m", "flows.cli"]
        if not list((tmp / "runs").glob("*/rounds/r0/reports/report.md")):
            done = subprocess.run([*cli, "run", "--config", str(_config(tmp))], cwd=REPO, env=env, text=True,
                                  capture_output=True)
            if done.returncode != 0:
                raise SystemExit(f"coevo run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with (tmp / "dashboard.log").open("w") as log:
            proc = subprocess.Popen([*cli, "dashboard", "--port", str(port)], cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                _wait_healthy(url, proc)
                shots = _shoot(url, args.out_dir)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
    for s in shots:
        print(f"written: {s} ({time.strftime('%Y-%m-%d')})")


if __name__ == "__main__":
    main()
