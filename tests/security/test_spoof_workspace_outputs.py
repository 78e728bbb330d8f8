"""Red team, files a verifier reads (#12 §1), through the shell tool only, on payroll_audit (its verifier
reads `audit.csv` and `exceptions.json` out of the workspace; every workspace family reads files the same
way): symlinks out of the workspace, to a device, to another workspace file; a FIFO; an oversized file; and
a background writer meant to land the right answer after the call. Each scores what its real effect earns:
nothing written (the do-nothing score), or exactly what the same bytes written plainly earn."""

from __future__ import annotations

import asyncio
import shlex

import pytest

import tasks
from tasks.payroll_audit.data import AUDIT_FILE, EXCEPTIONS_FILE
from tasks.records import FinalAnswer, Step

FAMILY = tasks.get("payroll_audit")
INSTANCE = FAMILY.generate(0)
_CACHE: dict[str, object] = {}


async def _oracle_outputs() -> dict[str, str]:
    if "outputs" not in _CACHE:
        with FAMILY.make_env(INSTANCE) as env:
            env.reset()
            history: list[Step] = []
            while not isinstance(action := FAMILY.oracle_action(env, history), FinalAnswer):
                history.append(Step(call=action, result=await env.call(action.name, action.arguments)))
            assert env.verify().score == 1.0
            _CACHE["outputs"] = {f: env.read_text(f) for f in (AUDIT_FILE, EXCEPTIONS_FILE)}
    return _CACHE["outputs"]  # type: ignore[return-value]


async def _score_after(command: str, *, wait_s: float = 0.0) -> float:
    with FAMILY.make_env(INSTANCE) as env:
        env.reset()
        await env.call("shell", {"command": command})
        if wait_s:
            await asyncio.sleep(wait_s)
        return env.verify().score


def _nothing_written() -> float:
    with FAMILY.make_env(INSTANCE) as env:
        env.reset()
        return env.verify().score


ATTEMPTS = {
    "symlink_out_of_the_workspace": f"ln -s /etc/passwd {AUDIT_FILE}; ln -s /proc/self/environ {EXCEPTIONS_FILE}",
    "symlink_to_a_device": f"ln -s /dev/zero {AUDIT_FILE}; ln -s /dev/urandom {EXCEPTIONS_FILE}",
    "fifo_where_the_verifier_reads": f"mkfifo {AUDIT_FILE} {EXCEPTIONS_FILE}",
    "oversized_output": f"head -c 3000000 /dev/zero | tr '\\0' 'a' > {AUDIT_FILE}; cp {AUDIT_FILE} {EXCEPTIONS_FILE}",
    "directory_where_a_file_is_read": f"mkdir {AUDIT_FILE} {EXCEPTIONS_FILE}",
}


@pytest.mark.parametrize("name", list(ATTEMPTS))
async def test_special_outputs_score_as_nothing_written(name: str) -> None:
    assert await _score_after(ATTEMPTS[name]) == _nothing_written() < 1.0


async def test_a_writer_left_running_after_the_call_writes_nothing() -> None:
    outputs = await _oracle_outputs()
    writes = "; ".join(f"printf %s {shlex.quote(text)} > {name}" for name, text in outputs.items())
    score = await _score_after(f"(sleep 2; {writes}) > /dev/null 2>&1 &", wait_s=4.0)
    assert score == _nothing_written() < 1.0  # the background writer died with the call


async def test_a_symlink_to_another_workspace_file_scores_as_its_bytes() -> None:
    outputs = await _oracle_outputs()
    plain = await _score_after("; ".join(f"printf %s {shlex.quote(t)} > {n}" for n, t in outputs.items()))
    linked = await _score_after("; ".join(f"printf %s {shlex.quote(t)} > real_{n}; ln -s real_{n} {n}"
                                          for n, t in outputs.items()))
    assert plain == 1.0 and linked == plain  # a link inside the workspace is just its target's bytes
