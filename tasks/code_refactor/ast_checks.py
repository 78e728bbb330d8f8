"""Static (AST) checks of a refactoring, run in our process on the agent's files (parsed, never executed).

Each function returns {check name: (passed, why-not)}; verify.py adds the sandboxed test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tasks.code_refactor.data import Spec

MAX_SOURCE_BYTES = 512 << 10
MAX_FILES = 300
Result = dict[str, tuple[bool, str]]


def parse_tree(root: Path) -> tuple[dict[str, ast.Module], list[str]]:
    """All .py files under root (relative posix path -> AST) and the files that do not parse."""
    modules: dict[str, ast.Module] = {}
    bad: list[str] = []
    for path in sorted(root.rglob("*.py"))[:MAX_FILES]:
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        try:
            if path.stat().st_size > MAX_SOURCE_BYTES:
                raise ValueError("too large")
            modules[rel] = ast.parse(path.read_bytes(), filename=rel)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            bad.append(rel)
    return modules, bad


def _identifiers(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[-1])
            out.add(node.name.split(".")[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out.add(node.value)  # __all__ entries and getattr strings count as references
    return out


def _function(tree: ast.Module | None, name: str) -> ast.FunctionDef | None:
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def check(spec: Spec, modules: dict[str, ast.Module]) -> Result:
    if spec.kind == "rename":
        return _rename(spec, modules)
    if spec.kind == "add_parameter":
        return _add_parameter(spec, modules)
    if spec.kind == "extract_function":
        return _extract(spec, modules)
    return _move(spec, modules)


def _rename(spec: Spec, modules: dict[str, ast.Module]) -> Result:
    old, new = spec.names[spec.target], spec.new_name
    home = spec.old_helpers if spec.target == "fmt" else f"{spec.pkg}/core.py"
    defined = _function(modules.get(home), new) is not None
    leftovers = sorted(rel for rel, tree in modules.items() if old in _identifiers(tree))
    return {
        "new_name_defined": (defined, f"no top-level `def {new}` in {home}"),
        "old_name_removed": (not leftovers, f"`{old}` is still referenced in: {', '.join(leftovers)}"),
    }


def _add_parameter(spec: Spec, modules: dict[str, ast.Module]) -> Result:
    name = spec.names["fmt"]
    fn = _function(modules.get(spec.old_helpers), name)
    sig_ok = (fn is not None and [a.arg for a in fn.args.args] == ["value", "currency"]
              and not fn.args.defaults and not fn.args.kwonlyargs and fn.args.vararg is None)
    missing = []
    for rel, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called_name(node) == name:
                kw = {k.arg for k in node.keywords}
                if not (len(node.args) == 2 or (len(node.args) == 1 and "currency" in kw)):
                    missing.append(f"{rel}:{node.lineno}")
    return {
        "signature_updated": (sig_ok, f"`{name}` must take exactly (value, currency), currency required"),
        "call_sites_pass_currency": (not missing, f"calls without a currency at: {', '.join(missing)}"),
    }


def _extract(spec: Spec, modules: dict[str, ast.Module]) -> Result:
    core = modules.get(f"{spec.pkg}/core.py")
    new = _function(core, spec.new_name)
    invoice = _function(core, spec.names["invoice"])
    calls = invoice is not None and any(
        isinstance(n, ast.Call) and _called_name(n) == spec.new_name for n in ast.walk(invoice))
    inline = invoice is not None and "TAX_RATE" in _identifiers(invoice)
    return {
        "function_extracted": (new is not None and [a.arg for a in new.args.args] == ["amount"],
                               f"no top-level `def {spec.new_name}(amount)` in {spec.pkg}/core.py"),
        "caller_uses_extracted": (calls, f"`{spec.names['invoice']}` does not call `{spec.new_name}`"),
        "no_inline_tax": (invoice is not None and not inline,
                          f"`{spec.names['invoice']}` still computes the tax inline (uses TAX_RATE)"),
    }


def _move(spec: Spec, modules: dict[str, ast.Module]) -> Result:
    new_path = f"{spec.pkg}/{spec.subpackage}/helpers.py"
    old_mod = f"{spec.pkg}.helpers"
    stale = []
    for rel, tree in modules.items():
        in_pkg_root = rel.startswith(f"{spec.pkg}/") and rel.count("/") == 1
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == old_mod or a.name.startswith(old_mod + ".")
                                                    for a in node.names):
                stale.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                absolute = node.level == 0 and (mod == old_mod or (mod == spec.pkg and any(
                    a.name == "helpers" for a in node.names)))
                relative = node.level == 1 and in_pkg_root and (mod == "helpers" or (not mod and any(
                    a.name == "helpers" for a in node.names)))
                if absolute or relative:
                    stale.append(f"{rel}:{node.lineno}")
    return {
        "module_moved": (new_path in modules and spec.old_helpers not in modules,
                         f"expected {new_path} to exist and {spec.old_helpers} to be gone"),
        "imports_updated": (not stale, f"imports of the old module at: {', '.join(stale)}"),
    }
