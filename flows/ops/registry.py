"""The promotion registry: which (student, harness) pair is current per family, since when, from which run.

One SQLite file shared by every run under a runs directory (`<runs_dir>/registry.sqlite`). The round's
promotion gate writes it (`promote`); the nightly evaluation reads the current pairs (`current`) and records
its scores (`record_nightly`), comparing each night with the one before (`previous_nightly`).

    promotions(id, family, student, student_path, harness_id, harness_path, run_id, round, since, evidence,
               student_sha256)                                             the merged weights' digest
    nightly(id, family, student, harness_id, run_id, night, mean, n, at)
    decisions(id, run_id, round, candidate, promoted, reason, at, evidence, token)   every gate decision

Rows are never updated or deleted: the current pair of a family is its latest promotion, the history is
every row. Writes run in one transaction each, so a nightly job and a round writing at once do not clash.
A gate's outcome is ONE transaction (`commit_gate`): every family's promotion row and the decision, or
nothing; keyed by a token, so a gate resumed after a kill that did commit writes nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

REGISTRY_FILE = "registry.sqlite"
SHA_FILE = "weights.sha256"  # beside merged weights: their digest (directory_sha256), written before they are published

_SCHEMA = """
CREATE TABLE IF NOT EXISTS promotions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    family TEXT NOT NULL, student TEXT NOT NULL, student_path TEXT, harness_id TEXT NOT NULL,
    harness_path TEXT NOT NULL, run_id TEXT NOT NULL, round INTEGER NOT NULL, since TEXT NOT NULL,
    evidence TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nightly (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    family TEXT NOT NULL, student TEXT NOT NULL, harness_id TEXT NOT NULL, run_id TEXT NOT NULL,
    night TEXT NOT NULL, mean REAL NOT NULL, n INTEGER NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL, round INTEGER NOT NULL, candidate TEXT NOT NULL, promoted INTEGER NOT NULL,
    reason TEXT NOT NULL, at TEXT NOT NULL, evidence TEXT NOT NULL);
"""
# columns added after the first schema: (table, column, type); an older registry file gains them on open
_ADDED = (("promotions", "student_sha256", "TEXT"), ("decisions", "token", "TEXT"))


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Promotion(BaseModel):
    """One promoted (student, harness) pair of one family."""

    model_config = ConfigDict(frozen=True)

    family: str
    student: str = Field(description="LiteLLM model string the pair is served as, e.g. hosted_vllm/student-r1.")
    student_path: str | None = Field(default=None, description="Merged weights directory, if the student is ours.")
    student_sha256: str | None = Field(default=None, description="directory_sha256 of the merged weights, recorded "
                                       "when they were published (check it before serving them).")
    harness_id: str
    harness_path: str = Field(description="Harness YAML the pair runs under (stored in the promoting run).")
    run_id: str
    round: int = Field(ge=0)
    since: datetime = Field(default_factory=_now)
    evidence: dict[str, Any] = Field(default_factory=dict, description="The gate's numbers (scores, CI, fit).")


class NightlyScore(BaseModel):
    """One nightly evaluation of a promoted pair."""

    model_config = ConfigDict(frozen=True)

    family: str
    student: str
    harness_id: str
    run_id: str
    night: str = Field(description="The night's label (YYYY-MM-DD by default).")
    mean: float = Field(ge=0.0, le=1.0)
    n: int = Field(ge=0)
    at: datetime = Field(default_factory=_now)


class GateDecision(BaseModel):
    """One decision of a round's promotion gate (promoted or not), with the numbers it was made on."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    round: int = Field(ge=0)
    candidate: str = Field(description="The adapter the gate judged (served name), or '' when there was none.")
    promoted: bool
    reason: str
    at: datetime = Field(default_factory=_now)
    evidence: dict[str, Any] = Field(default_factory=dict)


