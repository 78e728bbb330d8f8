"""What every family promises beyond its own tests: verdicts name only the declared checks, the verifier
judges a snapshot that shares nothing with the environment, the pretrain split, and tool results that
replay identically once their volatile parts are normalised."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from pydantic import ValidationError
from tasks_helpers import solve

import tasks
from tasks.base import PRETRAIN_START, pretrain_indices
from tasks.records import FinalAnswer, Step, TaskInstance, Verdict

BROWSER = ("website_admin", "browser_automation")
NON_BROWSER = [f for f in tasks.families() if f not in BROWSER]
ALL = tasks.families()


def _verify_module(family: str):  # type: ignore[no-untyped-def]
    return __import__(f"tasks.{family}.verify", fromlist=["verify"])


def _known(family: str, v: Verdict) -> Verdict:
    names = v.passed_checks + v.failed_checks
    assert set(names) <= set(tasks.get(family).check_names), (family, names)
    assert len(names) == len(set(names)), names
    return v


# --- check names ---------------------------------------------------------------------------------
@pytest.mark.parametrize("family", NON_BROWSER)
async def test_verdicts_along_the_oracle_name_only_declared_checks(family: str) -> None:
    """Every partial state of the oracle's run (from nothing done to all done) on instances of every kind
    and level; `tasks check` adds the oracle's and do-nothing's verdicts on all 700 instances."""
    fam = tasks.get(family)
    indices = (0, 3, 4, 7) if family == "code_refactor" else range(4)  # code_refactor: each kind once
    seen: set[str] = set()
    for i in indices:
        env = fam.make_env(fam.generate(i))
        env.reset()
        try:
            history: list[Step] = []
            while True:
                seen |= set(_known(family, env.verify()).failed_checks)
                action = fam.oracle_action(env, history)
                if isinstance(action, FinalAnswer):
                    break
                history.append(Step(call=action, result=await env.call(action.name, action.arguments)))
            assert _known(family, env.verify()).score == 1.0
        finally:
            env.close()
    assert len(seen) >= len(fam.check_names) // 2  # the run crossed many checks, not one


# --- the snapshot --------------------------------------------------------------------------------
@pytest.mark.parametrize("family", NON_BROWSER)
async def test_verify_judges_a_snapshot_that_outlives_the_environment(family: str) -> None:
    fam = tasks.get(family)
    inst = fam.generate(1)
    verify = _verify_module(family).verify
    env = fam.make_env(inst)
    env.reset()
    untouched = env.snapshot()
    await solve(env)
    solved = env.snapshot()
    with pytest.raises(ValidationError, match="frozen"):
        setattr(solved, next(iter(type(solved).model_fields)), None)
    assert verify(inst, solved) == env.verify() and env.verify().score == 1.0
    env.reset()  # the live state is gone (for workspace families, the whole directory)
    assert env.verify().score < 1.0
    assert verify(inst, solved).score == 1.0 and verify(inst, untouched).score < 1.0
    env.close()
    assert verify(inst, solved).score == 1.0


# --- the pretrain split --------------------------------------------------------------------------
@pytest.mark.parametrize("family", ALL)
def test_pretrain_indices_are_a_split_of_their_own(family: str) -> None:
    fam = tasks.get(family)
    evaluation = {json.dumps(i.payload, sort_keys=True) for i in fam.instances()}
    pretrain = fam.instances("pretrain", 3)
    assert [i.index for i in pretrain] == list(pretrain_indices(3)) == [PRETRAIN_START + k for k in range(3)]
    assert {i.split for i in pretrain} == {"pretrain"} and fam.generate(123_456).split == "pretrain"
    payloads = {json.dumps(i.payload, sort_keys=True) for i in pretrain}
    assert len(payloads) == 3 and not payloads & evaluation
    assert fam.generate(PRETRAIN_START) == pretrain[0]  # deterministic in the index
    for bad in (100, 500, PRETRAIN_START - 1, -1):
        with pytest.raises(ValueError, match="pretrain"):
            fam.generate(bad)
    with pytest.raises(ValueError, match="unbounded"):
        fam.instances("pretrain")


# --- replay: results identical after normalisation --------------------------------------------------
async def _oracle_run(inst: TaskInstance) -> list[Step]:
    env = tasks.make_env(inst)
    env.reset()
    try:
        return await solve(env)
    finally:
        env.close()


def _normalised(family: str, steps: list[Step]) -> list[tuple[str, str, bool]]:
    fam = tasks.get(family)
    return [(s.call.name, fam.normalize_result(s.call.name, s.result.content), s.result.is_error) for s in steps]


@pytest.mark.parametrize("family", ALL)
async def test_oracle_results_replay_identically_after_normalisation(family: str) -> None:
    """Two fresh environments, the oracle on the same instance: the same calls, and results equal call by
    call after `normalize_result` (what `agents.prefix` compares when it replays a recorded prefix)."""
    # browser families: one instance each (seconds each), a discount rule through the browser
    inst = tasks.get(family).generate(0 if family == "browser_automation" else 3)
    first, second = await _oracle_run(inst), await _oracle_run(inst)
    assert [s.call for s in first] == [s.call for s in second] and first
    assert _normalised(family, first) == _normalised(family, second)


async def test_workspace_commands_with_volatile_output_replay_after_normalisation() -> None:
    """Durations, file times and owners, clock readings and addresses differ between two runs of the same
    commands; normalised, the results are equal, while a real difference in output survives."""
    fam = tasks.get("code_refactor")
    commands = ["python3 -m unittest discover -s tests -t .", "touch new.txt && ls -l", "date '+%F %T'",
                "python3 -c 'print(object())'", "id"]

    async def run() -> list[str]:
        env = fam.make_env(fam.generate(0))
        env.reset()
        try:
            return [(await env.call("shell", {"command": c, "timeout_s": 20})).content for c in commands]
        finally:
            env.close()

    first = await run()
    await asyncio.sleep(1.1)  # the clock moves on
    second = await run()
    assert first != second  # the raw results do differ
    assert [fam.normalize_result("shell", c) for c in first] == [fam.normalize_result("shell", c) for c in second]
    assert re.search(r"Ran \d+ tests in <t>s", fam.normalize_result("shell", first[0]))
    for a, b in (("[exit code 0]\n1", "[exit code 0]\n2"), ("total 12.50", "total 12.51"), ("08:05", "08:06")):
        assert fam.normalize_result("shell", a) != fam.normalize_result("shell", b)


async def test_browser_results_with_the_server_port_replay_after_normalisation() -> None:
    """A failing written test reports the page's URL, which carries the instance server's port."""
    fam = tasks.get("browser_automation")
    inst = next(i for i in fam.instances("train") if i.payload["kind"] == "write_tests")
    test = "def test_url(page):\n    assert page.url == 'nope'\n"

    async def run() -> str:
        env = fam.make_env(inst)
        env.reset()
        try:
            await env.call("write_file", {"path": "tests/test_lab.py", "content": test})
            return (await env.call("run_tests", {})).content
        finally:
            env.close()

    first, second = await run(), await run()
    assert "127.0.0.1:" in first and first != second
    assert fam.normalize_result("run_tests", first) == fam.normalize_result("run_tests", second)
    assert "127.0.0.1:<port>" in fam.normalize_result("run_tests", first)
