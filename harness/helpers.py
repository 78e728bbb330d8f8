"""Harness helper tools, executed by the rollout runtime (never by the environment).

- `notes`: a per-episode scratchpad; each call may append a note and returns all notes so far.
- `calculator`: arithmetic on numbers with + - * / // % ** and abs/round/min/max/sqrt, evaluated on
  the parsed syntax tree (no eval); exponents and results are bounded so a model cannot hang the runtime.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from tasks.records import ToolResult, ToolSpec

MAX_EXPR_CHARS = 500
MAX_NOTES_CHARS = 20_000
MAX_ABS_RESULT = 1e100

SPECS: dict[str, ToolSpec] = {
    "notes": ToolSpec(
        name="notes",
        description="Your scratchpad for this task. Pass `text` to append a note; every call returns all notes so far.",
        parameters={"type": "object", "properties": {"text": {"type": "string", "description": "Note to append (optional)."}}},
    ),
    "calculator": ToolSpec(
        name="calculator",
        description="Evaluate an arithmetic expression exactly as written, e.g. '(12.5 + 3) * 4 / 7'. "
                    "Supports + - * / // % **, parentheses and abs, round, min, max, sqrt.",
        parameters={"type": "object", "properties": {"expression": {"type": "string", "description": "The expression."}},
                    "required": ["expression"]},
    ),
}

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt}


class CalcError(ValueError):
    pass


def calculate(expression: str) -> float | int:
    if len(expression) > MAX_EXPR_CHARS:
        raise CalcError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise CalcError(f"cannot parse expression: {e.msg}") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 100 or abs(left) > 1e6):
            raise CalcError("exponent or base too large")
        try:
            out = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        return _bounded(out)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        args = [_eval(a) for a in node.args]
        try:
            return _bounded(_FUNCS[node.func.id](*args))
        except (TypeError, ValueError) as e:
            raise CalcError(f"{node.func.id}: {e}") from None
    raise CalcError(f"unsupported syntax: {ast.dump(node)[:80]}")


def _bounded(x: Any) -> Any:
    if isinstance(x, complex) or (isinstance(x, (int, float)) and abs(x) > MAX_ABS_RESULT):
        raise CalcError("result out of range")
    return x


class HelperState:
    """Per-episode state of the helper tools (one instance per run_episode call)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        if name == "notes":
            extra = set(args) - {"text"}
            if extra:
                return ToolResult(content=f"Error: unexpected argument(s) {sorted(extra)}; notes takes only 'text'", is_error=True)
            text = args.get("text")
            if text is not None and not isinstance(text, str):
                return ToolResult(content="Error: 'text' must be a string", is_error=True)
            if text:
                if sum(map(len, self.notes)) + len(text) > MAX_NOTES_CHARS:
                    return ToolResult(content=f"Error: notes are full ({MAX_NOTES_CHARS} characters)", is_error=True)
                self.notes.append(text)
            body = "\n".join(f"{i + 1}. {n}" for i, n in enumerate(self.notes))
            return ToolResult(content=body or "(no notes yet)")
        if name == "calculator":
            if set(args) != {"expression"} or not isinstance(args["expression"], str):
                return ToolResult(content="Error: calculator takes one string argument 'expression'", is_error=True)
            try:
                return ToolResult(content=repr(calculate(args["expression"])))
            except CalcError as e:
                return ToolResult(content=f"Error: {e}", is_error=True)
        return ToolResult(content=f"Error: unknown helper tool '{name}'", is_error=True)
