"""`RunStore`: everything a run makes lives under `runs/<run_id>/`, keyed by content hashes.

    runs/<run_id>/
      config.yaml                 the resolved config the run started from (extends merged, every default filled)
      state.json                  stage -> finished keys (human-readable; rewritten atomically)
      code.json                   the git commit of every start and resume (flows/provenance.py)
      trajectories/<stage>/<key>.parquet         one row per trajectory (agents/tables/trajectories.py)
      trajectories/<stage>/<key>.turns.parquet   one row per turn, beside it
      harnesses/<harness id>.yaml                every harness a stored trajectory ran under, by content hash
      datasets/  adapters/  reports/  logs/

A retried stage asks `has(stage, key)` and skips finished work; writes are atomic (`.tmp` + os.replace).
Trajectories are written together with their harnesses, so `load_harness(traj.harness_id)` always works.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from agents.records import Trajectory
from flows.config import read_forward
from agents.tables.trajectories import read_frame, read_trajectories, read_turn_frame, write_trajectories
from harness.program import Harness

SCHEMA_VERSION = 1
SUBDIRS = ("trajectories", "harnesses", "datasets", "adapters", "reports", "logs")


def content_key(*parts: Any) -> str:
    """Stable short hash of JSON-serialisable parts (config, harness id, model id, instance ids, seed)."""
    raw = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def new_run_id(name: str) -> str:
    return check_run_id(f"{time.strftime('%Y%m%d-%H%M%S')}-{name}")


def check_run_id(run_id: str) -> str:
    """A run id is one directory name under the runs directory: never a path out of it ('..', '/')."""
    if not run_id or run_id in (".", "..") or any(c in run_id for c in "/\\\0") or ".." in run_id:
        raise ValueError(f"run id '{run_id}' must be one directory name (no '/', '\\' or '..')")
    return run_id


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunStore:
    def __init__(self, runs_dir: str | Path, run_id: str) -> None:
        self.run_id = check_run_id(run_id)
        self.root = Path(runs_dir) / run_id
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if not (self.root / "state.json").exists():
            self._write_state({"schema_version": SCHEMA_VERSION, "run_id": run_id, "stages": {}})
        self._check()

    # --- state --------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return json.loads((self.root / "state.json").read_text())

    def _write_state(self, state: dict[str, Any]) -> None:
        atomic_write_text(self.root / "state.json", json.dumps(state, indent=2, sort_keys=True))

    def _check(self) -> None:
        state = self._state()
        if state.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{self.root}/state.json has schema {state.get('schema_version')}, expected {SCHEMA_VERSION}")
        if state.get("run_id") != self.run_id:
            raise ValueError(f"{self.root}/state.json belongs to run {state.get('run_id')}, not {self.run_id}")

    def mark_done(self, stage: str, key: str, info: dict[str, Any] | None = None) -> None:
        state = self._state()
        state["stages"].setdefault(stage, {})[key] = info or {}
        self._write_state(state)

    def done(self, stage: str) -> dict[str, Any]:
        return self._state()["stages"].get(stage, {})

    # --- config -------------------------------------------------------------------------------
    def save_config(self, config: dict[str, Any]) -> None:
        atomic_write_text(self.root / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    def load_config_dict(self) -> dict[str, Any]:
        """The stored config, read forward from an older layout (`flows.config.read_forward`)."""
        return read_forward(yaml.safe_load((self.root / "config.yaml").read_text()))

    # --- trajectories -------------------------------------------------------------------------
    def trajectory_path(self, stage: str, key: str) -> Path:
        return self.root / "trajectories" / stage / f"{key}.parquet"

    def has(self, stage: str, key: str) -> bool:
        return self.trajectory_path(stage, key).exists()

    def write_trajectories(self, stage: str, key: str, trajectories: Iterable[Trajectory], *,
                           harnesses: Iterable[Harness]) -> Path:
        """Store a chunk and the harnesses its trajectories ran under (each once, by id). Raises ValueError,
        writing nothing, when a trajectory's harness is neither given nor already in the run."""
        trajs = list(trajectories)
        for h in harnesses:
            self.save_harness(h)
        missing = sorted({t.harness_id for t in trajs if not self.harness_path(t.harness_id).exists()})
        if missing:
            raise ValueError(f"run {self.run_id}: no harness {', '.join(missing)} for the trajectories of {stage}/{key}; "
                             "pass the harnesses they ran under")
        return write_trajectories(self.trajectory_path(stage, key), trajs)

    def read_trajectories(self, stage: str) -> list[Trajectory]:
        return read_trajectories(self.root / "trajectories" / stage)

    def read_chunks(self, stage: str, keys: Iterable[str]) -> list[Trajectory]:
        """The trajectories of exactly these chunk files (a stage directory may hold stale chunks)."""
        return [t for k in keys for t in read_trajectories(self.trajectory_path(stage, k))]

    def chunk_frame(self, stage: str, keys: Iterable[str]) -> pl.DataFrame:
        frames = [read_frame(self.trajectory_path(stage, k)) for k in keys]
        return pl.concat(frames) if frames else read_frame(self.root / "trajectories" / "__none__")

    def trajectory_frame(self, stage: str | None = None) -> pl.DataFrame:
        return read_frame(self.root / "trajectories" / stage if stage else self.root / "trajectories")

    def turn_frame(self, stage: str | None = None) -> pl.DataFrame:
        """The per-turn rows (agents/tables/turns.py) of a stage, or of the whole run."""
        return read_turn_frame(self.root / "trajectories" / stage if stage else self.root / "trajectories")

    # --- harnesses ----------------------------------------------------------------------------
    def harness_path(self, harness_id: str) -> Path:
        return self.root / "harnesses" / f"{harness_id}.yaml"

    def save_harness(self, harness: Harness) -> Path:
        """Keep `harness` under its content hash (written once; the same id is the same content)."""
        path = self.harness_path(harness.id)
        if not path.exists():
            harness.dump(path)
        return path

    def load_harness(self, harness_id: str) -> Harness:
        """The harness a stored trajectory ran under (`traj.harness_id`), checked against its id."""
        path = self.harness_path(harness_id)
        if not path.exists():
            raise FileNotFoundError(f"run {self.run_id} has no harness {harness_id} (looked for {path})")
        h = Harness.load(path)
        if h.id != harness_id:
            raise ValueError(f"{path} holds harness {h.id}, not {harness_id} (edited by hand?)")
        return h

    @classmethod
    def open_existing(cls, runs_dir: str | Path, run_id: str) -> "RunStore":
        """A run that must already exist (resume, report): a clear error instead of a fresh empty run."""
        root = Path(runs_dir) / check_run_id(run_id)
        if not (root / "state.json").exists():
            known = ", ".join(list_runs(runs_dir)[-5:]) or "none"
            raise FileNotFoundError(f"no run '{run_id}' under {Path(runs_dir).resolve()} (latest: {known})")
        return cls(runs_dir, run_id)

    def path(self, *parts: str) -> Path:
        p = self.root.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


def list_runs(runs_dir: str | Path) -> list[str]:
    """Run ids under `runs_dir`, oldest first (ids start with a timestamp)."""
    d = Path(runs_dir)
    return sorted(p.name for p in d.iterdir() if (p / "state.json").exists()) if d.is_dir() else []
