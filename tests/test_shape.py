"""Shape rules the codebase keeps: no module-level import cycles between our modules, no long functions.

Only module-level imports count for cycles (an import inside a function or under `if TYPE_CHECKING:` runs
later or never, so it cannot deadlock module initialisation); a package importing its own submodule is not
a cycle. Functions outside tests/ and benchmarks/ stay at most 80 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("tasks", "harness", "agents", "training", "correction", "analysis", "flows", "deploy")
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            out[name] = (path, ast.parse(path.read_text(), filename=str(path)))
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _top_level_imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Modules imported when `module` is first executed (module body, try/if bodies; not functions)."""
    found: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")
                    parent = parts if is_package else parts[:-1]
                    parent = parent[: len(parent) - (node.level - 1)]
                    base = ".".join(parent + ([base] if base else []))
                found.append(base)
                found.extend(f"{base}.{a.name}" for a in node.names)  # `from pkg import submodule`
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
    return found


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, tree) in mods.items():
        imported = _top_level_imports(tree, name, path.name == "__init__.py")
        # importing a.b.c first runs a/__init__ and a/b/__init__: those are imports too
        with_parents = {".".join(t.split(".")[:i]) for t in imported for i in range(1, t.count(".") + 2)}
        targets = {t for t in with_parents if t in mods}
        graph[name] = {t for t in targets if not _related(name, t)}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def dfs(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                dfs(v, stack)
        stack.pop()
        state[u] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node, [])
    return cycles


def test_no_module_level_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def long_functions(tree: ast.Module, where: str) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if n > MAX_FUNCTION_LINES:
                out.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_80_lines() -> None:
    long = [f for _, (path, tree) in _modules().items() for f in long_functions(tree, str(path.relative_to(REPO)))]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_walk_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(ast.parse(f"def f():\n{body}\n"), "m.py") == [f"m.py:1 f ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions(ast.parse("def g():\n    return 1\n"), "m.py") == []
