"""The sandbox holds: escapes through commands or file tools fail cleanly and the environment keeps answering."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import tasks
from tasks.runtime.sandbox import Sandbox, SandboxLimits, sandbox_backend
from tasks.runtime.workspace import WorkspaceEnvironment

needs_bwrap = pytest.mark.skipif(sandbox_backend() != "bwrap", reason="filesystem isolation needs bubblewrap")


@pytest.fixture
def env():
    fam = tasks.get("code_refactor")
    e = fam.make_env(fam.generate(0))
    e.reset()
    yield e
    e.close()


async def still_answers(env: WorkspaceEnvironment) -> None:
    r = await env.call("shell", {"command": "echo alive"})
    assert not r.is_error and "alive" in r.content and "[exit code 0]" in r.content


@needs_bwrap
async def test_etc_passwd_redirect_into_workspace_gets_nothing(env):
    r = await env.call("shell", {"command": "cat /etc/passwd > out.txt; cp /etc/shadow s.txt; ls /etc"})
    assert not r.is_error  # a failed command is a normal result the model reads
    assert "No such file" in r.content
    leaked = (env.workspace / "out.txt").read_text()
    assert "root:" not in leaked and leaked == ""
    assert not (env.workspace / "s.txt").exists()
    await still_answers(env)


async def test_dotdot_and_absolute_paths_are_refused_by_file_tools(env):
    parent = env.workspace.parent
    marker = f"escape-{uuid.uuid4().hex}.txt"
    for call, args in [
        ("read_file", {"path": "../" + env.workspace.name + "/tests/__init__.py"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("write_file", {"path": f"../{marker}", "content": "x"}),
        ("write_file", {"path": f"/tmp/{marker}", "content": "x"}),
        ("edit_file", {"path": "../../etc/hosts", "old_text": "a", "new_text": "b"}),
        ("list_files", {"path": ".."}),
    ]:
        r = await env.call(call, args)
        assert r.is_error, (call, args, r.content)
        assert "workspace" in r.content  # the message says how to fix it
    assert not (parent / marker).exists() and not Path(f"/tmp/{marker}").exists()
    ok = await env.call("read_file", {"path": "/workspace/tests/__init__.py"})  # the path commands see is fine
    assert not ok.is_error


@needs_bwrap
async def test_symlinks_out_of_the_workspace_are_refused(env):
    r = await env.call("shell", {"command": "ln -s /etc/passwd pw && ln -s / up && ln -s .. parent && echo made"})
    assert "made" in r.content
    for call, args in [
        ("read_file", {"path": "pw"}),
        ("read_file", {"path": "up/etc/passwd"}),
        ("write_file", {"path": "parent/escaped.txt", "content": "x"}),
        ("write_file", {"path": "up/tmp/escaped.txt", "content": "x"}),
    ]:
        r = await env.call(call, args)
        assert r.is_error and "outside the workspace" in r.content, (call, r.content)
    assert not (env.workspace.parent / "escaped.txt").exists()
    await still_answers(env)


@needs_bwrap
async def test_shell_writes_outside_the_workspace_do_not_reach_the_host(env):
    marker = f"escape-{uuid.uuid4().hex}"
    await env.call("shell", {"command": f"echo x > ../{marker}; echo x > /tmp/{marker}; echo x > /{marker}; "
                                        f"mkdir -p /usr/{marker}"})
    parent = env.workspace.parent
    assert not (parent / marker).exists()
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/{marker}").exists()
    assert not Path(f"/usr/{marker}").exists()
    await still_answers(env)


async def test_fork_bomb_is_contained(env):
    start = time.monotonic()
    r = await env.call("shell", {"command": "bomb(){ bomb | bomb & }; bomb; sleep 1; echo done", "timeout_s": 5})
    assert not r.is_error
    assert time.monotonic() - start < 20
    r = await env.call("python", {"code": "import os\nwhile True:\n    os.fork()", "timeout_s": 5})
    assert "Resource temporarily unavailable" in r.content or "killed" in r.content
    await still_answers(env)


async def test_infinite_loop_hits_the_wall_clock(env):
    start = time.monotonic()
    r = await env.call("python", {"code": "while True:\n    pass", "timeout_s": 2})
    assert "killed" in r.content and time.monotonic() - start < 10
    r = await env.call("shell", {"command": "while true; do :; done", "timeout_s": 1})
    assert "wall-clock" in r.content
    await still_answers(env)


@needs_bwrap
async def test_no_network(env):
    code = ("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n    print('CONNECTED')\n"
            "except OSError as e:\n    print('refused', e)\n")
    r = await env.call("python", {"code": code})
    assert "CONNECTED" not in r.content and "refused" in r.content
    await still_answers(env)


async def test_memory_and_output_limits(env):
    r = await env.call("python", {"code": "x = bytearray(4 * 1024 ** 3)\nprint('allocated')"})
    assert "MemoryError" in r.content and "allocated" not in r.content
    r = await env.call("python", {"code": "for i in range(10 ** 6):\n    print('line', i)"})
    assert "[output truncated]" in r.content and len(r.content) < 25_000
    await still_answers(env)


def test_sandbox_runs_against_its_workspace_only():
    ws = Path(tempfile.mkdtemp(prefix="coevo-test-sbx-"))  # not tmp_path: its parents are private to us
    try:
        (ws / "in.txt").write_text("hello")
        result = Sandbox(ws, SandboxLimits(wall_s=5)).shell("cat in.txt && pwd")
        assert result.exit_code == 0 and result.output.startswith("hello")
        if sandbox_backend() == "bwrap":
            assert "/workspace" in result.output
    finally:
        shutil.rmtree(ws, ignore_errors=True)
