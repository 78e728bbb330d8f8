"""Runs ONE read-only SQL query inside the sandbox and prints its result as one JSON line.

Standard library only and self-contained: `tasks.runtime.sqlite_ro` sends this file's text, followed by a
call of `main(<request>)`, to a sandboxed `python3 -I -S -`, so the query runs under the call's limits
(wall clock, memory of the whole process, no network, no writable file but a private /tmp), never in the
harness process. The request: {"db": path, "sql": text, "max_rows", "max_result_chars", "max_cell_chars",
"max_value_bytes", "budget_steps", "steps_per_check"}.

What the query may do (the policy):
- read: the file is opened read-only and immutable, and an authorizer allows only SELECT, READ, FUNCTION
  and RECURSIVE actions (no writes, PRAGMA, ATTACH, temp objects);
- not read the clock or entropy, so that replay reproduces every result: `random()`, `randomblob()` and the
  `CURRENT_DATE/TIME/TIMESTAMP` keywords are refused by the authorizer when the statement is prepared; the
  date functions (`date`, `time`, `datetime`, `julianday`, `unixepoch`, `strftime`, `timediff`) are replaced
  by deterministic functions that refuse, when they run, a missing time value or one equal to 'now' (so a
  'now' built at run time, `datetime(lower('NOW'))`, `datetime('n'||'ow')`, a subquery, is caught too) and
  otherwise return exactly what SQLite's own function returns (they call it on a private connection);
- not grow without bound: no value longer than `max_value_bytes` (SQLITE_LIMIT_LENGTH: `zeroblob(1e9)`
  fails at once; `printf`/`format` are wrapped to refuse a width or precision beyond it before SQLite pads
  character by character), temporary data in memory (capped by the sandbox, never on
  the host's disk), a deterministic budget of VM steps (a progress handler), and a result of at most
  `max_rows` rows and `max_result_chars` characters, each value cut at `max_cell_chars`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from urllib.parse import quote

DATE_FUNCTIONS = {"date": (0,), "time": (0,), "datetime": (0,), "julianday": (0,), "unixepoch": (0,),
                  "strftime": (1,), "timediff": (0, 1)}  # name -> positions of its time values
DENIED_FUNCTIONS = {"random", "randomblob", "current_date", "current_time", "current_timestamp", "load_extension",
                    "changes", "last_insert_rowid", "total_changes", "sqlite_compileoption_get", "fts3_tokenizer"}
ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
REFUSED: list[str] = []  # why the policy refused the query (the error SQLite reports is generic)


class Refused(Exception):
    pass


def authorize(action: int, arg1: object, arg2: object, db: object, trigger: object) -> int:
    if action == sqlite3.SQLITE_FUNCTION:
        name = str(arg2 or "").lower()
        if name in DENIED_FUNCTIONS:
            REFUSED.append(f"{name.upper() if name.startswith('current_') else name + '()'} is not available: "
                           "it reads the clock or random state, and replay must give the same result every time")
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    if action in ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    REFUSED.append("only read-only SELECT queries are allowed (no writes, PRAGMA, ATTACH or temporary objects)")
    return sqlite3.SQLITE_DENY


def deterministic_date(helper: sqlite3.Connection, name: str, positions: tuple[int, ...]):  # noqa: ANN201
    """SQLite's own `name`, refusing the forms that read the clock."""
    call = f"SELECT {name}"

    def fn(*args: object) -> object:
        for i in positions:
            value = args[i] if i < len(args) else "now"  # a missing time value means 'now'
            if isinstance(value, str) and value.strip().lower() == "now":
                REFUSED.append(f"the wall clock is not available here ({name}() with "
                               f"{'no time value' if i >= len(args) else repr(value)} reads it); use the "
                               "timestamps stored in the data")
                raise Refused(name)
        return helper.execute(f"{call}({', '.join('?' * len(args))})", args).fetchone()[0]

    return fn


_SPEC = re.compile(r"%([-+ 0#,!]*)(\*|\d+)?(?:\.(\*|\d*))?(l{0,2})(.)", re.DOTALL)


