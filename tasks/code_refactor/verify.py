"""code_refactor verifier: static (AST) checks of the refactoring, then the repository's tests and the
hidden reference tests in one sandboxed interpreter (see docs/tasks.md).

It reads a `CodeRefactorSnapshot`: a frozen copy of the final workspace (`tasks.runtime.workspace_copy`),
materialised into a directory of its own for the run, so the code under test never runs in (or changes)
the live environment. The hidden tests are bound read-only at /checker and never placed in the workspace.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tasks.code_refactor import ast_checks
from tasks.code_refactor.data import Spec
from tasks.code_refactor.package import HIDDEN_MODULE, hidden_test
from tasks.records import TaskInstance, Verdict
from tasks.runtime.sandbox import Sandbox, SandboxLimits
from tasks.runtime.workspace_copy import WorkspaceCopy, materialized

CHECK_NAMES = ("sources_parse", "new_name_defined", "old_name_removed", "signature_updated",
               "call_sites_pass_currency", "function_extracted", "caller_uses_extracted", "no_inline_tax",
               "module_moved", "imports_updated", "visible_tests_pass", "hidden_tests_pass")
CHECKER_ROOT = "/checker"  # read-only bind of the hidden test inside the sandbox
VERIFY_WALL_S = 20.0
VERIFY_LIMITS = SandboxLimits()  # the limits of the agent's own commands


class CodeRefactorSnapshot(BaseModel):
    """What the verifier reads: the whole final workspace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: WorkspaceCopy


def verify(instance: TaskInstance, snap: CodeRefactorSnapshot) -> Verdict:
    spec = Spec.model_validate(instance.payload["spec"])
    with materialized(snap.workspace) as root:
        modules, bad = ast_checks.parse_tree(root)
        results: dict[str, tuple[bool, str]] = {
            "sources_parse": (not bad, f"syntax errors in: {', '.join(bad)}"),
        }
        results.update(ast_checks.check(spec, modules))
        run = _run_tests(spec, root)
    for name, what in (("visible_tests_pass", "the repository's tests"),
                       ("hidden_tests_pass", "the hidden reference tests")):
        ok, why = run.get(name, (False, "the test run did not report (crashed, hung or printed too much)"))
        results[name] = (ok, f"{what} fail: {why}")
    return Verdict.from_checks({k: ok for k, (ok, _) in results.items()},
                               {k: why for k, (ok, why) in results.items() if not ok})


def _run_tests(spec: Spec, workspace: Path) -> dict[str, tuple[bool, str]]:
    """One sandboxed interpreter runs the repository's tests, then the hidden ones (both import the
    agent's package, so neither is more trusted); the report is the last marked JSON line."""
    source = hidden_test(spec)
    expected = source.count("    def test_")
    checker = Path(tempfile.mkdtemp(prefix="coevo-checker-"))
    try:
        checker.chmod(0o755)  # the sandbox uid must read it
        (checker / f"{HIDDEN_MODULE}.py").write_text(source)
        (checker / f"{HIDDEN_MODULE}.py").chmod(0o644)
        sandbox = Sandbox(workspace, VERIFY_LIMITS, ro_binds={CHECKER_ROOT: checker})
        checker_path = CHECKER_ROOT if sandbox.backend == "bwrap" else str(checker)
        code = _RUNNER.format(root=sandbox.root, checker=checker_path, hidden=HIDDEN_MODULE, marker=_MARKER)
        result = sandbox.python(code, wall_s=VERIFY_WALL_S)
    finally:
        shutil.rmtree(checker, ignore_errors=True)
    report = None
    for line in reversed(result.output.splitlines()):
        if line.startswith(_MARKER):
            try:
                report = json.loads(line[len(_MARKER):])
            except json.JSONDecodeError:
                pass
            break
    if not isinstance(report, dict) or result.timed_out:
        return {}
    out: dict[str, tuple[bool, str]] = {}
    for name, want in (("visible_tests_pass", None), ("hidden_tests_pass", expected)):
        r = report.get(name) or {}
        ok = bool(r.get("ok")) and (want is None or r.get("ran") == want) and bool(r.get("ran"))
        out[name] = (ok, f"ran {r.get('ran')} tests\n{str(r.get('log', ''))[-1500:]}")
    return out


_MARKER = "@@coevo-check@@"
_RUNNER = """import io, json, sys, unittest
sys.path[:0] = [{root!r}, {checker!r}]
def run(load):
    stream = io.StringIO()
    try:
        result = unittest.TextTestRunner(stream=stream, verbosity=1).run(load())
        return {{"ok": result.wasSuccessful(), "ran": result.testsRun, "log": stream.getvalue()[-1500:]}}
    except BaseException as e:
        return {{"ok": False, "ran": 0, "log": stream.getvalue()[-1000:] + repr(e)}}
loader = unittest.TestLoader()
report = {{"visible_tests_pass": run(lambda: loader.discover("tests", top_level_dir={root!r})),
          "hidden_tests_pass": run(lambda: loader.loadTestsFromName({hidden!r}))}}
sys.stdout.flush()
print("\\n{marker}" + json.dumps(report))
"""
