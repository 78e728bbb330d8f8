"""code_refactor verifier: static (AST) checks of the refactoring, then the repository's tests and the
hidden reference tests (see docs/tasks.md and docs/security.md).

It reads a `CodeRefactorSnapshot`: a frozen copy of the final workspace (`tasks.runtime.workspace_copy`),
materialised into a directory of its own for the run, so the code under test never runs in (or changes)
the live environment. The hidden tests never enter the sandbox: the checker's own runner holds them and
asks the sandboxed code for each value (`hidden_run`), so the code under test can neither read nor forge them.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tasks.code_refactor import ast_checks
from tasks.code_refactor.data import Spec
from tasks.code_refactor.hidden_run import run_hidden
from tasks.code_refactor.package import HIDDEN_MODULE, hidden_test
from tasks.records import TaskInstance, Verdict
from tasks.runtime.sandbox import Sandbox, SandboxLimits
from tasks.runtime.workspace_copy import WorkspaceCopy, materialized

CHECK_NAMES = ("sources_parse", "new_name_defined", "old_name_removed", "signature_updated",
               "call_sites_pass_currency", "function_extracted", "caller_uses_extracted", "no_inline_tax",
               "module_moved", "imports_updated", "visible_tests_pass", "hidden_tests_pass")
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
    """The repository's tests in one sandboxed interpreter (they are the agent's own: it may edit them, so
    their report is the agent's word), then the hidden tests by the checker's own runner (`hidden_run`)."""
    source = hidden_test(spec)
    expected = source.count("    def test_")
    with ThreadPoolExecutor(1) as pool:  # side by side: a hang costs one wall-clock limit, not two
        visible = pool.submit(_run_visible, workspace)
        hidden = run_hidden(source, HIDDEN_MODULE, spec.pkg, workspace, VERIFY_LIMITS, VERIFY_WALL_S)
        reports = {"visible_tests_pass": visible.result(), "hidden_tests_pass": hidden}
    out: dict[str, tuple[bool, str]] = {}
    for name, want in (("visible_tests_pass", None), ("hidden_tests_pass", expected)):
        r = reports[name]
        if not isinstance(r, dict):
            continue
        ok = bool(r.get("ok")) and (want is None or r.get("ran") == want) and bool(r.get("ran"))
        out[name] = (ok, f"ran {r.get('ran')} tests\n{str(r.get('log', ''))[-1500:]}")
    return out


def _run_visible(workspace: Path) -> dict | None:
    sandbox = Sandbox(workspace, VERIFY_LIMITS)
    result = sandbox.python(_RUNNER.format(root=sandbox.root, marker=_MARKER), wall_s=VERIFY_WALL_S)
    if result.timed_out:
        return None
    for line in reversed(result.output.splitlines()):
        if line.startswith(_MARKER):
            try:
                report = json.loads(line[len(_MARKER):])
            except json.JSONDecodeError:
                return None
            return report if isinstance(report, dict) else None
    return None


_MARKER = "@@coevo-check@@"
_RUNNER = """import io, json, sys, unittest
sys.path[:0] = [{root!r}]
stream = io.StringIO()
try:
    result = unittest.TextTestRunner(stream=stream, verbosity=1).run(
        unittest.TestLoader().discover("tests", top_level_dir={root!r}))
    report = {{"ok": result.wasSuccessful(), "ran": result.testsRun, "log": stream.getvalue()[-1500:]}}
except BaseException as e:
    report = {{"ok": False, "ran": 0, "log": stream.getvalue()[-1000:] + repr(e)}}
sys.stdout.flush()
print("\\n{marker}" + json.dumps(report))
"""