class PromotionRegistry:
    """SQLite-backed registry at `path` (created with its tables on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)
            for table, column, kind in _ADDED:
                if column not in {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    @classmethod
    def under(cls, runs_dir: Path) -> PromotionRegistry:
        return cls(Path(runs_dir) / REGISTRY_FILE)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0)
        db.row_factory = sqlite3.Row
        try:
            with db:  # one transaction: commit on success, roll back on error
                yield db
        finally:
            db.close()

    def promote(self, p: Promotion) -> None:
        with self._connect() as db:
            _insert_promotion(db, p)

    def record_decision(self, d: GateDecision, token: str | None = None) -> None:
        with self._connect() as db:
            _insert_decision(db, d, token)

    def commit_gate(self, promotions: list[Promotion], decision: GateDecision, token: str,
                    before_commit: Callable[[], None] | None = None) -> bool:
        """Every promotion row and the decision in ONE transaction; False (nothing written) when a decision with
        this `token` is already there (the gate committed before it was killed). `before_commit` runs inside the
        transaction after the inserts (the reliability tests' kill point)."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")  # the check and the inserts under one write lock
            if db.execute("SELECT 1 FROM decisions WHERE token = ?", (token,)).fetchone():
                return False
            for p in promotions:
                _insert_promotion(db, p)
            _insert_decision(db, decision, token)
            if before_commit is not None:
                before_commit()
        return True

    def decisions(self, run_id: str | None = None) -> list[GateDecision]:
        """Every gate decision, oldest first (of one run, or of all)."""
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM decisions {where} ORDER BY id", args).fetchall()
        return [GateDecision(run_id=r["run_id"], round=r["round"], candidate=r["candidate"], promoted=bool(r["promoted"]),
                             reason=r["reason"], at=r["at"], evidence=json.loads(r["evidence"])) for r in rows]

    def history(self, family: str | None = None) -> list[Promotion]:
        """Every promotion, oldest first (of one family, or of all)."""
        where, args = ("WHERE family = ?", (family,)) if family else ("", ())
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM promotions {where} ORDER BY id", args).fetchall()
        return [_promotion(r) for r in rows]

    def current(self, family: str | None = None) -> list[Promotion]:
        """The latest promotion per family (of one family, or of every family that has one), by family name."""
        latest: dict[str, Promotion] = {}
        for p in self.history(family):
            latest[p.family] = p
        return [latest[f] for f in sorted(latest)]

    def record_nightly(self, s: NightlyScore) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO nightly (family, student, harness_id, run_id, night, mean, n, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (s.family, s.student, s.harness_id, s.run_id, s.night, s.mean, s.n, s.at.isoformat()))

    def nightly(self, family: str | None = None) -> list[NightlyScore]:
        """Every nightly score, oldest first."""
        where, args = ("WHERE family = ?", (family,)) if family else ("", ())
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM nightly {where} ORDER BY id", args).fetchall()
        return [NightlyScore(**{k: r[k] for k in NightlyScore.model_fields}) for r in rows]

    def previous_nightly(self, family: str, student: str, harness_id: str, before_night: str) -> NightlyScore | None:
        """The latest score of the same pair from a night before `before_night`, if any."""
        same = [s for s in self.nightly(family)
                if s.student == student and s.harness_id == harness_id and s.night < before_night]
        return same[-1] if same else None


def _insert_promotion(db: sqlite3.Connection, p: Promotion) -> None:
    db.execute(
        "INSERT INTO promotions (family, student, student_path, harness_id, harness_path, run_id, round,"
        " since, evidence, student_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (p.family, p.student, p.student_path, p.harness_id, p.harness_path, p.run_id, p.round,
         p.since.isoformat(), json.dumps(p.evidence, sort_keys=True, default=str), p.student_sha256))


def _insert_decision(db: sqlite3.Connection, d: GateDecision, token: str | None) -> None:
    db.execute("INSERT INTO decisions (run_id, round, candidate, promoted, reason, at, evidence, token)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (d.run_id, d.round, d.candidate, int(d.promoted), d.reason, d.at.isoformat(),
                json.dumps(d.evidence, sort_keys=True, default=str), token))


def _promotion(row: sqlite3.Row) -> Promotion:
    fields = {k: row[k] for k in Promotion.model_fields if k != "evidence"}
    return Promotion(**fields, evidence=json.loads(row["evidence"]))


def directory_sha256(path: str | Path) -> str:
    """The digest of a weights directory: sha256 over '<relative name>\t<file sha256>' lines of every file
    (sorted; the SHA_FILE itself left out), so a missing, extra or changed file changes it."""
    root = Path(path)
    lines = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.name != SHA_FILE):
        h = hashlib.sha256()
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        lines.append(f"{f.relative_to(root).as_posix()}\t{h.hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()
