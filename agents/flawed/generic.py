"""Faults every family can get, made from the intended call alone (no knowledge of the family's state).

tool_use (one opportunity per turn whose intended action is a tool call; the variant is drawn uniformly
among those that apply):
- `mistyped_argument`: an argument under a near-miss name (`content` -> `contents`); calls without
  arguments get an unknown one. The environment answers with an error.
- `wrong_argument_type`: the first argument's value wrapped in an object. An error.
- `malformed_json`: the arguments string cut before its closing brace. The runtime answers with an error.
- `hallucinated_tool`: a plausible tool name that does not exist (`create_sheet` -> `new_sheet`). An error.
- `adjacent_tool`: a real, semantically adjacent tool (the family's `adjacent` table); it may succeed and
  do the wrong thing (e.g. `delete_sheet` for `delete_rows`).
Each is a slip: the student believes the intended call was made (its belief executes it), so a tool_use
fault is repaired only if the student notices the error (profile `recovery.tool_error`) or a `[harness]`
message names the tool or its arguments (`recovery.hook`).
"""

from __future__ import annotations

import json
import random

from agents.flawed.menu import FamilyMenu, NotApplicable
from tasks.records import ToolCall

ARG_TYPOS = {
    "path": "file_path", "content": "contents", "title": "sheet_title", "rows": "data", "text": "message",
    "sql": "query", "key": "object_key", "ref": "selector", "url": "link", "page": "page_number",
    "thread_id": "thread", "doc_id": "document_id", "command": "cmd", "to": "recipient", "subject": "title_text",
    "body": "message_body", "columns": "headers", "row_numbers": "rows_to_delete", "query": "search",
    "option": "value", "code": "source", "prefix": "path_prefix",
}
NAME_SWAPS = (("list_", "get_"), ("get_", "fetch_"), ("create_", "new_"), ("read_", "get_"), ("send_", "post_"),
              ("write_", "save_"), ("append_", "add_"), ("delete_", "remove_"), ("reply_to_", "respond_to_"),
              ("search_", "find_"), ("bucket_", "storage_"), ("sql_", "run_"), ("describe_", "show_"))
TOOL_USE_KINDS = ("mistyped_argument", "wrong_argument_type", "malformed_json", "hallucinated_tool", "adjacent_tool")


def tool_use_variants(call: ToolCall, menu: FamilyMenu) -> list[str]:
    out = ["mistyped_argument", "malformed_json", "hallucinated_tool"]
    if isinstance(call.arguments, dict) and call.arguments:
        out.insert(1, "wrong_argument_type")
    if call.name in menu.adjacent:
        out.append("adjacent_tool")
    return out


def tool_use_slip(kind: str, call: ToolCall, menu: FamilyMenu, rng: random.Random) -> ToolCall:
    if not isinstance(call.arguments, dict):
        raise NotApplicable("the call's arguments are not an object")
    args = call.arguments
    if kind == "mistyped_argument":
        if not args:
            return call.model_copy(update={"arguments": {"verbose": True}})
        name = rng.choice(sorted(args))
        typo = ARG_TYPOS.get(name, name + "_value")
        return call.model_copy(update={"arguments": {(typo if k == name else k): v for k, v in args.items()}})
    if kind == "wrong_argument_type":
        first = sorted(args)[0]
        return call.model_copy(update={"arguments": {**args, first: {"value": args[first]}}})
    if kind == "malformed_json":
        return call.model_copy(update={"arguments": json.dumps(args, sort_keys=True)[:-1]})
    if kind == "hallucinated_tool":
        return call.model_copy(update={"name": hallucinated_name(call.name)})
    if kind == "adjacent_tool":
        return menu.adjacent[call.name](call)
    raise ValueError(f"unknown tool_use kind '{kind}'")


def hallucinated_name(name: str) -> str:
    for old, new in NAME_SWAPS:
        if name.startswith(old):
            return new + name.removeprefix(old)
    return name + "_tool"


def describe_call(call: ToolCall) -> str:
    args = call.arguments_json()
    return f"{call.name}({args if len(args) <= 120 else args[:117] + '...'})"
