"""`coevo tasks check` over every family present: oracle 1.0 and do-nothing < 1.0 on every instance (but
browser_automation's written-tests instances: one per lab kind and difficulty here, all by the CLI)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import tasks
from flows.cli import app
from tasks.check import run_check


def _checked_here(family: str) -> list[int]:
    """Every instance, except browser_automation's written-tests instances: one per lab kind and difficulty.
    Each of those verifications runs the oracle's tests 12-14 times, each run a sandboxed pytest (~25-30 s of
    two cores; all 25 took 849 s of this test on CI). `coevo tasks check --family browser_automation` checks
    all of them (figures in docs/browser_tasks.md)."""
    keep, strata = [], set()
    for inst in tasks.instances(family):
        if inst.payload.get("kind") == "write_tests":
            stratum = (inst.payload["lab_kind"], inst.difficulty)
            if stratum in strata:
                continue
            strata.add(stratum)
        keep.append(inst.index)
    return keep


@pytest.mark.parametrize("family", tasks.families())  # one test per family: CI shows which one is slow
def test_oracle_solves_and_do_nothing_fails_everywhere(family):
    indices = _checked_here(family)
    summaries, results, seconds = run_check([family], workers=2, indices=indices)
    assert {(s.family, s.split) for s in summaries} == {(family, sp) for sp in ("train", "val", "test")}
    assert [int(r.instance_id.rsplit("/", 1)[-1]) for r in results] == indices
    bad = {s.family + "/" + s.split: s.failures[:5] for s in summaries if not s.ok}
    assert not bad, bad
    names = set(tasks.get(family).check_names)
    for r in results:
        assert r.oracle.verdict.score == 1.0 and r.do_nothing.verdict.score < 1.0, r.instance_id
        for v in (r.oracle.verdict, r.do_nothing.verdict):  # every verdict names only declared checks
            assert set(v.passed_checks + v.failed_checks) <= names, (r.instance_id, v)


@pytest.mark.parametrize("family", tasks.families())
def test_splits_are_20_20_60_by_index_with_two_difficulties(family):
    insts = tasks.instances(family)
    assert [i.index for i in insts] == list(range(100))
    assert [i.split for i in insts] == ["train"] * 20 + ["val"] * 20 + ["test"] * 60
    assert len({i.difficulty for i in insts}) >= 2


def test_cli_list_and_check_exit_codes():
    runner = CliRunner()
    listed = runner.invoke(app, ["tasks", "list"])
    assert listed.exit_code == 0, listed.output
    for name in tasks.families():
        assert name in listed.output
    assert "sandbox backend" in listed.output
    ok = runner.invoke(app, ["tasks", "check", "--family", "payroll_audit", "--split", "val", "--workers", "1"])
    assert ok.exit_code == 0, ok.output
    assert "payroll_audit" in ok.output and "FAIL" not in ok.output
    bad = runner.invoke(app, ["tasks", "check", "--split", "nope"])
    assert bad.exit_code != 0
