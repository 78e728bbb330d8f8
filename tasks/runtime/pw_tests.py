"""Run an agent's Playwright tests against a generated page with pytest, in the sandbox.

Only the agent's `test_*.py` files are copied into a fresh directory next to our own `conftest.py` (an
agent's conftest could otherwise replace the `page` fixture). pytest and its Playwright client run in
`tasks.runtime.sandbox` like the shell tool: bubblewrap as an unprivileged uid, the test directory the only
writable place, whole-call limits on memory and processes, and everything the tests started is killed when
the call ends. Their only network is the way to the call's one browser (`tasks.runtime.pw_browser`: Chromium
in a sandbox of its own whose only network is the page's server), through a gate that refuses the calls
reaching beyond a run's own contexts (`tasks.runtime.pw_gate`).

Score = passed / max(total, 5), as in the public suite; a test that never takes the `page` fixture is
counted in the total but not as passed (so `def test_x(): assert True` earns nothing). With `tokens`, the
files are run once per token, each run a pytest of its own in a fresh sandbox (its own copy of the files,
its own /tmp, its own browser connection and contexts), whose contexts carry that token as a cookie the
page's server reads (`tasks.shop.lab_mutants`); `TestRun.outcomes` then holds each test's pass/fail per run.
Runs share nothing but the browser process: a test in one run cannot see what another run was served.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tasks.runtime.pw_browser import GATE_SOCKET, NET_ROOT, SITE_ROOT, SharedBrowser, site_packages
from tasks.runtime.sandbox import Sandbox, SandboxLimits, SandboxResult
from tasks.runtime.unix_relay import FORWARDER

MIN_TESTS = 5
TIMEOUT_S = 90.0
WORKERS = 2  # runs at a time (sharing the call's one browser)
TEST_FILE_RE = re.compile(r"^(tests/)?test_[a-z0-9_]{1,60}\.py$")

CONFTEST = '''
import os
import pytest
from playwright.sync_api import sync_playwright


@pytest.fixture(scope="session")
def _coevo_browser():
    with sync_playwright() as p:
        browser = p.chromium.connect(os.environ["COEVO_BROWSER_WS"], timeout=20000)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def _coevo_same_randomness():
    """Every run of a test starts from the same `random` state, so a coin-flip test answers alike on the
    correct page and on every seeded fault and cannot catch a fault by luck."""
    import random

    random.seed(0)


_SHARED = {"ctx": None, "page": None}
_LOADED = "window.__coevo_fixture_load === true"  # set on the document the fixture loaded


@pytest.fixture
def page(_coevo_browser):
    """The page under test, freshly loaded. One context and one page serve every test of the run (a new
    renderer per test would multiply the cost); the run's token cookie is set again before each test. A page
    an earlier test navigated again is replaced (its navigation may still be landing)."""
    url = os.environ["PAGE_URL"]
    pg = _SHARED["page"]
    if pg is not None and not pg.is_closed() and not _still_ours(pg, url):
        pg.close()
    if pg is None or pg.is_closed():
        try:
            pg = _SHARED["ctx"].new_page()
        except Exception:  # no context yet, or a test closed it
            _SHARED["ctx"] = _coevo_browser.new_context()
            pg = _SHARED["ctx"].new_page()
        _SHARED["page"] = pg
    ctx = _SHARED["ctx"]
    ctx.clear_cookies()
    token = os.environ.get("COEVO_TOKEN", "")
    if token:
        ctx.add_cookies([{"name": "coevo_run", "value": token, "url": url}])
    pg.set_default_timeout(4000)
    for attempt in range(3):
        try:
            pg.goto(url)
            pg.evaluate("window.__coevo_fixture_load = true")
            return pg
        except Exception as e:  # an earlier test's navigation landed over ours: load again
            if "interrupted by another navigation" not in str(e) or attempt == 2:
                raise


def _still_ours(pg, url):
    try:
        return pg.url == url and pg.evaluate(_LOADED)
    except Exception:  # a navigation is landing, or the page is gone
        return False


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
    cases: dict[str, bool] = {}  # one run: "module::test" -> passed
    outcomes: dict[str, list[bool]] = {}  # several runs (tokens): "module::test" -> passed, per run

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


# The tests' whole call (the browser runs in a sandbox of its own): pytest, the Playwright client and its node
# driver reserve gigabytes of address space, so the call's cgroup (memory, tasks) is what holds it.
PW_LIMITS = SandboxLimits(wall_s=TIMEOUT_S, cpu_s=120, memory_bytes=1 << 46, call_memory_bytes=1 << 30,
                          max_procs=256, tmp_bytes=256 << 20, max_output_chars=16_000)


def run_tests(test_files: dict[str, str], page_url: str, *, timeout_s: float = TIMEOUT_S,
              tokens: Sequence[str] = ()) -> TestRun:
    """Run the given {name: source} test files against `page_url` in the sandbox: once, or once per token in
    `tokens` (a fresh sandboxed pytest each, `WORKERS` at a time, one browser for all), merged into per-test
    outcomes."""
    if not test_files:
        return TestRun(error="no test files (write tests/test_<name>.py)")
    with SharedBrowser(page_url) as browser:
        with ThreadPoolExecutor(WORKERS) as pool:
            runs = list(pool.map(lambda t: _run_once(test_files, browser, page_url, timeout_s, t), tokens or [""]))
    if browser.failure:  # nothing could run
        return TestRun(error=browser.failure)
    return runs[0] if not tokens else _merge(runs)


def _run_once(test_files: dict[str, str], browser: SharedBrowser, page_url: str, timeout_s: float,
              token: str) -> TestRun:
    work = Path(tempfile.mkdtemp(prefix="coevo-pwtest-"))
    try:
        work.chmod(0o755)
        for name, text in test_files.items():
            (work / Path(name).name).write_text(text)
        (work / "conftest.py").write_text(CONFTEST)
        (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        result = _sandboxed_pytest(work, browser.net_dir, page_url, token, timeout_s)
        if result.timed_out:
            return TestRun(error=f"the tests did not finish within {timeout_s:.0f} s and were killed")
        return _parse(work, result.output)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _merge(runs: list[TestRun]) -> TestRun:
    """Per-test outcomes over runs: a test missing from a run, or a run that failed as a whole (an error, a
    timeout), counts as not passed there."""
    keys = list(dict.fromkeys(k for r in runs for k in r.cases))
    if not keys:
        return TestRun(error=next((r.error for r in runs if r.error), "no tests were collected"))
    outcomes = {k: [r.cases.get(k, False) for r in runs] for k in keys}
    failures = list(dict.fromkeys(f for r in runs for f in r.failures))
    failures += [f"a run failed as a whole: {r.error}" for r in runs if r.error][:1]
    return TestRun(total=len(keys), passed=sum(all(row) for row in outcomes.values()), failures=failures,
                   outcomes=outcomes)


def _sandboxed_pytest(work: Path, net: Path, page_url: str, token: str, timeout_s: float) -> SandboxResult:
    sandbox = Sandbox(work, PW_LIMITS, ro_binds={SITE_ROOT: site_packages(), NET_ROOT: net})
    bwrap = sandbox.backend == "bwrap"
    root = sandbox.root
    env = {"PAGE_URL": page_url, "COEVO_NOPAGE_FILE": f"{root}/nopage.txt", "COEVO_TOKEN": token,
           "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # our conftest needs no plugin; autoloading costs 0.4 s a run
    args = ["-q", "-p", "no:asyncio", "-c", f"{root}/pytest.ini", "--rootdir", root, "--junitxml",
            f"{root}/report.xml", root]
    site = SITE_ROOT if bwrap else str(site_packages())
    sock = f"{NET_ROOT}/{GATE_SOCKET}" if bwrap else str(net / GATE_SOCKET)
    boot = (f"import os, sys\nsys.path.insert(0, {site!r})\nos.environ.update({env!r})\n" + FORWARDER
            + f"os.environ['COEVO_BROWSER_WS'] = 'ws://127.0.0.1:%d/' % _coevo_forward(0, {sock!r})\n"
            + f"import pytest\ncode = pytest.main({args!r})\nsys.stdout.flush()\nos._exit(int(code))\n")
    return sandbox.python(boot, wall_s=timeout_s)


def _parse(work: Path, output: str) -> TestRun:
    report = work / "report.xml"
    if not report.exists():
        tail = re.sub(r"\d+\.\d+s", "", output.strip())[-800:]
        return TestRun(error=f"pytest produced no report: {tail}")
    nopage = set((work / "nopage.txt").read_text().split()) if (work / "nopage.txt").exists() else set()
    try:
        cases = list(ET.parse(report).getroot().iter("testcase"))
    except ET.ParseError as e:
        return TestRun(error=f"the test report could not be read: {e}")
    outcome: dict[str, bool] = {}
    failures = []
    for case in cases:
        ok, why = _case_outcome(case, nopage)
        outcome[f"{(case.get('classname') or '').split('.')[0]}::{case.get('name', '?')}"] = ok
        if not ok:
            failures.append(why)
    if not outcome:
        tail = re.sub(r"\d+\.\d+s", "", output.strip())[-800:]
        return TestRun(error=f"no tests were collected: {tail}")
    return TestRun(total=len(outcome), passed=sum(outcome.values()), failures=failures, cases=outcome)


def _case_outcome(case: ET.Element, nopage: set[str]) -> tuple[bool, str]:
    name = case.get("name", "?")
    bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
    uses_page = not any(n.endswith("::" + name) for n in nopage)
    if bad is None and uses_page:
        return True, ""
    if bad is None:
        return False, f"{name}: does not use the page fixture, so it tests nothing on the page"
    msg = (bad.get("message") or bad.tag).split("\n")[0][:200]
    return False, f"{name}: {bad.tag}: {msg}"
