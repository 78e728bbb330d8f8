"""Fault injection for the reliability tests, honoured only under pytest.

`COEVO_TEST_FAULT=evaluate_once` makes the first `evaluate` stage of a run fail after its rollouts are
stored (once per run directory: a marker file remembers it fired), so `--resume` can be shown to finish
the run without re-running them. Outside pytest (no PYTEST_CURRENT_TEST) the variable is ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "COEVO_TEST_FAULT"


class InjectedFault(RuntimeError):
    """Raised on purpose by a test; never retried by a stage."""


def maybe_fail(name: str, run_dir: Path) -> None:
    if os.environ.get(ENV_VAR) != name or "PYTEST_CURRENT_TEST" not in os.environ:
        return
    marker = run_dir / "logs" / f"fault-{name}.fired"
    if marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("fired\n")
    raise InjectedFault(f"injected fault '{name}' ({ENV_VAR}); resume the run to continue")
