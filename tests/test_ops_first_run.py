"""The first `coevo run` on a fresh machine (a PREFECT_HOME that does not exist yet) prints no traceback.

Before the fix, Prefect's server telemetry heartbeat wrote its session row into the brand-new SQLite
database while the other startup writers held it and printed `sqlite3.OperationalError: database is locked`
with two tracebacks before the flow started (3 of 4 fresh-home runs here, 2026-12-01). `flows.local` now
turns server analytics off unless the user set PREFECT_SERVER_ANALYTICS_ENABLED. The run also shows its
rollout progress (done / total, ETA) on the terminal (flows/progress.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.progress import Progress
from tests.ops_helpers import REPO, child_env, coevo, small_config


@pytest.mark.slow
def test_fresh_prefect_home_run_has_no_traceback_and_shows_progress(tmp_path: Path) -> None:
    home = tmp_path / "fresh-prefect-home"
    assert not home.exists()
    done = coevo(["run", "--config", str(small_config(tmp_path))], child_env(home))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "database is locked" not in done.stderr, done.stderr[-4000:]
    assert "Traceback" not in done.stdout
    assert "send_telemetry_heartbeat" not in done.stderr  # the service is not scheduled at all, not merely lucky
    out = done.stdout + done.stderr
    # both configured pairs run as one batch of the evaluate_pairs stage; then the report's table is printed
    assert "pairs.student+pairs.expert rollouts: 4/4 (100%)" in out, out[-3000:]
    assert "round 0: success % (mean ± SEM)" in done.stdout and "│ expert " in done.stdout, done.stdout[-3000:]
    assert (home / "prefect.db").exists()  # the run did use this fresh home


def test_analytics_off_by_default_and_the_users_choice_kept(tmp_path: Path) -> None:
    probe = "from flows.local import configure_prefect_env as c; c(); import os; print(os.environ['PREFECT_SERVER_ANALYTICS_ENABLED'])"
    for preset, expected in ((None, "false"), ("true", "true")):
        env = child_env(tmp_path / "home")
        if preset is not None:
            env["PREFECT_SERVER_ANALYTICS_ENABLED"] = preset
        got = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert got.stdout.strip() == expected, got.stderr


def test_progress_lines_count_eta_and_throttle() -> None:
    now = [0.0]
    lines: list[str] = []
    p = Progress("student rollouts", total=10, done=2, emit=lines.append, every_s=5.0, clock=lambda: now[0])
    now[0] = 2.0
    assert p.update(3) is None  # not due yet
    now[0] = 8.0
    assert p.update(6) == "student rollouts: 6/10 (60%), 8 s, ETA 8 s"  # 4 run in 8 s -> 2 s each, 4 left
    now[0] = 9.0
    assert p.update(10) == "student rollouts: 10/10 (100%), 9 s, done"  # the end is always shown
    assert lines == ["student rollouts: 6/10 (60%), 8 s, ETA 8 s", "student rollouts: 10/10 (100%), 9 s, done"]
    assert os.linesep not in "".join(lines)
