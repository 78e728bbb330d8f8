"""code_refactor: hidden checker rejects partial refactors; oracle recovers from a messy state; replay."""

from __future__ import annotations

import pytest
from tasks_helpers import instances_in_fresh_process, solve

import tasks
from tasks.code_refactor.env import CodeRefactorEnv
from tasks.code_refactor.data import KINDS
from tasks.code_refactor.package import render

FAMILY = "code_refactor"


def _index(kind: str, hard: bool = False) -> int:
    """Instances cycle through the kinds in pairs (easy, hard)."""
    return KINDS.index(kind) * 2 + int(hard)


@pytest.fixture
def make():
    opened: list[CodeRefactorEnv] = []

    def _make(kind: str, hard: bool = False) -> CodeRefactorEnv:
        fam = tasks.get(FAMILY)
        env = fam.make_env(fam.generate(_index(kind, hard)))
        env.reset()
        opened.append(env)
        return env

    yield _make
    for env in opened:
        env.close()


async def _apply(env: CodeRefactorEnv, files: dict[str, str]) -> None:
    for path, content in files.items():
        r = await env.call("write_file", {"path": path, "content": content})
        assert not r.is_error, r.content


def test_generation_is_deterministic_across_processes():
    here = [tasks.get(FAMILY).generate(i).model_dump(mode="json") for i in (0, 7, 93)]
    assert instances_in_fresh_process(FAMILY, [0, 7, 93]) == here


def test_kinds_and_difficulties_cover_every_split():
    fam = tasks.get(FAMILY)
    for split in ("train", "val", "test"):
        insts = fam.instances(split)
        assert {i.payload["spec"]["kind"] for i in insts} == set(KINDS)
        assert {i.difficulty for i in insts} == {"easy", "hard"}


async def test_reference_refactor_passes_and_starting_state_fails(make):
    for kind in KINDS:
        env = make(kind, hard=True)
        assert env.verify().score < 1.0
        await _apply(env, render(env.spec, after=True))
        if kind == "move_module":
            await env.call("shell", {"command": f"rm {env.spec.old_helpers}"})
        v = env.verify()
        assert v.score == 1.0, (kind, v.feedback)


async def test_partial_rename_is_rejected(make):
    env = make("rename", hard=True)
    spec = env.spec
    home = spec.old_helpers if spec.target == "fmt" else f"{spec.pkg}/core.py"
    after = render(spec, after=True)
    await _apply(env, {home: after[home]})  # definition renamed, call sites and tests left behind
    v = env.verify()
    assert v.score < 1.0 and "old_name_removed" in v.failed_checks
    assert spec.names[spec.target] in v.feedback


async def test_rename_with_a_backward_compatible_alias_is_rejected(make):
    env = make("rename")
    spec = env.spec
    after = render(spec, after=True)
    home = spec.old_helpers if spec.target == "fmt" else f"{spec.pkg}/core.py"
    after[home] += f"\n{spec.names[spec.target]} = {spec.new_name}\n"
    await _apply(env, after)
    v = env.verify()
    assert v.failed_checks == ["old_name_removed", "hidden_tests_pass"]


async def test_optional_parameter_and_missed_call_site_are_rejected(make):
    env = make("add_parameter", hard=True)
    spec = env.spec
    after = render(spec, after=True)
    helpers = spec.old_helpers
    after[helpers] = after[helpers].replace("(value, currency):", f'(value, currency="{spec.currency}"):')
    await _apply(env, after)
    v = env.verify()
    assert "signature_updated" in v.failed_checks and "hidden_tests_pass" in v.failed_checks
    # now required again, but one call site still passes a single argument
    after = render(spec, after=True)
    after[helpers] = after[helpers].replace(f', currency="{spec.currency}")', ")")
    await _apply(env, after)
    v = env.verify()
    assert "call_sites_pass_currency" in v.failed_checks and v.score < 1.0


async def test_extract_without_using_the_new_function_is_rejected(make):
    env = make("extract_function")
    spec = env.spec
    before = render(spec, after=False)[f"{spec.pkg}/core.py"]
    core = before + (f"\n\ndef {spec.new_name}(amount):\n    return round(amount * TAX_RATE, 2)\n")
    await _apply(env, {f"{spec.pkg}/core.py": core})
    v = env.verify()
    assert {"caller_uses_extracted", "no_inline_tax"} <= set(v.failed_checks)
    assert "function_extracted" in v.passed_checks and "hidden_tests_pass" in v.passed_checks


async def test_copy_instead_of_move_is_rejected(make):
    env = make("move_module", hard=True)
    await _apply(env, render(env.spec, after=True))  # new module written, old helpers.py left in place
    v = env.verify()
    assert "module_moved" in v.failed_checks and "hidden_tests_pass" in v.failed_checks


async def test_broken_syntax_and_a_failing_test_are_rejected(make):
    env = make("extract_function", hard=True)
    spec = env.spec
    await _apply(env, {f"{spec.pkg}/core.py": "def broken(:\n"})
    v = env.verify()
    assert v.score < 0.5 and {"sources_parse", "visible_tests_pass", "hidden_tests_pass"} <= set(v.failed_checks)


async def test_oracle_recovers_from_a_messy_state(make):
    env = make("move_module", hard=True)
    spec = env.spec
    await env.call("write_file", {"path": f"{spec.pkg}/junk.py", "content": f"from {spec.pkg}.helpers import *\n"})
    await env.call("write_file", {"path": "tests/test_extra.py", "content": "import unittest\n"
                   "class T(unittest.TestCase):\n    def test_fail(self):\n        self.fail()\n"})
    await env.call("shell", {"command": f"mkdir -p {spec.pkg}/{spec.subpackage}/helpers.py"})  # dir in the way
    await solve(env)
    assert env.verify().score == 1.0


async def test_edit_file_refuses_ambiguous_or_missing_text_and_changes_nothing(make):
    env = make("rename")
    path = f"{env.spec.pkg}/core.py"
    original = env.read_text(path)
    for old in ("return", "no such text"):
        r = await env.call("edit_file", {"path": path, "old_text": old, "new_text": "x"})
        assert r.is_error and "nothing was changed" in r.content
    assert env.read_text(path) == original
    r = await env.call("edit_file", {"path": path, "old_text": "TAX_RATE = ", "new_text": "TAX_RATE  = "})
    assert not r.is_error and env.read_text(path) != original


async def test_replay_gives_the_same_results(make):
    env = make("add_parameter")
    history = await solve(env)
    calls = [s.call for s in history]
    first = [s.result for s in await env.replay(calls)]
    second = [s.result for s in await env.replay(calls)]
    assert first == second and env.verify().score == 1.0
