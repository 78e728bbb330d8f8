"""A read-only SQL tool over one SQLite file whose queries run in the sandbox, not in our process.

`ReadOnlySqlite(db_file).query(sql)` sends the query to `tasks/runtime/sqlite_worker.py` (its policy is
described there: read-only, no clock or entropy, bounded values, steps and results) in a sandboxed
interpreter with the file bound read-only at /data. The sandbox caps the whole call: wall clock, memory
(SQLite's sorter and temp tables live in it), no network, no writable host path. So a query that would run
for half a minute or fill gigabytes of temp files stops at the limit, and the event loop that awaits the
tool (through `Environment.call`) keeps serving the other episodes meanwhile.

Every refusal is a `ToolError` with the reason and what to do instead; results are plain data
({"columns", "rows", "row_count", "truncated"[, "note"]}), the same for the same query and file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tasks.runtime.disk import remove_workspace
from tasks.runtime.sandbox import Sandbox, SandboxLimits
from tasks.tooling import ToolError

WORKER_SOURCE = (Path(__file__).with_name("sqlite_worker.py")).read_text()
MAX_SQL_CHARS = 10_000
MAX_ROWS = 200
MAX_RESULT_CHARS = 15_000
MAX_CELL_CHARS = 2_000  # a longer value is cut in the result (the model cannot read more anyway)
MAX_VALUE_BYTES = 1_000_000  # SQLITE_LIMIT_LENGTH: no string or blob may be longer, anywhere in the query
STEPS_PER_CHECK = 1_000  # VM instructions between progress-handler calls
BUDGET_CHECKS = 10_000  # => 10M VM instructions, about a second of CPU: deterministic, so replay agrees
QUERY_LIMITS = SandboxLimits(wall_s=8.0, cpu_s=8, memory_bytes=384 << 20, call_memory_bytes=512 << 20,
                             max_procs=16, max_output_chars=4 * MAX_RESULT_CHARS, workspace_bytes=1 << 20,
                             workspace_files=16)
DB_INSIDE = "/data"  # where the database folder appears in the sandbox (bwrap backend)

_ERRORS = {
    "budget": "the query ran past its time budget (a count of SQLite steps) and was stopped; filter with WHERE on ts or sensor, avoid "
              "cross joins and unbounded recursive queries",
    "too_big": f"the query built a string or blob longer than {MAX_VALUE_BYTES} bytes (the limit for any value) "
               "and was stopped; aggregate or filter instead",
    "memory": "the query needed more memory than the SQL tool allows (large sorts or temporary tables) and was "
              "stopped; filter first, sort fewer or smaller rows",
}


class ReadOnlySqlite:
    """Queries one database file (its folder is bound read-only into every query's sandbox)."""

    def __init__(self, db_file: Path) -> None:
        self.db_file = Path(db_file).resolve()
        os.chmod(self.db_file.parent, 0o755)  # the sandbox uid must reach the file (it holds no secret)
        os.chmod(self.db_file, 0o644)
        self._scratch = Path(tempfile.mkdtemp(prefix="coevo-sql-"))  # the query's (empty) working directory
        self._sandbox = Sandbox(self._scratch, QUERY_LIMITS, ro_binds={DB_INSIDE: self.db_file.parent})

    def close(self) -> None:
        remove_workspace(self._scratch)

    def _db_path(self) -> str:
        inside = self._sandbox.backend == "bwrap"
        return f"{DB_INSIDE}/{self.db_file.name}" if inside else str(self.db_file)

    def query(self, sql: str) -> dict[str, Any]:
        """Run one SELECT in the sandbox; the result as plain data, or ToolError with the reason."""
        if len(sql) > MAX_SQL_CHARS:
            raise ToolError(f"the query is {len(sql)} characters; the limit is {MAX_SQL_CHARS}")
        request = {"db": self._db_path(), "sql": sql, "max_rows": MAX_ROWS + 1, "max_result_chars": MAX_RESULT_CHARS,
                   "max_cell_chars": MAX_CELL_CHARS, "max_value_bytes": MAX_VALUE_BYTES,
                   "budget_steps": BUDGET_CHECKS, "steps_per_check": STEPS_PER_CHECK}
        code = f"{WORKER_SOURCE}\nmain({json.dumps(json.dumps(request))})\n"
        run = self._sandbox.python(code)
        answer = _answer(run.output) if run.exit_code == 0 and not run.killed_by else None
        if answer is None:
            raise ToolError(_failure(run.killed_by, run.timed_out))
        if "error" in answer:
            kind = answer["error"]
            raise ToolError(answer.get("message") if kind == "refused" else
                            f"SQL error: {answer.get('message')}" if kind == "sql" else _ERRORS[kind])
        return _shaped(answer)


def _answer(output: str) -> dict[str, Any] | None:
    try:
        answer = json.loads(output.strip().splitlines()[-1]) if output.strip() else None
    except json.JSONDecodeError:
        return None
    return answer if isinstance(answer, dict) else None


def _failure(killed_by: str | None, timed_out: bool) -> str:
    if killed_by == "memory":
        return _ERRORS["memory"]
    if timed_out or killed_by in ("wall_clock", "cpu_time"):
        return (f"the query ran past the SQL tool's time limit ({QUERY_LIMITS.wall_s:g} s) and was stopped; "
                "filter with WHERE, avoid cross joins and sorting large values")
    return "the query could not be run (the SQL tool's process failed); simplify the query"


def _shaped(answer: dict[str, Any]) -> dict[str, Any]:
    rows, truncated = answer["rows"], bool(answer["truncated"])
    if len(rows) > MAX_ROWS:
        rows, truncated = rows[:MAX_ROWS], True
    while rows and len(json.dumps(rows, default=str)) > MAX_RESULT_CHARS:
        rows = rows[: len(rows) * 3 // 4]
        truncated = True
    result: dict[str, Any] = {"columns": answer["columns"], "rows": rows, "row_count": len(rows), "truncated": truncated}
    if truncated:
        result["note"] = f"result cut to {len(rows)} rows; narrow the query or page with LIMIT/OFFSET"
    return result


__all__ = ["MAX_ROWS", "MAX_SQL_CHARS", "MAX_VALUE_BYTES", "QUERY_LIMITS", "ReadOnlySqlite"]
