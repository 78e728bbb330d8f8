"""`showwork/<family>` (SIMULATED): from the student's own state it repairs in the student's form - the show-your-work
policy's action knowing every knowledge item - and it is the oracle where no such policy applies. Real
environments, the real rollout runtime and LiteLLM's custom-provider path."""

from __future__ import annotations

import pytest

import tasks
from agents.records import ModelRole
from agents.rollout import Limits, run_episode
from agents.providers.showwork import applies, repair_action
from harness import baseline
from tasks import show_work
from tasks.code_refactor import show_work as refactor
from tasks.payroll_audit import show_work as payroll
from tasks.records import Step, ToolCall


def _first(family: str, split: str, want: bool):
    return next(i for i in tasks.instances(family, split) if applies(i) == want)


async def _steps(env, calls: list[ToolCall]) -> list[Step]:
    return [Step(call=c, result=await env.call(c.name, c.arguments)) for c in calls]


async def test_after_the_student_s_wrong_program_it_runs_the_program_that_knows_the_rule():
    fam = tasks.get("payroll_audit")
    with fam.make_env(_first("payroll_audit", "train", True)) as env:
        env.reset()
        wrong = ToolCall(name="python", arguments={"code": payroll.program(frozenset())})  # no break deduction
        history = await _steps(env, [wrong])
        assert "[exit code 0]" in history[0].result.content and not env.verify().passed
        action = repair_action(fam, env, history)
        assert action == ToolCall(name="python", arguments={"code": payroll.program(payroll.ALL_KNOWN)})
        history += await _steps(env, [action])
        assert env.verify().passed  # the repair is the whole fix; the student only has to finish


@pytest.mark.parametrize("program", ["grep", "flag"])  # M0's program (the default) and M1's
async def test_after_a_rename_scoped_to_the_package_it_renames_over_the_whole_repository(program: str):
    fam = tasks.get("code_refactor")
    inst = _first("code_refactor", "train", True)
    old, new = refactor.rename_request(inst)
    with fam.make_env(inst) as env:
        env.reset()
        scoped = refactor._commands(old, new, "billing/", program)  # a student without update_every_reference
        history = await _steps(env, [ToolCall(name="shell", arguments={"command": c}) for c in scoped])
        action = repair_action(fam, env, history, "" if program == "grep" else program)
        assert action == ToolCall(name="shell", arguments={"command": refactor._commands(old, new, program=program)[0]})
        assert action.arguments["command"].startswith("tests=1; ") == (program == "flag")


async def test_served_as_a_model_it_solves_with_the_policy_or_the_oracle():
    for family, want in (("code_refactor", True), ("payroll_audit", False), ("stock_alert", False)):
        inst = _first(family, "val", want) if family != "stock_alert" else tasks.instances(family, "val")[0]
        env = tasks.make_env(inst)
        try:
            t = await run_episode(ModelRole(model=f"showwork/{family}"), baseline(family), env, seed=0,
                                  limits=Limits(max_turns=20))
        finally:
            env.close()
        assert t.passed, (family, t.verdict.feedback)
        calls = [c.name for turn in t.turns for c in turn.tool_calls]
        if family == "code_refactor":  # the show-your-work program, not the oracle's edits
            assert calls == ["shell", "shell", "shell"]


async def test_a_policy_with_one_program_acts_the_same_under_any_program_name():
    pay = tasks.get("payroll_audit")
    with pay.make_env(_first("payroll_audit", "train", True)) as env:
        env.reset()
        assert repair_action(pay, env, [], "flag") == repair_action(pay, env, [])


async def test_served_with_a_program_it_solves_in_that_form_and_refuses_an_unknown_one():
    inst = _first("code_refactor", "val", True)
    env = tasks.make_env(inst)
    try:
        t = await run_episode(ModelRole(model="showwork/code_refactor@flag"), baseline("code_refactor"), env, seed=0,
                              limits=Limits(max_turns=20))
    finally:
        env.close()
    assert t.passed, t.verdict.feedback
    commands = [c.arguments["command"] for turn in t.turns for c in turn.tool_calls]
    assert commands and all(c.startswith(("tests=1; ", "tests=0; ")) for c in commands[:-1]), commands
    for bad, says in (("code_refactor@values", "code_refactor's policy has no program 'values'"),
                      ("payroll_audit@nope", "unknown program")):
        with pytest.raises(ValueError, match=says):
            show_work.check_program(*bad.split("@"))


async def test_kinds_repairs_every_refactoring_kind_in_the_flag_form_and_means_flag_to_the_other_families():
    # "kinds" is code_refactor's flag program extended to every refactoring kind; under "flag" a move_module
    # request is the oracle's (list_files first), under "kinds" the flag program's search; anomaly_detection,
    # whose policy has no "kinds", acts under the program it extends
    inst = next(i for i in tasks.instances("code_refactor", "val") if i.payload["spec"]["kind"] == "move_module")
    assert not applies(inst, "flag") and applies(inst, "kinds")
    fam = tasks.get("code_refactor")
    with fam.make_env(inst) as env:
        env.reset()
        assert repair_action(fam, env, [], "flag").name == "list_files"
        action = repair_action(fam, env, [], "kinds")
        assert action.name == "shell" and action.arguments["command"].startswith("tests=1; grep -rn ")
    show_work.check_program("anomaly_detection", "kinds")
    anomaly = tasks.get("anomaly_detection")
    with anomaly.make_env(_first("anomaly_detection", "val", True)) as env:
        env.reset()
        assert repair_action(anomaly, env, [], "kinds") == repair_action(anomaly, env, [], "flag")
