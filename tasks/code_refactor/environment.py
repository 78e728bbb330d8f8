"""code_refactor environment: the generated package in a workspace; the verifier runs the hidden checks."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from tasks.code_refactor import checks
from tasks.code_refactor.package import HIDDEN_MODULE, Spec, hidden_test, render
from tasks.records import Verdict
from tasks.sandbox import Sandbox
from tasks.workspace import WorkspaceEnvironment

CHECKER_ROOT = "/checker"  # read-only bind of the hidden test inside the sandbox
VERIFY_WALL_S = 20.0


class CodeRefactorEnv(WorkspaceEnvironment):
    @property
    def spec(self) -> Spec:
        return Spec.model_validate(self.instance.payload["spec"])

    def _populate(self, root: Path) -> None:
        for rel, content in render(self.spec, after=False).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)

    def verify(self) -> Verdict:
        spec = self.spec
        modules, bad = checks.parse_tree(self.workspace)
        results: dict[str, tuple[bool, str]] = {
            "sources_parse": (not bad, f"syntax errors in: {', '.join(bad)}"),
        }
        results.update(checks.check(spec, modules))
        run = self._run_tests(spec)
        for name, what in (("visible_tests_pass", "the repository's tests"),
                           ("hidden_tests_pass", "the hidden reference tests")):
            ok, why = run.get(name, (False, "the test run did not report (crashed, hung or printed too much)"))
            results[name] = (ok, f"{what} fail: {why}")
        return Verdict.from_checks({k: ok for k, (ok, _) in results.items()},
                                   {k: why for k, (ok, why) in results.items() if not ok})

    def _run_tests(self, spec: Spec) -> dict[str, tuple[bool, str]]:
        """One sandboxed interpreter runs the repository's tests, then the hidden ones (both import the
        agent's package, so neither is more trusted); the report is the last marked JSON line."""
        source = hidden_test(spec)
        expected = source.count("    def test_")
        checker = Path(tempfile.mkdtemp(prefix="coevo-checker-"))
        try:
            checker.chmod(0o755)  # the sandbox uid must read it
            (checker / f"{HIDDEN_MODULE}.py").write_text(source)
            (checker / f"{HIDDEN_MODULE}.py").chmod(0o644)
            sandbox = Sandbox(self.workspace, self.sandbox.limits, ro_binds={CHECKER_ROOT: checker})
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

