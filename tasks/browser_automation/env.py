"""browser_automation environment: the shop-admin app and the browser tools (`tasks.shop.env`), plus a tiny
scoped workspace (only tests/test_*.py files) and `run_tests` for the test-writing variant."""

from __future__ import annotations

import asyncio

from tasks.browser_automation.data import lab_page_of
from tasks.browser_automation.verify import BrowserAutomationSnapshot, verify
from tasks.records import TaskInstance, Verdict
from tasks.runtime.pw_tests import TEST_FILE_RE, TestRun, run_tests
from tasks.shop.env import ShopEnvironment
from tasks.shop.lab_pages import LabApp
from tasks.tooling import ToolError, tool

MAX_TEST_FILES = 5
MAX_TEST_CHARS = 50_000


class BrowserAutomationEnv(ShopEnvironment):
    """Shop tools plus a tiny scoped workspace (only tests/test_*.py files) for the test-writing variant."""

    def __init__(self, instance: TaskInstance) -> None:
        super().__init__(instance)
        self.files: dict[str, str] = {}

    def _setup(self) -> None:
        super()._setup()
        self.files = {}

    def lab_app(self) -> LabApp | None:
        lab = lab_page_of(self.instance.payload, self.instance.difficulty)
        return LabApp(lab) if lab is not None else None

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Write a test file into your workspace (replacing it if it exists).

        Args:
            path: 'tests/test_<name>.py' (lower-case letters, digits and underscores); nothing else can be written.
            content: The full Python source.
        """
        if not TEST_FILE_RE.match(path):
            raise ToolError(f"'{path[:80]}' is not allowed: write tests/test_<name>.py (lower-case, digits, underscores)")
        if len(content) > MAX_TEST_CHARS:
            raise ToolError(f"the file is {len(content)} characters; the limit is {MAX_TEST_CHARS}")
        name = path if path.startswith("tests/") else f"tests/{path}"
        if name not in self.files and len(self.files) >= MAX_TEST_FILES:
            raise ToolError(f"at most {MAX_TEST_FILES} test files; overwrite one of: {', '.join(sorted(self.files))}")
        self.files[name] = content
        return f"Wrote {name} ({len(content)} characters)."

    @tool
    def read_file(self, path: str) -> str:
        """Read back a test file you wrote.

        Args:
            path: The path given to write_file.
        """
        name = path if path.startswith("tests/") else f"tests/{path}"
        if name not in self.files:
            raise ToolError(f"no file '{path[:80]}'; files: {', '.join(sorted(self.files)) or '(none)'}")
        return self.files[name]

    @tool
    async def run_tests(self) -> str:
        """Run your test files with pytest against the /lab page and report which tests pass."""
        if "lab_seed" not in self.instance.payload:
            raise ToolError("this task has no page to test; run_tests is only for test-writing tasks")
        return (await self._run_tests()).summary()

    async def _run_tests(self) -> TestRun:
        if self.server is None:
            raise ToolError("the environment is not running")
        url = self.server.origin + "/lab"
        return await asyncio.to_thread(run_tests, dict(self.files), url)

    def snapshot(self) -> BrowserAutomationSnapshot:
        tests_only = "lab_seed" in self.instance.payload  # the test-writing variant is judged on its files alone
        return BrowserAutomationSnapshot(tables={} if tests_only else self.tables(), files=dict(self.files))

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())
