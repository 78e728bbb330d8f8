"""Helpers of the operations tests: a tiny offline run config, `coevo` as a subprocess, a live Prefect server.

Everything here is the real thing: the `coevo` CLI in a child process with its own PREFECT_HOME, the
offline providers (`flawed/{family}@<profile>` student, `oracle/{family}` expert, no vLLM), a real
`prefect server start` process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
FAMILY = "payroll_audit"  # a quick environment; the operations are the subject here


def small_config(tmp_path: Path, *, student: str = "flawed/{family}@native", name: str = "opsmall") -> Path:
    """An offline evaluation config: 1 family x 2 test instances x 1 seed, the flawed student and the oracle."""
    data: dict[str, Any] = {
        "name": name,
        "runs_dir": str(tmp_path / "runs"),
        "models": {"student": {"model": student}, "expert": {"model": "oracle/{family}"}},
        "families": [FAMILY],
        "evaluation": {"n_instances": 2, "seeds": 1, "bootstrap_samples": 200,
                       "pairs": [{"model": "student"}, {"model": "expert"}]},
        "limits": {"max_turns": 30, "wall_s": 120},
        "ray": {"num_cpus": 1, "actors": 1},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def child_env(prefect_home: Path, **extra: str) -> dict[str, str]:
    """os.environ for a child `coevo`: its own PREFECT_HOME, no API URL inherited from the test process."""
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONPATH": str(REPO), **extra}
    for k in ("PREFECT_API_URL", "PREFECT_SERVER_ANALYTICS_ENABLED", "PREFECT_UI_API_URL"):
        env.pop(k, None)
    return env


def coevo(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def wait_healthy(url: str, proc: subprocess.Popen[Any], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"no healthy Prefect server at {url} (exit code {proc.poll()})")


def stop_group(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 60) -> None:
    """Stop a child started with start_new_session=True and everything it started (its process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextmanager
def dashboard(port: int, env: dict[str, str], log: Path) -> Iterator[str]:
    """`coevo dashboard --port PORT` as a child process; yields its URL once healthy, stops it after."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "dashboard", "--port", str(port)], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
            yield url
        finally:
            stop_group(proc)


def api_post(url: str, path: str, body: dict[str, Any]) -> Any:
    r = httpx.post(f"{url}/api/{path}", json=body, timeout=30)
    r.raise_for_status()
    return r.json()
