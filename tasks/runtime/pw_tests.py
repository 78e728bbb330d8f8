"""Run an agent's Playwright tests against a generated page with pytest, in a child process.

Only the agent's `test_*.py` files are copied into a fresh directory next to our own `conftest.py` (an
agent's conftest could otherwise replace the `page` fixture). The child gets a wall-clock limit and its
whole process group (pytest, the Playwright driver, Chromium) is killed at the limit. It does not run in
`tasks.runtime.sandbox`: the tests need a browser and the instance's loopback server, which the sandbox's
network namespace and address-space limit rule out; see docs/browser_tasks.md.

Score = passed / max(total, 5), as in the public suite; a test that never takes the `page` fixture is
counted in the total but not as passed (so `def test_x(): assert True` earns nothing).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tasks.runtime.browser import CHROMIUM_ARGS, chromium_path

MIN_TESTS = 5
TIMEOUT_S = 90.0
TEST_FILE_RE = re.compile(r"^(tests/)?test_[a-z0-9_]{1,60}\.py$")

CONFTEST = '''
import os
import pytest
from playwright.sync_api import sync_playwright


@pytest.fixture(scope="session")
def _coevo_browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ["COEVO_CHROMIUM"],
                                    args=os.environ["COEVO_CHROMIUM_ARGS"].split())
        yield browser
        browser.close()


@pytest.fixture
def page(_coevo_browser):
    """A fresh page already showing the page under test."""
    ctx = _coevo_browser.new_context()
    pg = ctx.new_page()
    pg.set_default_timeout(4000)
    pg.goto(os.environ["PAGE_URL"])
    yield pg
    ctx.close()


def pytest_collection_modifyitems(items):
    with open(os.environ["COEVO_NOPAGE_FILE"], "w") as f:
        for item in items:
            if "page" not in getattr(item, "fixturenames", ()):
                f.write(item.nodeid + "\\n")
'''


class TestRun(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # not a pytest class

    total: int = 0
    passed: int = 0
    failures: list[str] = []
    error: str = ""

    @property
    def score(self) -> float:
        return min(1.0, self.passed / max(self.total, MIN_TESTS))

    def summary(self) -> str:
        lines = [f"{self.passed} passed, {self.total - self.passed} not passed, of {self.total} tests "
                 f"(score {self.passed}/{max(self.total, MIN_TESTS)})"]
        if self.error:
            lines.append(f"error: {self.error}")
        lines += [f"- {f}" for f in self.failures[:10]]
        return "\n".join(lines)


def run_tests(test_files: dict[str, str], page_url: str, *, timeout_s: float = TIMEOUT_S) -> TestRun:
    """Run the given {name: source} test files against `page_url`."""
    if not test_files:
        return TestRun(error="no test files (write tests/test_<name>.py)")
    work = Path(tempfile.mkdtemp(prefix="coevo-pwtest-"))
    try:
        for name, text in test_files.items():
            (work / Path(name).name).write_text(text)
        (work / "conftest.py").write_text(CONFTEST)
        (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")},
               "PAGE_URL": page_url, "COEVO_CHROMIUM": chromium_path(), "COEVO_CHROMIUM_ARGS": " ".join(CHROMIUM_ARGS),
               "COEVO_NOPAGE_FILE": str(work / "nopage.txt"), "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:asyncio", "-c", str(work / "pytest.ini"),
               "--rootdir", str(work), "--junitxml", str(work / "report.xml"), str(work)]
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return TestRun(error=f"the tests did not finish within {timeout_s:.0f} s and were killed")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftover browsers of a test that forked
            except ProcessLookupError:
                pass
        return _parse(work, out.decode("utf-8", "replace"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _parse(work: Path, output: str) -> TestRun:
    report = work / "report.xml"
    if not report.exists():
        tail = re.sub(r"\d+\.\d+s", "", output.strip())[-800:]
        return TestRun(error=f"pytest produced no report: {tail}")
    nopage = set((work / "nopage.txt").read_text().split()) if (work / "nopage.txt").exists() else set()
    total, passed, failures = 0, 0, []
    for case in ET.parse(report).getroot().iter("testcase"):
        total += 1
        name = case.get("name", "?")
        bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        uses_page = not any(n.endswith("::" + name) for n in nopage)
        if bad is None and uses_page:
            passed += 1
        elif bad is None:
            failures.append(f"{name}: does not use the page fixture, so it tests nothing on the page")
        else:
            msg = (bad.get("message") or bad.tag).split("\n")[0][:200]
            failures.append(f"{name}: {bad.tag}: {msg}")
    if total == 0:
        tail = re.sub(r"\d+\.\d+s", "", output.strip())[-800:]
        return TestRun(error=f"no tests were collected: {tail}")
    return TestRun(total=total, passed=passed, failures=failures)
