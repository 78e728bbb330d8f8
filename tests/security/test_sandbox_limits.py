"""Whole-call limits: memory and processes of a call's whole process tree (a cgroup per call, removed after
it), the workspace's disk cap whatever writes (a capped tmpfs, else measure and undo), and results that name
the limit that ended the call. Real bwrap, real cgroups, real processes; nothing mocked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import tasks
from tasks.runtime.cgroups import PREFIX, cgroup_support
from tasks.runtime.disk import is_capped_mount, make_workspace, remove_workspace
from tasks.runtime.sandbox import Sandbox, SandboxLimits
from tasks.runtime.workspace import WorkspaceEnvironment

REPO = Path(__file__).resolve().parents[2]
SUPPORT = cgroup_support()
needs_cgroup = pytest.mark.skipif(SUPPORT.version is None, reason=f"no writable cgroup here: {SUPPORT.note}")
MiB = 1 << 20


@pytest.fixture
def plain_dir() -> Iterator[Path]:
    """A workspace that is NOT a capped mount: the sandbox measures it and undoes over-cap calls."""
    ws = Path(tempfile.mkdtemp(prefix="coevo-test-limits-"))  # not tmp_path: its parents are private to us
    yield ws
    shutil.rmtree(ws, ignore_errors=True)


@pytest.fixture
def env() -> Iterator[WorkspaceEnvironment]:
    fam = tasks.get("code_refactor")
    e = fam.make_env(fam.generate(0))
    e.reset()
    yield e
    e.close()


def _our_cgroups() -> set[Path]:
    parents = {p for p in (SUPPORT.memory_parent, SUPPORT.pids_parent) if p is not None}
    return {d for p in parents for d in p.glob(f"{PREFIX}{os.getpid()}-*")}


# 8 children each touch 64 MiB (512 MiB together) while the call may hold 256 MiB; each child is well under
# the per-process address-space limit, so only the whole-call cap can stop them.
EIGHT_CHILDREN = """
import os, time
pids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        block = bytearray(64 << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
print("statuses", sorted(os.waitpid(p, 0)[1] for p in pids))
"""


@needs_cgroup
def test_eight_processes_cannot_pass_the_call_memory_cap(plain_dir: Path) -> None:
    cap = 256 * MiB
    result = Sandbox(plain_dir, SandboxLimits(call_memory_bytes=cap, wall_s=20)).python(EIGHT_CHILDREN)
    assert result.killed_by == "memory", result
    assert "[killed: memory limit 256 MiB" in result.render()
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes <= cap  # the cgroup's own peak
    assert "statuses" in result.output and "9" in result.output  # the parent saw children end by SIGKILL


@needs_cgroup
def test_a_fork_flood_stops_at_the_call_process_cap(plain_dir: Path) -> None:
    code = ("import os, time\nn = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n"
            "            time.sleep(2)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n"
            "    print('refused after', n, e)\n")
    result = Sandbox(plain_dir, SandboxLimits(max_procs=20, wall_s=15)).python(code)
    assert "processes" in result.limits_hit, result
    assert "[process limit 20 reached" in result.render()
    refused_after = int(result.output.split("refused after")[1].split()[0])
    assert refused_after < 20  # bwrap's own processes count too, so the program got fewer than 20


def test_cpu_and_file_size_limits_are_named(plain_dir: Path) -> None:
    sandbox = Sandbox(plain_dir, SandboxLimits(cpu_s=1, wall_s=20, file_bytes=4 * MiB))
    cpu = sandbox.python("while True:\n    pass")
    assert cpu.killed_by == "cpu_time" and cpu.render().startswith("[killed: CPU time limit 1 s]"), cpu
    big = sandbox.shell("head -c 8000000 /dev/zero > big.bin")
    assert big.killed_by == "file_size" and big.render().startswith("[killed: file size limit 4 MiB]"), big
    slow = sandbox.shell("sleep 5", wall_s=1)
    assert slow.killed_by == "wall_clock" and slow.render().startswith("[killed: wall-clock limit 1 s]"), slow


@needs_cgroup
def test_every_call_cgroup_is_removed(plain_dir: Path) -> None:
    before = _our_cgroups()
    sandbox = Sandbox(plain_dir, SandboxLimits(call_memory_bytes=128 * MiB, max_procs=16, wall_s=3))
    sandbox.shell("echo ok")
    sandbox.python("x = bytearray(300 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1")  # OOM kill
    sandbox.shell("while :; do :; done")  # wall clock
    sandbox.shell("bomb(){ bomb | bomb & }; bomb; sleep 2")  # fork flood
    sandbox.shell("(sleep 300 &); nohup sleep 301 > /dev/null 2>&1 & echo left")  # background processes
    assert _our_cgroups() == before


def test_background_processes_die_with_the_call(plain_dir: Path) -> None:
    marker = "31337"
    result = Sandbox(plain_dir, SandboxLimits(wall_s=5)).shell(
        f"(sleep {marker} &); setsid sleep {marker} & nohup sleep {marker} > /dev/null 2>&1 & echo started")
    assert "started" in result.output
    left = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if cmd[:1] == ["sleep"] and marker in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            left.append(p.pid)
    assert left == []


def test_shell_write_loop_stays_under_the_workspace_cap(env: WorkspaceEnvironment) -> None:
    cap = env.sandbox_limits.workspace_bytes
    loop = "i=0; while [ $i -lt 200 ]; do head -c 1048576 /dev/zero > f$i || break; i=$((i+1)); done; echo loop-done"
    rendered = env.sandbox.shell(loop, wall_s=30).render()
    assert env.workspace_bytes() <= cap
    if env.disk_capped:  # the kernel refused the writes beyond the cap; the files up to it stay
        assert is_capped_mount(env.workspace, cap)
        assert "[workspace disk limit 64 MiB reached: writes beyond it failed" in rendered, rendered
        assert "loop-done" in rendered
    else:  # measured: the call was killed and its writes undone
        assert rendered.startswith("[killed: workspace disk limit 64 MiB]") and "undone" in rendered


async def test_file_tools_refuse_to_pass_the_cap(env: WorkspaceEnvironment) -> None:
    cap = env.sandbox_limits.workspace_bytes
    fill = await env.call("shell", {"command": "head -c 30000000 /dev/zero > a.bin; head -c 30000000 /dev/zero > b.bin; "
                                               "head -c 4000000 /dev/zero > c.bin; echo filled"})
    assert "filled" in fill.content, fill.content
    outcomes = [await env.call("write_file", {"path": f"w{i}.txt", "content": "x" * 190_000}) for i in range(40)]
    refused = [r for r in outcomes if r.is_error]
    assert refused and "disk limit" in refused[0].content, refused[:1]
    assert env.workspace_bytes() <= cap
    ok = await env.call("shell", {"command": "echo still-here"})
    assert "still-here" in ok.content


def test_measured_workspace_is_restored_after_an_over_cap_call(plain_dir: Path) -> None:
    (plain_dir / "keep.txt").write_text("original")
    (plain_dir / "sub").mkdir()
    sandbox = Sandbox(plain_dir, SandboxLimits(workspace_bytes=8 * MiB, file_bytes=4 * MiB, wall_s=20))
    result = sandbox.shell("echo changed > keep.txt; rm -r sub; "
                           "i=0; while [ $i -lt 40 ]; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done")
    assert result.killed_by == "workspace_disk" and result.writes_undone, result
    assert "[killed: workspace disk limit 8 MiB]" in result.render()
    assert sorted(p.name for p in plain_dir.iterdir()) == ["keep.txt", "sub"]
    assert (plain_dir / "keep.txt").read_text() == "original"
    small = sandbox.shell("echo kept > new.txt")  # a call under the cap keeps its writes
    assert small.exit_code == 0 and not small.writes_undone and (plain_dir / "new.txt").read_text() == "kept\n"


def test_measured_workspace_file_count_cap(plain_dir: Path) -> None:
    sandbox = Sandbox(plain_dir, SandboxLimits(workspace_files=50, wall_s=20))
    result = sandbox.shell("i=0; while [ $i -lt 200 ]; do : > e$i; i=$((i+1)); done")
    assert result.killed_by == "workspace_files" and result.writes_undone, result
    assert list(plain_dir.iterdir()) == []


def test_capped_tmpfs_workspace_refuses_writes_past_its_size() -> None:
    root, capped = make_workspace("coevo-test-cap-", 4 * MiB, 100)
    try:
        if not capped:
            pytest.skip("this machine does not let us mount a tmpfs (the measured mode is tested above)")
        assert is_capped_mount(root, 4 * MiB)
        with pytest.raises(OSError):
            (root / "big").write_bytes(b"x" * (5 * MiB))
    finally:
        remove_workspace(root)
    assert not root.exists() and not os.path.ismount(root)


def test_without_cgroups_one_log_line_says_so_and_calls_still_run(plain_dir: Path) -> None:
    code = ("import logging, sys; from pathlib import Path; logging.basicConfig(level=logging.WARNING)\n"
            "from tasks.runtime.sandbox import Sandbox\n"
            f"r = Sandbox(Path({str(plain_dir)!r})).shell('echo hi')\nr2 = Sandbox(Path({str(plain_dir)!r})).shell('echo hi')\n"
            "print(r.exit_code, r.output.strip(), r2.output.strip())\n")
    env = {**os.environ, "COEVO_CGROUP": "off", "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert run.stdout.strip() == "0 hi hi", run.stderr
    lines = [ln for ln in run.stderr.splitlines() if "whole-call memory and process caps are OFF" in ln]
    assert len(lines) == 1 and "COEVO_CGROUP=off" in lines[0]
