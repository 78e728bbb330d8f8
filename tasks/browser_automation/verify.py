"""browser_automation verifier. Workflows are judged on the database (each gold change and each field of
each expected new row, nothing else touched); the test-writing variant runs the agent's test files with
pytest against the lab page, served by a server of the verifier's own: score = passing tests / max(number
of tests, 5) (see docs/browser_tasks.md).

It reads a `BrowserAutomationSnapshot` (the final mutable tables and the written test files), never the
environment or its server, so it also works after the environment is closed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.browser_automation.data import lab_page_of
from tasks.records import TaskInstance, Verdict
from tasks.runtime.pw_tests import TestRun, run_tests
from tasks.shop.checks import diff_checks, initial_tables
from tasks.shop.data import generate_shop
from tasks.shop.lab_pages import LabApp
from tasks.shop.server import ShopServer

CHECK_NAMES = ("requested_changes", "new_row_created", "new_row_fields", "no_collateral_changes", "tests_written",
               "tests_pass")


class BrowserAutomationSnapshot(BaseModel):
    """What the verifier reads: every mutable table (rows as dicts, in key order) and the test files written
    (path -> source)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tables: dict[str, list[dict[str, Any]]]
    files: dict[str, str]


def verify(instance: TaskInstance, snap: BrowserAutomationSnapshot) -> Verdict:
    p = instance.payload
    if "lab_seed" in p:
        return _verify_tests(instance, snap.files)
    checks = diff_checks(initial_tables(generate_shop(p["shop_seed"])), snap.tables, p["changes"], p["new_rows"])
    return Verdict.from_items(checks)


def run_on_lab_page(instance: TaskInstance, files: dict[str, str]) -> TestRun:
    """Run test files against a fresh server that serves only the instance's lab page."""
    server = ShopServer(LabApp(lab_page_of(instance.payload, instance.difficulty)))
    server.start()
    try:
        return run_tests(dict(files), server.origin + "/lab")
    finally:
        server.stop()


def _verify_tests(instance: TaskInstance, files: dict[str, str]) -> Verdict:
    if not files:
        return Verdict(score=0.0, failed_checks=["tests_written"],
                       feedback="FAILED tests_written: no test file was written")
    run = run_on_lab_page(instance, files)
    slots = [(True, "")] * run.passed + [(False, "not passed")] * (max(run.total, 5) - run.passed)
    return Verdict.from_items({"tests_pass": slots}).model_copy(update={"feedback": run.summary()})
