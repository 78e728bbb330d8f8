"""Where the benchmarks keep their raw results: `benchmarks/results/<name>-<YYYY-MM-DD>.json`.

Each file is one JSON object, `{"benchmark", "date", "commit", "machine", "args", "results"}`: the script's name,
the local date and time of the run, the code it ran (`commit()`: the short HEAD hash, "-dirty" when the working
tree had changes), the machine (`machine()`), the command-line arguments and what the script measured (whatever
it also prints as JSON). A rerun the same day overwrites that day's file only when an earlier run of the same
benchmark wrote it and it is not committed to git; a committed file (evidence the docs cite) or one of another
layout is kept, and the record goes to the first free `<name>-<YYYY-MM-DD>-<n>.json` instead. `results_index.py` renders one row per
file into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"


def machine() -> dict[str, Any]:
    """The host the benchmark ran on: name, CPU count, Python version, platform and the load average."""
    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg": os.getloadavg()}


def git(*args: str) -> str | None:
    """`git ARGS` run in the repository: its stripped stdout, or None when git is missing or fails."""
    try:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip()


def commit() -> str:
    """The code a benchmark runs: `git rev-parse --short HEAD`, plus "-dirty" when `git status --porcelain` lists
    anything (changed or untracked files); "not recorded" when git is missing or fails (no repository)."""
    head, status = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain")
    if not head or status is None:
        return "not recorded"
    return head + ("-dirty" if status else "")


def _plain(value: Any) -> Any:
    """An argument value as JSON can hold it: Paths (also inside lists and tuples) as strings."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def committed(path: Path) -> bool:
    """Whether git tracks `path` (False without git or outside the repository)."""
    return git("ls-files", "--error-unmatch", str(path)) is not None


def _ours(path: Path, name: str) -> bool:
    """Whether `path` is an uncommitted record `save_results` wrote for benchmark `name` (so it may be overwritten)."""
    if committed(path):
        return False
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("benchmark") == name


def save_results(name: str, payload: dict | list, args: argparse.Namespace | None = None) -> Path:
    """Write `payload` with the date, the commit (`commit()`), the machine and `args` to
    `benchmarks/results/<name>-<date>.json`.

    Creates the folder; overwrites that day's file when an earlier run of the same benchmark wrote it and git does
    not track it, and otherwise (a committed file, or one of another layout under that name) writes
    `<name>-<date>-<n>.json` with the first free n >= 2. Values JSON cannot hold are written as their `str()`. Returns the path written.
    """
    now = dt.datetime.now()
    record = {"benchmark": name, "date": now.isoformat(timespec="seconds"), "commit": commit(),
              "machine": machine(),
              "args": {k: _plain(v) for k, v in vars(args).items()} if args is not None else {},
              "results": payload}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{now.date().isoformat()}"
    path, n = RESULTS_DIR / f"{stem}.json", 2
    while path.exists() and not _ours(path, name):
        path, n = RESULTS_DIR / f"{stem}-{n}.json", n + 1
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path
