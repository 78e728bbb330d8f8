"""anomaly_detection environment: a per-environment SQLite warehouse in a temp dir behind a read-only SQL
tool, and an in-memory storage bucket holding the parameter file and the report.

The SQL tool is read-only three times over: the file is opened `mode=ro`, an authorizer allows only
SELECT/READ/FUNCTION/RECURSIVE actions, and non-deterministic functions are refused. Its time limit is a
budget of SQLite VM instructions counted by a progress handler: deterministic, so replay gives the same
result (a wall-clock limit would not).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from tasks.anomaly_detection.data import PARAMS_KEY, AnomalyPayload, ground_truth_from, params_document, readings
from tasks.anomaly_detection.verify import AnomalyDetectionSnapshot, verify
from tasks.base import Environment
from tasks.records import Verdict
from tasks.runtime.textstore import TextStore
from tasks.tooling import ToolError, tool

MAX_SQL_CHARS = 10_000
MAX_ROWS = 200
MAX_RESULT_CHARS = 15_000
PROGRESS_EVERY = 1_000  # VM instructions between progress-handler calls
MAX_PROGRESS_CALLS = 10_000  # => 10M VM instructions, about a second of CPU
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_DENIED_FUNCTIONS = {"random", "randomblob", "load_extension", "sqlite_compileoption_get", "changes",
                     "last_insert_rowid", "total_changes"}
_WALL_CLOCK_RE = re.compile(r"""['"]\s*now\s*['"]|current_(date|time|timestamp)""", re.IGNORECASE)


