"""The shape of `tasks/`: every family is one package of the same five modules, the verifier never imports
the environment, there is no module-level import cycle, and no function is longer than 80 lines."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import tasks
from tasks.base import Environment

TASKS = Path(tasks.__file__).resolve().parent
FAMILY_MODULES = ("__init__", "data", "env", "oracle", "verify")
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    rel = path.relative_to(TASKS.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Modules imported at module level (not inside functions or `if TYPE_CHECKING:`), resolved to the most
    specific module: `from pkg import sub` names `pkg.sub` when that is a module."""
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}".rstrip(".")
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    out.add(sub if importlib.util.find_spec(base) and _is_module(sub) else base)
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return out


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(TASKS.rglob("*.py")):
        name = _module_name(path)
        imports = _module_level_imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        graph[name] = {m for m in imports if m == "tasks" or m.startswith("tasks.")} - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), as sorted lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_no_module_level_import_cycle_in_tasks() -> None:
    graph = _import_graph()
    assert "tasks.stock_alert.verify" in graph and "tasks.runtime.sandbox" in graph  # the walk found the tree
    assert "tasks.stock_alert.verify" in graph["tasks.stock_alert.env"]  # and resolves `from x import y`
    assert _cycles(graph) == []


def test_no_import_of_our_modules_is_hidden_in_a_function_or_type_checking() -> None:
    """Deferred imports are how import cycles hide (the verifiers used to import their environment that
    way): inside tasks/, every import of a tasks module is at module level, where the cycle test sees it."""
    hidden = []
    for path in sorted(TASKS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        scopes += [n for n in ast.walk(tree) if isinstance(n, ast.If) and _is_type_checking(n)]
        for scope in scopes:
            for node in ast.walk(scope):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "tasks"):
                    hidden.append(f"{path.relative_to(TASKS.parent)}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tasks" for a in node.names):
                    hidden.append(f"{path.relative_to(TASKS.parent)}:{node.lineno}")
    assert not hidden, hidden


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("family", list(tasks.FAMILY_TABLE))
def test_every_family_has_the_same_shape(family: str) -> None:
    folder = TASKS / family
    assert {p.stem for p in folder.glob("*.py")} >= set(FAMILY_MODULES)
    fam = tasks.get(family)
    verify = importlib.import_module(f"tasks.{family}.verify")
    assert fam.check_names == verify.CHECK_NAMES and len(set(fam.check_names)) == len(fam.check_names)
    assert inspect.signature(verify.verify).parameters.keys() == {"instance", "snap"}
    assert inspect.getmodule(fam.env_class) is importlib.import_module(f"tasks.{family}.env")
    assert fam.env_class.snapshot is not Environment.snapshot
    # the verifier reads a snapshot: it imports neither the environment nor the oracle of any family
    graph = _import_graph()
    reach, todo = set(), [f"tasks.{family}.verify"]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in reach:
                reach.add(m)
                todo.append(m)
    assert not {m for m in reach if m.endswith((".env", ".oracle"))}, reach


def test_no_function_in_tasks_is_over_80_lines() -> None:
    long = []
    for path in sorted(TASKS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(TASKS.parent)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long
