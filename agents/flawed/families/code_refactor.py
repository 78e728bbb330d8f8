"""code_refactor faults: a file left un-updated (skipped or forgotten), refactoring conventions, request details.

A "file believed done" belief makes the oracle read that file as already refactored, so it never writes it.
Knowledge keys (harness/evolution/cards/code_refactor.yaml): update_every_reference, init_reexports,
move_module_package_init, no_alias_for_old_name, required_currency_parameter, extract_exact_signature.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip, call_of, read_before, with_args
from tasks.code_refactor.data import Spec
from tasks.code_refactor.package import render
from tasks.records import ToolCall


def _changed(env: Any) -> dict[str, str]:
    """Files the refactoring changes or adds: path -> reference content."""
    before, after = render(env.spec, after=False), render(env.spec, after=True)
    return {p: c for p, c in after.items() if before.get(p) != c}


def _believe_done(view: Any, unit: str) -> None:
    want = render(view.spec, after=True)[unit]
    base = view.read_text

    def read_text(path: str) -> str:
        return want if path == unit else base(path)
    view.read_text = read_text


def _callers_and_tests(env: Any) -> list[str]:
    spec: Spec = env.spec
    keep = {f"{spec.pkg}/{c.module}.py" for c in spec.callers} | {f"tests/test_{spec.pkg}.py"}
    return sorted(p for p in _changed(env) if p in keep)


def _init_file(env: Any) -> list[str]:
    path = f"{env.spec.pkg}/__init__.py"
    return [path] if path in _changed(env) else []


def _subpackage_init(env: Any) -> list[str]:
    spec: Spec = env.spec
    return [f"{spec.pkg}/{spec.subpackage}/__init__.py"] if spec.kind == "move_module" else []


def _written(env: Any, action: Action, path: str) -> ToolCall:
    call = call_of(action, "write_file")
    if call.arguments.get("path") != path:
        raise NotApplicable(f"not a write of {path}")
    return call


def _keep_alias(env: Any, action: Action) -> Action:
    spec: Spec = env.spec
    if spec.kind != "rename":
        raise NotApplicable("not a rename")
    home = spec.old_helpers if spec.target == "fmt" else f"{spec.pkg}/core.py"
    call = _written(env, action, home)
    old = spec.names[spec.target]
    return with_args(call, content=call.arguments["content"] + f"\n\n{old} = {spec.new_name}  # backwards compatibility\n")


def _default_currency(env: Any, action: Action) -> Action:
    spec: Spec = env.spec
    if spec.kind != "add_parameter":
        raise NotApplicable("not add_parameter")
    call = _written(env, action, spec.old_helpers)
    content = call.arguments["content"].replace(f"def {spec.names['fmt']}(value, currency):",
                                                f"def {spec.names['fmt']}(value, currency=\"USD\"):")
    return with_args(call, content=content)


def _lowercase_currency(env: Any, action: Action) -> Action:
    spec: Spec = env.spec
    call = call_of(action, "write_file")
    needle = f'currency="{spec.currency}"'
    if spec.kind != "add_parameter" or needle not in call.arguments["content"]:
        raise NotApplicable("no currency argument written")
    return with_args(call, content=call.arguments["content"].replace(needle, needle.lower()))


def _extract_name(env: Any, action: Action) -> Action:
    spec: Spec = env.spec
    if spec.kind != "extract_function":
        raise NotApplicable("not extract_function")
    call = _written(env, action, f"{spec.pkg}/core.py")
    return with_args(call, content=re.sub(rf"\b{spec.new_name}\b", spec.new_name + "_amount", call.arguments["content"]))


def _inline_tax_kept(env: Any, action: Action) -> Action:
    spec: Spec = env.spec
    if spec.kind != "extract_function":
        raise NotApplicable("not extract_function")
    call = _written(env, action, f"{spec.pkg}/core.py")
    inline = "tax = round(discounted * TAX_RATE, 2)"
    return with_args(call, content=call.arguments["content"].replace(f"tax = {spec.new_name}(discounted)", inline))


def _keep_old_module(env: Any, action: Action) -> Action:
    spec: Spec = env.spec
    call = call_of(action, "shell")
    words = shlex.split(call.arguments["command"])
    if spec.kind != "move_module" or words[:3] != ["rm", "-rf", "--"] or spec.old_helpers not in words:
        raise NotApplicable("not the removal of the old module")
    rest = [w for w in words[3:] if w != spec.old_helpers]
    if not rest:
        raise NotApplicable("the old module is the only file removed")
    return with_args(call, command="rm -rf -- " + " ".join(shlex.quote(w) for w in rest))


MENU = FamilyMenu(
    family="code_refactor",
    beliefs=(
        Belief("skip_file", "planning", _callers_and_tests, _believe_done,
               "never updates {unit} (believes nothing there needs to change)", key="update_every_reference",
               cues=("every", "reference", "import", "call site")),
        Belief("forget_file", "long_context", _callers_and_tests, _believe_done,
               "forgets to write {unit} after reading it", cues=("every", "reference"),
               retrieved=lambda env, history, u: read_before(history, "read_file", lambda a: a.get("path") == u)),
        Belief("skip_init_reexport", "implicit_knowledge", _init_file, _believe_done,
               "leaves the package __init__.py re-exports as they were", key="init_reexports",
               cues=("__init__", "re-export")),
        Belief("no_subpackage_init", "implicit_knowledge", _subpackage_init, _believe_done,
               "does not create the new subpackage's __init__.py", key="move_module_package_init",
               cues=("__init__", "subpackage")),
    ),
    slips=(
        Slip("keep_alias", "implicit_knowledge", _keep_alias, "kept the old name as an alias",
             key="no_alias_for_old_name", cues=("alias", "old name")),
        Slip("default_currency", "implicit_knowledge", _default_currency, "gave the new parameter a default",
             key="required_currency_parameter", cues=("default", "required")),
        Slip("inline_tax_kept", "implicit_knowledge", _inline_tax_kept,
             "defined the extracted function but kept the inline computation in the caller",
             key="extract_exact_signature", cues=("inline", "extract")),
        Slip("lowercase_currency", "instruction_following", _lowercase_currency,
             "passed the currency code in lower case", cues=("currency",)),
        Slip("extract_name", "instruction_following", _extract_name,
             "named the extracted function differently from the request", cues=("name", "extract")),
        Slip("keep_old_module", "instruction_following", _keep_old_module, "left the old module file in place",
             cues=("old module", "helpers.py", "no longer exist")),
    ),
    adjacent={
        "write_file": lambda c: ToolCall(name="edit_file", arguments={"path": c.arguments["path"], "old_text": "",
                                                                        "new_text": c.arguments["content"]}),
        "read_file": lambda c: ToolCall(name="list_files", arguments={"path": c.arguments["path"]}),
        "shell": lambda c: ToolCall(name="python", arguments={"code": c.arguments["command"]}),
    },
    read_tools=frozenset({"read_file", "list_files"}),
    write_tools=frozenset({"write_file", "shell"}),
    not_applicable={
        "implicit_knowledge": "per request kind: rename (keep_alias), add_parameter (default_currency), "
                              "extract_function (inline_tax_kept), move_module (no_subpackage_init); "
                              "skip_init_reexport on hard instances",
        "instruction_following": "rename has none (its one constraint, no alias, is the knowledge item)",
    },
)
