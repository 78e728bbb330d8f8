"""`RunStore`: everything a run makes lives under `runs/<run_id>/`, keyed by content hashes.

    runs/<run_id>/
      config.yaml                 the validated config the run started from
      state.json                  stage -> finished keys (human-readable; rewritten atomically)
      trajectories/<stage>/<key>.parquet
      datasets/  adapters/  reports/  logs/

A retried stage asks `has(stage, key)` and skips finished work; writes are atomic (`.tmp` + os.replace).
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
from agents.trajectory_table import read_frame, read_trajectories, write_trajectories

SCHEMA_VERSION = 1
SUBDIRS = ("trajectories", "datasets", "adapters", "reports", "logs")


def content_key(*parts: Any) -> str:
    """Stable short hash of JSON-serialisable parts (config, harness id, model id, instance ids, seed)."""
    raw = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def new_run_id(name: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunStore:
    def __init__(self, runs_dir: str | Path, run_id: str) -> None:
        self.run_id = run_id
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
        return yaml.safe_load((self.root / "config.yaml").read_text())

    # --- trajectories -------------------------------------------------------------------------
    def trajectory_path(self, stage: str, key: str) -> Path:
        return self.root / "trajectories" / stage / f"{key}.parquet"

    def has(self, stage: str, key: str) -> bool:
        return self.trajectory_path(stage, key).exists()

    def write_trajectories(self, stage: str, key: str, trajectories: Iterable[Trajectory]) -> Path:
        return write_trajectories(self.trajectory_path(stage, key), trajectories)

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

    @classmethod
    def open_existing(cls, runs_dir: str | Path, run_id: str) -> "RunStore":
        """A run that must already exist (resume, report): a clear error instead of a fresh empty run."""
        root = Path(runs_dir) / run_id
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