class AnomalyDetectionEnv(Environment):
    payload: AnomalyPayload
    _tmp: Path | None = None
    _db: sqlite3.Connection | None = None

    def _setup(self) -> None:
        self.payload = p = AnomalyPayload.model_validate(self.instance.payload)
        self._tmp = Path(tempfile.mkdtemp(prefix="coevo-anomaly-"))
        path = self._tmp / "warehouse.sqlite"
        rows = readings(p)
        self.truth = ground_truth_from(p, rows)  # the oracle's answer (the verifier derives its own)
        build = sqlite3.connect(path)
        build.execute("PRAGMA journal_mode = OFF")  # a scratch file: no journal, no fsync
        build.execute("PRAGMA synchronous = OFF")
        with build:
            build.execute("CREATE TABLE sensors (sensor_pk INTEGER PRIMARY KEY, sensor_id TEXT NOT NULL, "
                          "kind TEXT NOT NULL, unit TEXT NOT NULL, site TEXT NOT NULL)")
            build.executemany("INSERT INTO sensors VALUES (?, ?, ?, ?, ?)",
                              [(s.pk, s.id, s.kind, s.unit, s.site) for s in p.sensors])
            if p.hard:
                pk = {s.id: s.pk for s in p.sensors}
                build.execute("CREATE TABLE readings (sensor_pk INTEGER NOT NULL REFERENCES sensors(sensor_pk), "
                              "ts TEXT NOT NULL, value REAL NOT NULL)")
                build.executemany("INSERT INTO readings VALUES (?, ?, ?)", [(pk[s], t, v) for s, t, v in rows])
            else:
                build.execute("CREATE TABLE readings (sensor_id TEXT NOT NULL, ts TEXT NOT NULL, value REAL NOT NULL)")
                build.executemany("INSERT INTO readings VALUES (?, ?, ?)", rows)
            build.execute("CREATE INDEX readings_ts ON readings (ts)")
        build.close()
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._db.set_authorizer(_authorize)
        self.bucket = TextStore(kind="object", max_chars=1_000_000, max_items=100)
        self.bucket.put(PARAMS_KEY, json.dumps(params_document(p), indent=2))
        self.bucket.put("README.txt", "config/ holds sensor parameters; write reports under reports/.")
        self.objects_read: set[str] = set()
        self.described = False
        self.queries: list[str] = []  # successful SQL, in order (the oracle checks what it already ran)

    def _teardown(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def snapshot(self) -> AnomalyDetectionSnapshot:
        return AnomalyDetectionSnapshot(report=self.bucket.peek(self.payload.report_key))

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())

    def state(self) -> dict[str, Any]:
        """The mutable state as plain data (tests compare it; replay must reproduce it)."""
        return {"bucket": self.bucket.snapshot(), "objects_read": sorted(self.objects_read),
                "described": self.described, "queries": list(self.queries)}

    # --- warehouse ----------------------------------------------------------------------------
    @tool
    def describe_tables(self) -> list[dict[str, Any]]:
        """The warehouse's tables: name, CREATE statement and row count."""
        assert self._db is not None
        self.described = True
        out = []
        for name, sql in self._db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            count = self._db.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0]
            out.append({"table": name, "create": sql, "rows": count})
        return out

    @tool
    def sql_query(self, sql: str) -> dict[str, Any]:
        """Run one read-only SQL SELECT on the warehouse (SQLite dialect). At most 200 rows come back; use
        WHERE, aggregates, LIMIT/OFFSET for more. Long-running queries are stopped.

        Args:
            sql: a single SELECT statement.
        """
        assert self._db is not None
        if len(sql) > MAX_SQL_CHARS:
            raise ToolError(f"the query is {len(sql)} characters; the limit is {MAX_SQL_CHARS}")
        if _WALL_CLOCK_RE.search(sql):
            raise ToolError("the wall clock is not available here; use the timestamps stored in the data")
        budget = {"calls": 0}

        def progress() -> int:
            budget["calls"] += 1
            return 1 if budget["calls"] > MAX_PROGRESS_CALLS else 0

        self._db.set_progress_handler(progress, PROGRESS_EVERY)
        try:
            cur = self._db.execute(sql)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchmany(MAX_ROWS + 1)
        except (sqlite3.Error, ValueError) as e:  # ProgrammingError: several statements; DatabaseError: denied
            if budget["calls"] > MAX_PROGRESS_CALLS:
                raise ToolError("the query ran past its time budget and was stopped; filter with WHERE on ts "
                                "or sensor, avoid cross joins") from None
            if "not authorized" in str(e):
                raise ToolError("only read-only SELECT queries are allowed (no writes, PRAGMA, ATTACH or "
                                "random functions)") from None
            raise ToolError(f"SQL error: {e}") from None
        finally:
            self._db.set_progress_handler(None, PROGRESS_EVERY)
        truncated = len(rows) > MAX_ROWS
        rows = [list(r) for r in rows[:MAX_ROWS]]
        while rows and len(json.dumps(rows, default=str)) > MAX_RESULT_CHARS:
            rows = rows[: len(rows) * 3 // 4]
            truncated = True
        self.queries.append(sql)
        result: dict[str, Any] = {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}
        if truncated:
            result["note"] = (f"result cut to {len(rows)} rows; narrow the query or page with LIMIT/OFFSET")
        return result

    # --- storage bucket -----------------------------------------------------------------------
    @tool
    def bucket_list(self, prefix: str = "") -> list[dict[str, object]]:
        """List the objects in the storage bucket.

        Args:
            prefix: only objects whose key starts with this, e.g. 'reports/'.
        """
        return self.bucket.list(prefix)

    @tool
    def bucket_get(self, key: str) -> str:
        """Download an object's text.

        Args:
            key: object key, e.g. 'config/sensor_params.json'.
        """
        text = self.bucket.get(key)
        self.objects_read.add(key.strip())
        return text

    @tool
    def bucket_put(self, key: str, content: str) -> str:
        """Upload (create or overwrite) a text object.

        Args:
            key: object key, e.g. 'reports/anomalies.csv'.
            content: the object's full text.
        """
        if key.strip() == PARAMS_KEY:
            raise ToolError(f"{PARAMS_KEY} is read-only")
        stored = self.bucket.put(key, content)
        return f"uploaded {len(content)} characters to {stored}"


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY
