"""Run an agent's Playwright tests against a generated page with pytest, in the sandbox.

Only the agent's `test_*.py` files are copied into a fresh directory next to our own `conftest.py` (an
agent's conftest could otherwise replace the `page` fixture). pytest, the Playwright driver and Chromium run
in `tasks.runtime.sandbox` like the shell tool: bubblewrap as an unprivileged uid, the test directory the
only writable place, no network but the page's own server (reached through `unix_relay`: a Unix socket
bound into the sandbox, forwarded to the server's loopback port inside it), whole-call limits on memory and
processes, and everything the tests started is killed when the call ends.

Score = passed / max(total, 5), as in the public suite; a test that never takes the `page` fixture is
counted in the total but not as passed (so `def test_x(): assert True` earns nothing). With `runs > 1`
every test that takes `page` is run that many times, each run's context carrying a run cookie the page's
server reads (`tasks.shop.lab_mutants`); `TestRun.outcomes` then holds each run's pass/fail.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tasks.runtime.browser import CHROMIUM_ARGS, chromium_path
from tasks.runtime.sandbox import Sandbox, SandboxLimits, SandboxResult
from tasks.runtime.unix_relay import FORWARDER, UnixRelay

MIN_TESTS = 5
TIMEOUT_S = 90.0
TEST_FILE_RE = re.compile(r"^(tests/)?test_[a-z0-9_]{1,60}\.py$")

CONFTEST = '''
import hashlib
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
def _coevo_run():
    return 0


@pytest.fixture(autouse=True)
def _coevo_same_randomness():
    """Every run of a test starts from the same `random` state, so a coin-flip test answers alike on the
    correct page and on every seeded fault and cannot catch a fault by luck."""
    import random

    random.seed(0)


def pytest_generate_tests(metafunc):
    runs = int(os.environ.get("COEVO_RUNS", "1"))
    if runs > 1 and "page" in metafunc.fixturenames:
        metafunc.parametrize("_coevo_run", range(runs), ids=[f"r{i}" for i in range(runs)])


_SHARED = {"key": None, "ctx": None, "page": None}


def _run_page(browser, key, run):
    """With several runs: one context for the session and one page per test, reloaded for each run with that
    run's cookie (a new renderer per run would multiply the cost)."""
    if _SHARED["ctx"] is None:
        _SHARED["ctx"] = browser.new_context()
    ctx, pg = _SHARED["ctx"], _SHARED["page"]
    if _SHARED["key"] != key or pg is None or pg.is_closed():
        if pg is not None and not pg.is_closed():
            pg.close()
        pg = _SHARED["page"] = ctx.new_page()
        _SHARED["key"] = key
    ctx.clear_cookies()
    ctx.add_cookies([{"name": "coevo_run", "value": f"{key}-{run}", "url": os.environ["PAGE_URL"]}])
    pg.set_default_timeout(4000)
    pg.goto(os.environ["PAGE_URL"])
    return pg


@pytest.fixture
def page(_coevo_browser, _coevo_run, request):
    """A fresh page already showing the page under test."""
    if int(os.environ.get("COEVO_RUNS", "1")) > 1:
        key = hashlib.sha256(f"{request.node.module.__name__}::{request.node.originalname}".encode()).hexdigest()[:16]
        yield _run_page(_coevo_browser, key, _coevo_run)
        return
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
    outcomes: dict[str, list[bool]] = {}  # with runs > 1: "module::test" -> pass/fail of each run

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


# The tests' whole call: Chromium reserves terabytes of address space and runs a hundred threads, so the
# per-process address-space cap is lifted and the call's cgroup (memory, tasks) is what holds it.
PW_LIMITS = SandboxLimits(wall_s=TIMEOUT_S, cpu_s=120, memory_bytes=1 << 46, call_memory_bytes=2 << 30,
                          max_procs=512, tmp_bytes=512 << 20, max_output_chars=16_000)
SITE_ROOT = "/coevo-site"  # the test runner's packages (pytest, playwright), read-only
NET_ROOT = "/coevo-net"  # the relay's socket


def run_tests(test_files: dict[str, str], page_url: str, *, timeout_s: float = TIMEOUT_S, runs: int = 1) -> TestRun:
    """Run the given {name: source} test files against `page_url` in the sandbox (each test `runs` times)."""
    if not test_files:
        return TestRun(error="no test files (write tests/test_<name>.py)")
    work = Path(tempfile.mkdtemp(prefix="coevo-pwtest-"))
    net = Path(tempfile.mkdtemp(prefix="coevo-pwnet-"))
    url = urllib.parse.urlsplit(page_url)
    relay = None
    try:
        work.chmod(0o755)
        net.chmod(0o755)
        for name, text in test_files.items():
            (work / Path(name).name).write_text(text)
        (work / "conftest.py").write_text(CONFTEST)
        (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        relay = UnixRelay(net / "shop.sock", url.hostname or "127.0.0.1", url.port or 80)
        result = _sandboxed_pytest(work, net, page_url, url.port or 80, runs, timeout_s)
        if result.timed_out:
            return TestRun(error=f"the tests did not finish within {timeout_s:.0f} s and were killed")
        return _parse(work, result.output, runs)
    finally:
        if relay is not None:
            relay.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(net, ignore_errors=True)


def _site_packages() -> Path:
    import playwright  # the runner's own packages, bound read-only into the sandbox

    return Path(playwright.__file__).resolve().parent.parent


def _chromium() -> str:
    """The browser binary itself (the /usr/bin launcher script reads /etc, which the sandbox lacks)."""
    real = Path("/usr/lib/chromium/chromium")
    return str(real) if real.exists() and not os.environ.get("COEVO_CHROMIUM") else chromium_path()


def _sandboxed_pytest(work: Path, net: Path, page_url: str, port: int, runs: int,
                      timeout_s: float) -> SandboxResult:
    sandbox = Sandbox(work, PW_LIMITS, ro_binds={SITE_ROOT: _site_packages(), NET_ROOT: net})
    bwrap = sandbox.backend == "bwrap"
    root = sandbox.root
    env = {"PAGE_URL": page_url, "COEVO_CHROMIUM": _chromium(), "COEVO_CHROMIUM_ARGS": " ".join(CHROMIUM_ARGS),
           "COEVO_NOPAGE_FILE": f"{root}/nopage.txt", "COEVO_RUNS": str(runs), "PYTHONDONTWRITEBYTECODE": "1"}
    args = ["-q", "-p", "no:asyncio", "-c", f"{root}/pytest.ini", "--rootdir", root, "--junitxml",
            f"{root}/report.xml", root]
    site = SITE_ROOT if bwrap else str(_site_packages())
    sock = f"{NET_ROOT}/shop.sock" if bwrap else str(net / "shop.sock")
    boot = (f"import os, sys\nsys.path.insert(0, {site!r})\nos.environ.update({env!r})\n" + FORWARDER
            + (f"_coevo_forward({port}, {sock!r})\n" if bwrap else "")
            + f"import pytest\ncode = pytest.main({args!r})\nsys.stdout.flush()\nos._exit(int(code))\n")
    return sandbox.python(boot, wall_s=timeout_s)


def _parse(work: Path, output: str, runs: int = 1) -> TestRun:
    report = work / "report.xml"
    if not report.exists():
        tail = re.sub(r"\d+\.\d+s", "", output.strip())[-800:]
        return TestRun(error=f"pytest produced no report: {tail}")
    nopage = set((work / "nopage.txt").read_text().split()) if (work / "nopage.txt").exists() else set()
    try:
        cases = list(ET.parse(report).getroot().iter("testcase"))
    except ET.ParseError as e:
        return TestRun(error=f"the test report could not be read: {e}")
    if runs > 1:
        return _parse_runs(cases, nopage, runs)
    total, passed, failures = 0, 0, []
    for case in cases:
        total += 1
        ok, why = _case_outcome(case, nopage)
        passed += ok
        if not ok:
            failures.append(why)
    if total == 0:
        tail = re.sub(r"\d+\.\d+s", "", output.strip())[-800:]
        return TestRun(error=f"no tests were collected: {tail}")
    return TestRun(total=total, passed=passed, failures=failures)


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


_RUN_ID = re.compile(r"^(?P<fn>[^\[]+)\[r(?P<run>\d+)\]$")


def _parse_runs(cases: list[ET.Element], nopage: set[str], runs: int) -> TestRun:
    """Each test's pass/fail per run (a test without every run, or without `page`, never passes)."""
    outcomes: dict[str, list[bool]] = {}
    failures: list[str] = []
    for case in cases:
        name = case.get("name", "?")
        m = _RUN_ID.match(name)
        key = f"{(case.get('classname') or '').split('.')[0]}::{m.group('fn') if m else name}"
        row = outcomes.setdefault(key, [False] * runs)
        ok, why = _case_outcome(case, nopage)
        if m and int(m.group("run")) < runs:
            row[int(m.group("run"))] = ok
        elif why:
            failures.append(why)  # a test without `page` is not run per variant: it tests nothing on the page
    if not outcomes:
        return TestRun(error="no tests were collected")
    return TestRun(total=len(outcomes), passed=sum(all(r) for r in outcomes.values()), failures=failures,
                   outcomes=outcomes)
