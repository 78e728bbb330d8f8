"""browser_automation verifier. Workflows are judged on the database (each gold change and each field of
each expected new row, nothing else touched); the test-writing variant runs the agent's test files with
pytest (in the sandbox) against the lab page and its seeded faults, served by a server of the verifier's own:
score = tests that pass on the page and catch a fault (at most the number of faults caught) / max(number of
tests, 5) (see docs/browser_tasks.md and docs/security.md).

It reads a `BrowserAutomationSnapshot` (the final mutable tables and the written test files), never the
environment or its server, so it also works after the environment is closed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.records import TaskInstance, Verdict
from tasks.runtime.pw_tests import MIN_TESTS, TestRun, run_tests
from tasks.shop.checks import diff_checks, initial_tables
from tasks.shop.data import generate_shop
from tasks.shop.lab_mutants import LabVariantsApp, RunSchedule, n_faults
from tasks.shop.lab_pages import make_lab_page
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


def run_on_mutants(instance: TaskInstance, files: dict[str, str]) -> tuple[TestRun, RunSchedule]:
    """Run test files against the lab page and its seeded faults: one sandboxed pytest per run of a secret
    schedule (`tasks.shop.lab_mutants`), each seeing only its own variant."""
    lab = make_lab_page(instance.payload["lab_seed"], instance.difficulty == "hard")
    schedule = RunSchedule(n_faults(lab))
    server = ShopServer(LabVariantsApp(lab, schedule))
    server.start()
    try:
        return run_tests(dict(files), server.origin + "/lab", tokens=schedule.tokens), schedule
    finally:
        server.stop()


def _verify_tests(instance: TaskInstance, files: dict[str, str]) -> Verdict:
    if not files:
        return Verdict(score=0.0, failed_checks=["tests_written"],
                       feedback="FAILED tests_written: no test file was written")
    run, schedule = run_on_mutants(instance, files)
    if run.error:
        slots = [(False, f"not passed: {run.error}")] * MIN_TESTS
        return Verdict.from_items({"tests_pass": slots}).model_copy(update={"feedback": run.summary()})
    earned, lines = judge_runs(run.outcomes, schedule.order)
    slots = [(True, "")] * earned + [(False, "passes on the page and catches a seeded fault: no")] * (
        max(len(run.outcomes), MIN_TESTS) - earned)
    lines += [f"- {f}" for f in run.failures[:10]]
    return Verdict.from_items({"tests_pass": slots}).model_copy(update={"feedback": "\n".join(lines)})


def judge_runs(outcomes: dict[str, list[bool]], order: list[int]) -> tuple[int, list[str]]:
    """Tests earning a slot: the same outcome on both runs of every variant (`order[i]`: run i's variant),
    passed on the correct page, failed on at least one fault. Earned = min(such tests, faults they catch
    together)."""
    good: list[str] = []
    caught: set[int] = set()
    lines = []
    for key, row in outcomes.items():
        seen: dict[int, set[bool]] = {}
        for passed, variant in zip(row, order, strict=True):
            seen.setdefault(variant, set()).add(passed)
        kills = {v for v, outs in seen.items() if v and outs == {False}}
        name = key.split("::", 1)[-1]
        if any(len(outs) > 1 for outs in seen.values()):
            lines.append(f"- {name}: gives different results on the same page (flaky): not counted")
        elif seen.get(0) != {True}:
            lines.append(f"- {name}: fails on the correct page")
        elif not kills:
            lines.append(f"- {name}: passes, but also passes on every seeded fault, so it tests nothing specified")
        else:
            good.append(key)
            caught |= kills
    earned = min(len(good), len(caught))
    head = (f"{len(good)} of {len(outcomes)} tests pass on the page and catch a seeded fault; together they catch "
            f"{len(caught)} of {max(order)} faults (score {earned}/{max(len(outcomes), MIN_TESTS)})")
    return earned, [head, *lines[:10]]
