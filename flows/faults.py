"""Fault injection for the reliability tests, honoured only under pytest.

`COEVO_TEST_FAULT=<stage>` (a round stage, e.g. `evaluate_pairs`) makes the first run of that stage fail after
its work is stored and before the stage is recorded done (once per run directory: a marker file remembers it
fired), so `--resume` can be shown to finish the run without redoing that work. Outside pytest (no PYTEST_CURRENT_TEST) the variable is ignored.

`COEVO_TEST_KILL=<point>` SIGKILLs the process at a kill point, once per run directory (the marker is on disk
before the signal), so a test can show that a resume ends wholly done or wholly not. The promotion gate's
points (flows/round/gate.py): `gate_rollouts` (the first of several validation chunks stored), `gate_merge`
(merged weights written to the staging directory, neither hashed nor published), `gate_weights` (weights
published with their digest, no registry row yet), `gate_registry` (inside the registry transaction, every row
inserted, not committed).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV_VAR = "COEVO_TEST_FAULT"
KILL_VAR = "COEVO_TEST_KILL"
KILL_POINTS = ("gate_rollouts", "gate_merge", "gate_weights", "gate_registry")


class InjectedFault(RuntimeError):
    """Raised on purpose by a test; never retried by a stage."""


def _fires(var: str, value: str, marker: Path) -> bool:
    """Whether the fault `var`=`value` fires now: named, under pytest, and not yet fired for this run (marker)."""
    if os.environ.get(var) != value or "PYTEST_CURRENT_TEST" not in os.environ or marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    with marker.open("w") as f:  # written (and synced) before the fault, so a resumed run passes it
        f.write("fired\n")
        f.flush()
        os.fsync(f.fileno())
    return True


def maybe_fail(name: str, run_dir: Path) -> None:
    if _fires(ENV_VAR, name, run_dir / "logs" / f"fault-{name}.fired"):
        raise InjectedFault(f"injected fault '{name}' ({ENV_VAR}); resume the run to continue")


def maybe_kill(point: str, run_dir: Path) -> None:
    """SIGKILL this process at `point` when COEVO_TEST_KILL names it (under pytest, once per `run_dir`)."""
    if _fires(KILL_VAR, point, run_dir / "logs" / f"kill-{point}.fired"):
        os.kill(os.getpid(), signal.SIGKILL)
