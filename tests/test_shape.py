"""Shape rules the codebase keeps (docs/architecture.md): who may import whom, no import circles, light cores,
verifiers that read only a snapshot, no long functions.

For the layering every import counts, wherever it sits: module level, inside a function, under
`if TYPE_CHECKING:`. For circles every import that runs counts, function bodies included: a deferred import is
still a dependency, and a circle through one (`agents/client.py` -> `agents/flawed/provider.py` ->
`agents/client.py` was one) passes any check that reads module level only. An import under `if TYPE_CHECKING:`
never runs; it is how a module names a type from a module above it in the same room. A package importing its
own submodule, or a submodule its package, is not a circle. tests/ and benchmarks/ sit outside the rooms and may
import anything. Functions outside tests/ and benchmarks/ stay at most 80 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 80

# room -> the rooms it may import. Data flows up this table; no room lists flows, so nothing imports flows/.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "tasks": frozenset(),
    "harness": frozenset({"tasks"}),
    "agents": frozenset({"tasks", "harness"}),
    "training": frozenset({"tasks", "harness", "agents"}),
    "analysis": frozenset({"tasks", "harness", "agents"}),
    "correction": frozenset({"tasks", "harness", "agents", "training", "analysis"}),
    "deploy": frozenset({"tasks", "harness", "agents", "training", "analysis"}),
    "flows": frozenset({"tasks", "harness", "agents", "training", "analysis", "correction", "deploy"}),
}
ROOMS = tuple(MAY_IMPORT)
LIGHT_ROOMS = ("tasks", "harness")  # usable and testable without the heavy stack
HEAVY = frozenset({"ray", "torch", "prefect", "litellm", "transformers", "peft", "accelerate", "vllm"})

Import = tuple[str, int]  # (dotted module name, line)


def module_name(path: Path, root: Path = REPO) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (never executed: how Python names a type from above)."""
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and (
        (isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
        or (isinstance(n.test, ast.Attribute) and n.test.attr == "TYPE_CHECKING"))]
    return {id(n) for b in blocks for stmt in b.body for n in ast.walk(stmt)}


def imports_of(tree: ast.Module, module: str, is_package: bool, type_only: bool = True) -> list[Import]:
    """Every module `module` imports, anywhere in its body (with `type_only=False`, not those under
    `if TYPE_CHECKING:`); `from pkg import x` also names `pkg.x` (x may be a submodule); relative imports are
    resolved."""
    found: list[Import] = []
    skip = set() if type_only else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parent = parts if is_package else parts[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, node.lineno))
            found.extend((f"{base}.{a.name}", node.lineno) for a in node.names)
    return found


