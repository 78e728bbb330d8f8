"""anomaly_detection environment: a per-environment SQLite warehouse in a temp dir behind a read-only SQL
tool, and an in-memory storage bucket holding the parameter file and the report.

Each query runs in the sandbox (`tasks.runtime.sqlite_ro`): the file is bound and opened read-only, an
authorizer allows only SELECT/READ/FUNCTION/RECURSIVE actions, the clock and entropy are refused (the date
functions run deterministically and refuse 'now', however it is spelled or built), values are capped by
SQLITE_LIMIT_LENGTH and results by rows and characters. The time limit is a budget of SQLite VM
instructions: deterministic, so replay gives the same result; the sandbox's wall clock and memory cap are
the backstop for what instructions do not measure (a sort of huge values).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from tasks.anomaly_detection.data import PARAMS_KEY, AnomalyPayload, ground_truth_from, params_document, readings
from tasks.anomaly_detection.verify import AnomalyDetectionSnapshot, verify
from tasks.base import Environment
from tasks.records import Verdict
from tasks.runtime.sqlite_ro import ReadOnlySqlite
from tasks.runtime.textstore import TextStore
from tasks.tooling import ToolError, tool


class AnomalyDetectionEnv(Environment):
    payload: AnomalyPayload
    _tmp: Path | None = None
    _db: sqlite3.Connection | None = None
    _sql: ReadOnlySqlite | None = None

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
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)  # describe_tables
        self._sql = ReadOnlySqlite(path)
        self.bucket = TextStore(kind="object", max_chars=1_000_000, max_items=100)
        self.bucket.put(PARAMS_KEY, json.dumps(params_document(p), indent=2))
        self.bucket.put("README.txt", "config/ holds sensor parameters; write reports under reports/.")
        self.objects_read: set[str] = set()
        self.described = False
        self.queries: list[str] = []  # successful SQL, in order (the oracle checks what it already ran)

    def _teardown(self) -> None:
        if self._sql is not None:
            self._sql.close()
            self._sql = None
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
        assert self._sql is not None
        result = self._sql.query(sql)
        self.queries.append(sql)
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