def _widths(fmt: str, args: tuple[object, ...]) -> list[int]:
    """Every width and precision a printf format asks for (literal or taken from the arguments by `*`)."""
    out, i = [], 0
    for m in _SPEC.finditer(fmt):
        if m.group(5) == "%":
            continue
        for part in (m.group(2), m.group(3)):
            if part == "*":
                value = args[i] if i < len(args) else 0
                i += 1
                try:
                    out.append(abs(int(value)))  # type: ignore[call-overload]
                except (TypeError, ValueError, OverflowError):
                    continue
            elif part:
                out.append(int(part))
        i += 1  # the value the conversion formats
    return out


def guarded_printf(helper: sqlite3.Connection, name: str, max_bytes: int):  # noqa: ANN201
    """SQLite's printf/format, refusing a width or precision beyond the value limit before any work (SQLite
    3.40 pads character by character, so `printf('%.*c', 1e9, 'x')` would run for seconds)."""

    def fn(*args: object) -> object:
        if args and isinstance(args[0], str) and any(w > max_bytes for w in _widths(args[0], args[1:])):
            REFUSED.append(f"{name}() was asked for a width or precision over {max_bytes} characters, longer "
                           "than any value may be; use a smaller one")
            raise Refused(name)
        return helper.execute(f"SELECT {name}({', '.join('?' * len(args))})", args).fetchone()[0]

    return fn


def connect(request: dict) -> sqlite3.Connection:
    con = sqlite3.connect(f"file:{quote(request['db'])}?mode=ro&immutable=1", uri=True)
    con.execute("PRAGMA temp_store = MEMORY")  # sorts and temp b-trees stay in (capped) memory
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, request["max_value_bytes"])
    con.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, 100)
    con.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    con.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000)
    helper = sqlite3.connect(":memory:")
    for name, positions in DATE_FUNCTIONS.items():
        try:
            helper.execute(f"SELECT {name}({', '.join(['0'] * (max(positions) + 1))})")
        except sqlite3.OperationalError:  # not in this SQLite build: leave it unknown
            continue
        con.create_function(name, -1, deterministic_date(helper, name, positions), deterministic=True)
    helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, request["max_value_bytes"])
    for name in ("printf", "format"):
        try:
            helper.execute(f"SELECT {name}('%d', 1)")
        except sqlite3.OperationalError:
            continue
        con.create_function(name, -1, guarded_printf(helper, name, request["max_value_bytes"]), deterministic=True)
    con.set_authorizer(authorize)
    return con


def cell(value: object, max_chars: int) -> object:
    if isinstance(value, bytes):
        value = str(value[:max_chars])
    if isinstance(value, str) and len(value) > max_chars:
        return value[:max_chars] + f"...[{len(value) - max_chars} characters cut]"
    return value


def fetch(cur: sqlite3.Cursor, request: dict) -> tuple[list[list[object]], bool]:
    """At most max_rows rows, stopping early once they pass max_result_chars: (rows, truncated)."""
    rows: list[list[object]] = []
    size = 0
    for row in cur:
        if len(rows) == request["max_rows"]:
            return rows, True
        rows.append([cell(v, request["max_cell_chars"]) for v in row])
        size += len(json.dumps(rows[-1], default=str))
        if size > request["max_result_chars"]:
            return rows, True
    return rows, False


def run(request: dict) -> dict:
    con = connect(request)
    steps = {"n": 0}

    def progress() -> int:
        steps["n"] += 1
        return 1 if steps["n"] > request["budget_steps"] else 0

    con.set_progress_handler(progress, request["steps_per_check"])
    try:
        cur = con.execute(request["sql"])
        columns = [d[0] for d in cur.description or []]
        rows, truncated = fetch(cur, request)
    except (sqlite3.Error, ValueError, Refused) as e:  # ValueError: several statements
        if steps["n"] > request["budget_steps"]:
            return {"error": "budget"}
        if REFUSED:
            return {"error": "refused", "message": REFUSED[0]}
        text = str(e)
        if "too big" in text:
            return {"error": "too_big"}
        return {"error": "sql", "message": text}
    return {"columns": columns, "rows": rows, "truncated": truncated}


def main(request_json: str) -> None:
    try:
        out = run(json.loads(request_json))
    except MemoryError:
        out = {"error": "memory"}
    sys.stdout.write(json.dumps(out, default=str) + "\n")
