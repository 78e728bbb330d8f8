"""What kind of action a tool call is: read, compute, write (or finish, for the final answer).

Used by the fit monitor (action type by position) and the heuristic attributor (was an output ever written?).
The rule, in order:
1. `TOOL_ACTIONS`: the tools of the seven families and the harness helpers, classified by what they do to
   the state (a table, so a tool whose name misleads is still right: `sql_query` computes, `goto` reads).
2. A generic rule on the name for any other tool: a read verb (`read`, `list`, `get`, `search`, `describe`,
   `find`, `view`, `show`, `open`, `fetch`, `query`) first -> read; a write verb (`write`, `edit`, `send`,
   `create`, `append`, `delete`, `put`, `reply`, `update`, `set`, `add`, `remove`, `post`, `upload`, `move`,
   `rename`, `submit`) -> write; a compute word (`python`, `shell`, `sql`, `calc`, `run`, `exec`, `eval`,
   `compute`, `test`) -> compute.
3. Anything else -> `other`.
"""

from __future__ import annotations

import re
from typing import Literal

Action = Literal["read", "compute", "write", "finish", "other"]
ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]
FINISH = "<finish>"  # the pseudo tool name of a final answer (a turn with no tool call)

TOOL_ACTIONS: dict[str, Action] = {
    # workspace families (payroll_audit, code_refactor, budget_approval's files, browser_automation's tests)
    "read_file": "read", "list_files": "read", "read_spreadsheet": "read",
    "write_file": "write", "edit_file": "write",
    "shell": "compute", "python": "compute", "run_tests": "compute",
    # budget_approval
    "search_contacts": "read", "list_threads": "read", "read_thread": "read", "list_documents": "read",
    "read_document": "read", "send_message": "write", "reply_to_thread": "write",
    # stock_alert
    "list_products": "read", "list_suppliers": "read", "read_sheet": "read", "list_sheets": "read",
    "get_email_template": "read", "list_outbox": "read", "create_sheet": "write", "append_rows": "write",
    "delete_rows": "write", "delete_sheet": "write", "send_email": "write",
    # anomaly_detection
    "describe_tables": "read", "bucket_list": "read", "bucket_get": "read", "sql_query": "compute",
    "bucket_put": "write",
    # browser families: navigation and reading are reads, form actions change the page state
    "goto": "read", "read_page": "read", "scroll": "read", "click": "write", "fill": "write", "select": "write",
    "press": "write",
    # harness helper tools
    "notes": "compute", "calculator": "compute",
}

_READ = re.compile(r"^(read|list|get|search|describe|find|view|show|open|fetch|query)(_|$)")
_WRITE = re.compile(r"^(write|edit|send|create|append|delete|put|reply|update|set|add|remove|post|upload|move|"
                    r"rename|submit)(_|$)")
_COMPUTE = re.compile(r"(python|shell|sql|calc|run|exec|eval|compute|test)")


def action_of(tool: str) -> Action:
    """The action type of a tool name (see the module docstring for the rule)."""
    if tool == FINISH:
        return "finish"
    if tool in TOOL_ACTIONS:
        return TOOL_ACTIONS[tool]
    name = tool.lower()
    if _READ.search(name):
        return "read"
    if _WRITE.search(name):
        return "write"
    if _COMPUTE.search(name):
        return "compute"
    return "other"
