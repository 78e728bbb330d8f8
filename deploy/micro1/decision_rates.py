"""How often a student's sampled episodes reach each family's decision and apply the knowledge item, per
harness: the value of the flag in the first call that writes it (M1's decision programs: anomaly_detection
`bounds_normal`, code_refactor `tests=`, payroll_audit `deduct_break`).

    PYTHONPATH=$PWD .venv/bin/python deploy/micro1/decision_rates.py runs/m1b3-eval20
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from agents.tables.trajectories import read_trajectories

# family -> (the flag's pattern, the value that applies the item)
FLAGS = {"anomaly_detection": (re.compile(r"bounds_normal\) AS \(VALUES \((\d)\)"), "1"),
         "code_refactor": (re.compile(r"^tests=(\d);"), "1"),
         "payroll_audit": (re.compile(r"deduct_break = (True|False)"), "True")}


def first_decision(trajectory, pattern: re.Pattern[str]) -> str | None:
    """The flag's value in the first call whose arguments write it, else None."""
    for turn in trajectory.turns:
        for call in turn.tool_calls:
            args = call.arguments if isinstance(call.arguments, dict) else {}
            found = next((m.group(1) for v in args.values() if (m := pattern.search(str(v)))), None)
            if found:
                return found
    return None


def main(root: Path) -> None:
    for harness in ("h0", "hK", "hKp"):
        for family, (pattern, applied) in FLAGS.items():
            if not (root / harness / family).is_dir():
                continue
            trajectories = read_trajectories(root / harness / family)
            values = [v for v in (first_decision(t, pattern) for t in trajectories) if v is not None]
            print(f"{harness:4} {family:18} episodes {len(trajectories):3}  reached the decision {len(values):3}  "
                  f"applied {sum(v == applied for v in values):3}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/micro-eval"))
