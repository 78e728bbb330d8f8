"""Code shape of training/ and flows/: no function over 80 lines (an AST walk over the source)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 80
PACKAGES = ("training", "flows")


def long_functions(root: Path, packages: tuple[str, ...], limit: int) -> list[str]:
    """`path:line name (N lines)` for every function or method longer than `limit` lines (decorators excluded)."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    if n > limit:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_over_80_lines() -> None:
    assert long_functions(REPO, PACKAGES, MAX_LINES) == []


def test_the_walk_finds_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(81))
    (tmp_path / "pkg" / "m.py").write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}\n")
    assert long_functions(tmp_path, ("pkg",), MAX_LINES) == ["pkg/m.py:6 long (82 lines)"]
