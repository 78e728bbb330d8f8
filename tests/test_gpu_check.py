"""deploy/gpu_check.sh --cpu: the device check's CPU twin (fp32, no FSDP job), run as CI runs it. The GPU mode (bf16,
an FSDP job) is the same code on a lent GPU machine (docs/gpu.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JOBS = ("micro (dense)", "tiny MoE", "tiny MoE + experts")


@pytest.mark.slow
def test_gpu_check_cpu_twin_passes_every_check(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": str(REPO / ".venv" / "bin" / "python")}
    proc = subprocess.run([str(REPO / "deploy" / "gpu_check.sh"), "--cpu", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["check"]: r["results"] for r in json.loads((tmp_path / "gpu_check.json").read_text())}
    assert list(rows) == ["accelerate launch", "trained", "loss falls", "adapted share", "save/load", "merge"]
    for check, results in rows.items():
        assert sorted(results) == sorted(JOBS), check
        assert all(v.startswith("PASS") for v in results.values()), (check, results)
    share = rows["adapted share"]
    assert "(experts)" in share["tiny MoE + experts"] and "(experts)" not in share["tiny MoE"]
    assert "| check | micro (dense) | tiny MoE | tiny MoE + experts |" in proc.stdout