def parse_rooms(root: Path = REPO) -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for room in ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            out[module_name(path, root)] = (path, ast.parse(path.read_text(), filename=str(path)))
    return out


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def import_graph(mods: dict[str, tuple[Path, ast.Module]]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports when it runs, function bodies included (importing a.b.c first
    runs a/__init__ and a/b/__init__)."""
    graph: dict[str, set[str]] = {}
    for name, (path, tree) in mods.items():
        imported = [m for m, _ in imports_of(tree, name, path.name == "__init__.py", type_only=False)]
        with_parents = {".".join(t.split(".")[:i]) for t in imported for i in range(1, t.count(".") + 2)}
        graph[name] = {t for t in with_parents if t in mods and not _related(name, t)}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def dfs(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
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


def layering_breaches(mods: dict[str, tuple[Path, ast.Module]], root: Path = REPO) -> list[str]:
    """Imports of a room the importer may not import, and heavy packages imported by a light room."""
    out: dict[tuple[str, int], str] = {}
    for name, (path, tree) in mods.items():
        room = name.split(".")[0]
        for target, line in imports_of(tree, name, path.name == "__init__.py"):
            top = target.split(".")[0]
            upward = top in MAY_IMPORT and top != room and top not in MAY_IMPORT[room]
            heavy = room in LIGHT_ROOMS and top in HEAVY
            where = (str(path.relative_to(root)), line)
            if (upward or heavy) and where not in out:  # `from m import x` is one breach, not two
                out[where] = f"{where[0]}:{line} {room}/ imports {target}"
    return [out[k] for k in sorted(out)]


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def long_functions(tree: ast.Module, where: str) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if n > MAX_FUNCTION_LINES:
                out.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_each_room_imports_only_the_rooms_below_it() -> None:
    breaches = layering_breaches(parse_rooms())
    assert not breaches, "imports against the layering (docs/architecture.md):\n" + "\n".join(breaches)


def test_no_import_circles_function_level_imports_included() -> None:
    cycles = find_cycles(import_graph(parse_rooms()))
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_a_verifier_reads_a_snapshot_and_reaches_no_environment_or_oracle() -> None:
    graph = import_graph(parse_rooms())
    verifiers = [m for m in graph if m.startswith("tasks.") and m.endswith(".verify")]
    assert len(verifiers) >= 7  # the walk found the families
    reached = {v: sorted(m for m in reaches(graph, v) if m.endswith((".env", ".oracle"))) for v in verifiers}
    assert not {v: r for v, r in reached.items() if r}


def test_no_function_over_80_lines() -> None:
    long = [f for path, tree in parse_rooms().values() for f in long_functions(tree, str(path.relative_to(REPO)))]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def _plant(tmp: Path, files: dict[str, str]) -> dict[str, tuple[Path, ast.Module]]:
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return {module_name(tmp / rel, tmp): (tmp / rel, ast.parse(text)) for rel, text in files.items()}


def test_the_graph_sees_an_import_inside_a_function_and_the_circle_it_closes(tmp_path: Path) -> None:
    mods = _plant(tmp_path, {
        "agents/client.py": "from agents.flawed.provider import FlawedLLM\n",
        "agents/flawed/provider.py": "def f():\n    from agents.client import parse_tool_calls\n",
        "agents/flawed/__init__.py": "",
        "agents/__init__.py": "",
        "agents/records.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from agents.client import X\n",
    })
    graph = import_graph(mods)
    assert graph["agents.flawed.provider"] == {"agents.client"}
    assert graph["agents.records"] == set()  # a type-only import never runs
    assert find_cycles(graph) == [["agents.client", "agents.flawed.provider", "agents.client"]]


def test_the_cycle_finder_finds_a_planted_circle_and_nothing_in_a_line() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_a_deferred_upward_import_and_a_heavy_import_in_a_light_room_are_breaches(tmp_path: Path) -> None:
    mods = _plant(tmp_path, {
        "harness/search.py": "def f():\n    from agents.client import ModelClient\n",
        "tasks/env.py": "import os\n\nif True:\n    import ray\n",
        "flows/cli/app.py": "import agents.client\nfrom correction import mix\n",
    })
    assert layering_breaches(mods, tmp_path) == ["harness/search.py:2 harness/ imports agents.client",
                                       "tasks/env.py:4 tasks/ imports ray"]


def test_the_walk_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(ast.parse(f"def f():\n{body}\n"), "m.py") == [f"m.py:1 f ({MAX_FUNCTION_LINES + 1} lines)"]
    assert long_functions(ast.parse("def g():\n    return 1\n"), "m.py") == []


FLOWS_LAYOUT = {  # the preflight's modules as they import each other today (flows/placement.py names RunConfig
    "flows/__init__.py": "from flows import config\n",  # for type checking only); a package importing its own
    "flows/errors.py": "",                              # submodule is no circle
    "flows/config.py": "from flows import errors\nfrom flows.round.config import RoundConfig\n\n"
                       "def preflight():\n    from flows.doctor import require_ready\n",
    "flows/doctor.py": "from flows.doctor_checks import check_roles\n",
    "flows/doctor_checks.py": "def check_gpus():\n    from flows.placement import check_placement\n",
    "flows/placement.py": "from typing import TYPE_CHECKING\n\nfrom flows.errors import ConfigError\n\n"
                          "if TYPE_CHECKING:\n    from flows.config import RunConfig\n",
    "flows/round/__init__.py": "",
    "flows/round/config.py": "from flows.placement import PlacementSettings\n",
}


def test_a_circle_inside_one_package_closed_by_a_function_level_import_is_found(tmp_path: Path) -> None:
    assert find_cycles(import_graph(_plant(tmp_path / "today", FLOWS_LAYOUT))) == []
    before = {**FLOWS_LAYOUT, "flows/placement.py": "def check_placement():\n    from flows.config import RunConfig\n"}
    assert find_cycles(import_graph(_plant(tmp_path / "before", before))) == [
        ["flows.config", "flows.doctor", "flows.doctor_checks", "flows.placement", "flows.config"]]
