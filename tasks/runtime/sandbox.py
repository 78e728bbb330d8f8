"""Run untrusted commands (the model's `shell`/`python` tool calls, the hidden checkers) as a child process.

Backend `bwrap` (bubblewrap, the default where it starts): a fresh user, pid, net, ipc and uts namespace;
the filesystem is read-only `/usr` (plus the /bin, /lib, /lib64 links), a private `/proc` and `/dev`, a
small tmpfs `/tmp` and the instance workspace read-write at `/workspace` (the working directory). `/etc`,
`/home`, `/root`, the repository and every other workspace are simply absent, and the only network
interface is a down loopback. Backend `rlimit` (fallback where bwrap cannot start, e.g. user namespaces
disabled): the same resource limits and the working directory, but no filesystem view of its own, so reads
outside the workspace are only stopped by file permissions. `sandbox_backend()` says which one is in force;
`COEVO_SANDBOX=bwrap|rlimit` forces one.

Both backends apply, through util-linux `prlimit`: CPU seconds, address space, file size, process count (a
fork bomb stops at `max_procs`), no core files. A wall-clock deadline kills the whole process tree, and
output beyond `max_output_chars` is discarded while it is read (never buffered whole). When we run as root
the child runs as an unprivileged uid derived from the workspace path, because the kernel does not apply
RLIMIT_NPROC to root and because root could otherwise read any file outside the bubblewrap view.

Whole-call caps (rlimits are per process): each call runs in a cgroup of its own (`tasks.runtime.cgroups`)
capping the memory and the task count of its whole process tree; the command waits on a gate until it is
inside, and everything left in the cgroup is killed and the cgroup removed when the call ends. The
workspace's disk cap holds whatever writes (`tasks.runtime.disk`): a size-limited tmpfs where the workspace
was made with `make_workspace`, else the workspace is measured during and after the call, and a call that
passes the cap is killed and its changes undone. A result names the limit that ended the call
(`[killed: memory limit 512 MiB]`) and the limits it ran into (`[process limit 48 reached: ...]`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.runtime.cgroups import CallCgroup, CgroupStats
from tasks.runtime.disk import DiskGuard, is_capped_mount, mount_full

Backend = Literal["bwrap", "rlimit"]
SANDBOX_ROOT = "/workspace"  # where the workspace appears inside the bwrap view
MAX_ARG_CHARS = 100_000  # the kernel refuses single argv strings over 128 KiB
_BWRAP = "/usr/bin/bwrap"
_SANDBOX_UID_BASE = 200_000  # unprivileged uids used when we are root; far above any login user
_SANDBOX_UID_SPAN = 50_000
_GATE = ["/bin/sh", "-c", 'read -r _ || exit 125; exec "$@"', "coevo-gate"]
# With a cgroup, pids.max is the call's cap and RLIMIT_NPROC only a backstop for the sandbox uid: it must leave
# room for bwrap's own processes and for the zombies earlier calls leave behind (bwrap's outer process exits
# without reaping its pid-1 child, so init reaps it, on some machines a second later; zombies still count).
_NPROC_SLACK = 256
WATCH_EVERY_S = 0.25  # how often a running call's workspace is measured (where no capped mount holds it)

log = logging.getLogger(__name__)


class SandboxLimits(BaseModel):
    """Resource limits for one command. Units are in the field names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_s: float = Field(default=10.0, gt=0, description="Wall-clock limit; the process tree is killed after it.")
    cpu_s: int = Field(default=10, gt=0, description=(
        "RLIMIT_CPU per process: SIGXCPU at this many seconds (reported as the CPU time limit), SIGKILL a second later."))
    memory_bytes: int = Field(default=1 << 30, gt=0, description="RLIMIT_AS per process (address space).")
    call_memory_bytes: int = Field(default=512 << 20, gt=0, description=(
        "Memory of the call's whole process tree (its cgroup): resident pages, page cache and tmpfs files "
        "together; the kernel's OOM killer ends processes of the call beyond it."))
    file_bytes: int = Field(default=32 << 20, gt=0, description="RLIMIT_FSIZE: largest file a command may write.")
    max_procs: int = Field(default=48, gt=1, description=(
        "Processes and threads of the whole call (cgroup pids.max), and RLIMIT_NPROC of the sandbox user."))
    max_output_chars: int = Field(default=16_000, gt=0, description="Kept output (stdout+stderr, merged).")
    tmp_bytes: int = Field(default=64 << 20, gt=0, description="Size of the tmpfs mounted at /tmp (bwrap).")
    workspace_bytes: int = Field(default=64 << 20, gt=0, description=(
        "Bytes the workspace may hold after a call (a size-limited mount, else measured and undone)."))
    workspace_files: int = Field(default=20_000, gt=0, description="Entries (files, folders, links) the workspace may hold.")


LIMIT_LABELS = {
    "wall_clock": "wall-clock limit", "cpu_time": "CPU time limit", "memory": "memory limit",
    "file_size": "file size limit", "processes": "process limit", "workspace_disk": "workspace disk limit",
    "workspace_files": "workspace file limit",
}
_HIT_CONSEQUENCE = {
    "processes": "new processes were refused (fork: Resource temporarily unavailable)",
    "workspace_disk": "writes beyond it failed (No space left on device)",
    "workspace_files": "new files beyond it failed (No space left on device)",
    "memory": "the kernel ended processes of this call",
}


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def limit_values(limits: SandboxLimits, wall_s: float) -> dict[str, str]:
    """Each limit as the model reads it ("512 MiB", "10 s", "48")."""
    return {
        "wall_clock": f"{wall_s:g} s", "cpu_time": f"{limits.cpu_s} s", "memory": _mib(limits.call_memory_bytes),
        "file_size": _mib(limits.file_bytes), "processes": str(limits.max_procs),
        "workspace_disk": _mib(limits.workspace_bytes), "workspace_files": str(limits.workspace_files),
    }


class SandboxResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    exit_code: int | None = Field(description="None when the command was killed at the wall-clock limit.")
    output: str
    timed_out: bool = False
    truncated: bool = False
    killed_by: str | None = Field(default=None, description="The limit that ended the call (a LIMIT_LABELS key).")
    limits_hit: tuple[str, ...] = Field(default=(), description="Limits the call ran into without being ended by them.")
    limit_values: dict[str, str] = Field(default_factory=dict, description="The limits in force, as text.")
    peak_memory_bytes: int | None = Field(default=None, description="Peak memory of the call's cgroup, when it had one.")
    writes_undone: bool = Field(default=False, description="The workspace was put back as it was before the call.")

    def _limit(self, name: str) -> str:
        value = self.limit_values.get(name)
        return f"{LIMIT_LABELS.get(name, name)} {value}" if value else LIMIT_LABELS.get(name, name)

    def render(self) -> str:
        """The text a model sees: the exit status (or the limit that ended the call) first, then the output."""
        if self.killed_by is not None:
            head = f"[killed: {self._limit(self.killed_by)}"
            head += f"; exit code {self.exit_code}]" if self.exit_code is not None and self.killed_by == "memory" else "]"
        elif self.timed_out:
            head = "[killed: wall-clock limit reached]"
        elif self.exit_code is not None and self.exit_code < 0:
            head = f"[killed by signal {signal.Signals(-self.exit_code).name}: a resource limit was hit]"
        else:
            head = f"[exit code {self.exit_code}]"
        for name in self.limits_hit:
            head += f"\n[{self._limit(name)} reached: {_HIT_CONSEQUENCE.get(name, 'the call ran into it')}]"
        if self.writes_undone:
            head += "\n[the call's changes to the workspace were undone]"
        tail = "\n[output truncated]" if self.truncated else ""
        return f"{head}\n{self.output}{tail}" if self.output else head + tail


def _bwrap_args(workspace: Path | None, ro_binds: Mapping[str, Path], limits: SandboxLimits) -> list[str]:
    args = [
        _BWRAP, "--unshare-all", "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr",
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
    ]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
        if target and not os.path.isabs(target):  # merged-/usr layout: /bin -> usr/bin
            args += ["--symlink", target, f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            args += ["--ro-bind", f"/{link}", f"/{link}"]
    prefix = Path(sys.base_prefix)
    if not Path("/usr/bin/python3").exists() and not str(prefix).startswith("/usr/"):
        args += ["--ro-bind", str(prefix), str(prefix)]  # the interpreter `python_executable` names
    for inside, outside in ro_binds.items():
        args += ["--ro-bind", str(outside), inside]
    if workspace is not None:
        args += ["--bind", str(workspace), SANDBOX_ROOT, "--chdir", SANDBOX_ROOT]
    args += ["--clearenv", *_env_args()]
    return args


def _env(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # deterministic set/dict ordering of str keys: replay gives the same output
        "PYTHONDONTWRITEBYTECODE": "1",
        "TZ": "UTC",
    }


def _env_args() -> list[str]:
    out: list[str] = []
    for k, v in _env(SANDBOX_ROOT).items():
        out += ["--setenv", k, v]
    return out


def python_executable() -> str:
    """The interpreter commands use inside the sandbox: the system's, else the one running us."""
    if Path("/usr/bin/python3").exists():
        return "/usr/bin/python3"
    return str(Path(sys.base_prefix) / "bin" / "python3")


def _sandbox_uid(workspace: Path) -> int | None:
    if os.geteuid() != 0:
        return None
    digest = hashlib.sha256(str(workspace).encode()).digest()
    return _SANDBOX_UID_BASE + int.from_bytes(digest[:4], "big") % _SANDBOX_UID_SPAN


def _count_user_processes(uid: int) -> int:
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                continue
    return n


def _prlimit_args(limits: SandboxLimits, uid: int | None, *, in_cgroup: bool = False) -> list[str]:
    # RLIMIT_NPROC counts every process of the real uid: a dedicated uid starts near 0, our own uid does not.
    # In a cgroup, pids.max is the call's cap (and says when it refused a fork); the rlimit is a backstop.
    own = limits.max_procs + (_NPROC_SLACK if in_cgroup else 0)
    nproc = own if uid is not None else _count_user_processes(os.getuid()) + own
    return [
        shutil.which("prlimit") or "/usr/bin/prlimit",
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_bytes}", f"--fsize={limits.file_bytes}",
        f"--nproc={nproc}", "--core=0", "--",
    ]


def _user_kwargs(uid: int | None) -> dict[str, object]:
    return {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}


def _probe_uid() -> int | None:
    return _SANDBOX_UID_BASE if os.geteuid() == 0 else None


_UNSHARE_NET = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--"]


@functools.cache
def _unshare_net_works() -> bool:
    """The fallback still drops the network where an unprivileged user namespace is allowed."""
    try:
        run = subprocess.run([*_UNSHARE_NET, "true"], capture_output=True, timeout=10, **_user_kwargs(_probe_uid()))
        return run.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def sandbox_backend() -> Backend:
    """Which isolation is in force on this machine (probed once per process; the probe is side-effect free)."""
    forced = os.environ.get("COEVO_SANDBOX", "").strip()
    if forced in ("bwrap", "rlimit"):
        return forced  # type: ignore[return-value]
    if not os.path.exists(_BWRAP) or not shutil.which("prlimit"):
        return "rlimit"
    try:
        args = [*_bwrap_args(None, {}, SandboxLimits()), "--", "/bin/true"]
        ok = subprocess.run(args, capture_output=True, timeout=20, **_user_kwargs(_probe_uid())).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return "bwrap" if ok else "rlimit"


class Sandbox:
    """Runs commands against one workspace directory. Cheap to construct; holds no process between calls."""

    def __init__(
        self,
        workspace: Path,
        limits: SandboxLimits | None = None,
        ro_binds: Mapping[str, Path] | None = None,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        self.limits = limits or SandboxLimits()
        self.ro_binds = dict(ro_binds or {})
        self.backend: Backend = sandbox_backend()
        self._uid = _sandbox_uid(self.workspace)

    @property
    def root(self) -> str:
        """The workspace path as commands see it."""
        return SANDBOX_ROOT if self.backend == "bwrap" else str(self.workspace)

    def shell(self, command: str, *, wall_s: float | None = None) -> SandboxResult:
        if len(command) > MAX_ARG_CHARS:
            return SandboxResult(exit_code=2, output=f"command is {len(command)} characters; the limit is "
                                 f"{MAX_ARG_CHARS} (write a script file and run it instead)")
        return self.run(["/bin/sh", "-c", command], wall_s=wall_s)

    def python(self, code: str, *, wall_s: float | None = None) -> SandboxResult:
        """Run Python source (read from stdin, so any length fits) with the isolated, stdlib-only interpreter."""
        return self.run([python_executable(), "-I", "-S", "-"], stdin=code, wall_s=wall_s)

    def run(self, argv: Sequence[str], *, stdin: str = "", wall_s: float | None = None) -> SandboxResult:
        limits = self.limits
        wall = wall_s or limits.wall_s
        if self._uid is not None:
            _chown_tree(self.workspace, self._uid)  # files the in-process tools wrote belong to root
        guard = self._disk_guard()
        cgroup = CallCgroup.open(limits.call_memory_bytes, limits.max_procs)
        try:
            pumped = self._start_and_pump(self._command(argv, gated=cgroup is not None), stdin.encode(), wall,
                                          cgroup, guard.over if guard else None)
        finally:
            stats = cgroup.close() if cgroup is not None else CgroupStats()
        if pumped is None:  # the cgroup could not take the command: run it again with rlimits only
            pumped = self._start_and_pump(self._command(argv, gated=False), stdin.encode(), wall, None,
                                          guard.over if guard else None)
        disk = guard.finish(pumped.stopped_by) if guard else None
        return self._result(pumped, stats, disk, wall)

    def _command(self, argv: Sequence[str], *, gated: bool) -> list[str]:
        if self.backend == "bwrap":
            cmd = [*_prlimit_args(self.limits, self._uid, in_cgroup=gated),
                   *_bwrap_args(self.workspace, self.ro_binds, self.limits), "--", *argv]
        else:
            net = _UNSHARE_NET if _unshare_net_works() else []
            cmd = [*_prlimit_args(self.limits, self._uid, in_cgroup=gated), *net, *argv]
        # The gate waits for one line on stdin, sent once the process is in its cgroup, so nothing runs uncapped.
        return [*_GATE, *cmd] if gated else cmd

    def _disk_guard(self) -> DiskGuard | None:
        limits = self.limits
        if is_capped_mount(self.workspace, limits.workspace_bytes):
            return None  # the kernel enforces the cap
        try:
            return DiskGuard(self.workspace, limits.workspace_bytes, limits.workspace_files)
        except OSError as e:
            log.warning("sandbox: cannot copy %s aside (%s); this call's writes cannot be undone", self.workspace, e)
            return None

    def _start_and_pump(self, cmd: list[str], stdin: bytes, wall_s: float, cgroup: CallCgroup | None,
                        watch: Callable[[], str | None] | None) -> _Pumped | None:
        """Start `cmd`, place it in `cgroup`, feed and read it. None when the cgroup refused the process."""
        env = {} if self.backend == "bwrap" else _env(str(self.workspace))
        try:
            proc = subprocess.Popen(
                cmd, cwd=self.workspace, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, **_user_kwargs(self._uid),
            )
        except OSError as e:
            return _Pumped(exit_code=127, output=f"could not start the command: {e}")
        if cgroup is not None:
            try:
                cgroup.add(proc.pid)
            except OSError as e:
                log.warning("sandbox: could not move the command into its cgroup (%s); it runs with rlimits only", e)
                _kill(proc)
                for f in (proc.stdin, proc.stdout):
                    if f is not None:
                        f.close()
                return None
            stdin = b"\n" + stdin  # opens the gate
        return _pump(proc, stdin, wall_s, self.limits.max_output_chars, watch)

    def _result(self, p: _Pumped, stats: CgroupStats, disk: str | None, wall_s: float) -> SandboxResult:
        signalled = _signal_of(p.exit_code)
        reasons = [
            (disk is not None, disk), (stats.oom_kills > 0, "memory"), (p.timed_out, "wall_clock"),
            (signalled == signal.SIGXCPU, "cpu_time"), (signalled == signal.SIGXFSZ, "file_size"),
        ]
        found = [name for cond, name in reasons if cond]
        killed_by = found[0] if found else None
        hit = [name for name in found[1:] if name != "wall_clock"]
        if stats.procs_refused > 0:
            hit.append("processes")
        if disk is None and self._full_mount():
            hit.append("workspace_disk")
        return SandboxResult(
            exit_code=p.exit_code, output=p.output, timed_out=p.timed_out, truncated=p.truncated,
            killed_by=killed_by, limits_hit=tuple(dict.fromkeys(hit)), limit_values=limit_values(self.limits, wall_s),
            peak_memory_bytes=stats.peak_memory_bytes, writes_undone=disk is not None,
        )

    def _full_mount(self) -> bool:
        try:
            return is_capped_mount(self.workspace, self.limits.workspace_bytes) and mount_full(self.workspace)
        except OSError:
            return False


def _signal_of(exit_code: int | None) -> int | None:
    """The signal that ended the command: negative codes from Popen, 128+N from the shell or bwrap."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    return exit_code - 128 if 128 < exit_code < 128 + 65 else None


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                os.lchown(os.path.join(dirpath, name), uid, uid)
            except OSError:
                continue


@dataclass
class _Pumped:
    """What `_pump` saw: the raw end of the command, before the limits are read."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    stopped_by: str | None = None  # a `watch` reason that made us kill the command


class _Reader:
    """Merged output kept up to a byte cap; the rest is counted and discarded."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap = cap_bytes
        self.kept = bytearray()
        self.dropped = 0

    def take(self, chunk: bytes) -> None:
        room = max(self.cap - len(self.kept), 0)
        self.kept += chunk[:room]
        self.dropped += max(len(chunk) - room, 0)


def _pump(proc: subprocess.Popen[bytes], stdin: bytes, wall_s: float, cap_chars: int,
          watch: Callable[[], str | None] | None = None) -> _Pumped:
    """Feed stdin, read merged output up to a byte cap (discarding the rest), kill at the deadline or when
    `watch()` (polled every WATCH_EVERY_S) names a reason."""
    assert proc.stdin is not None and proc.stdout is not None
    deadline = time.monotonic() + wall_s
    reader = _Reader(cap_chars * 4)  # bytes; decoded and cut to characters below
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdout.fileno(), False)
    sel.register(proc.stdout, selectors.EVENT_READ)
    if stdin:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    timed_out, stopped_by = False, None
    try:
        timed_out, stopped_by = _loop(proc, sel, stdin, reader, deadline, watch)
        if not timed_out and stopped_by is None:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.05))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        sel.close()
        if timed_out or stopped_by or proc.poll() is None:
            _kill(proc)
        for f in (proc.stdin, proc.stdout):
            if f and not f.closed:
                f.close()
    text = reader.kept.decode("utf-8", errors="replace")
    return _Pumped(exit_code=None if timed_out else proc.returncode, output=text[:cap_chars], timed_out=timed_out,
                   truncated=reader.dropped > 0 or len(text) > cap_chars, stopped_by=stopped_by)


def _loop(proc: subprocess.Popen[bytes], sel: selectors.BaseSelector, stdin: bytes, reader: _Reader,
          deadline: float, watch: Callable[[], str | None] | None) -> tuple[bool, str | None]:
    """The select loop of `_pump`: (timed out, watch reason) once output ends, the deadline or a watch stops it."""
    assert proc.stdin is not None and proc.stdout is not None
    pos, next_watch = 0, time.monotonic() + WATCH_EVERY_S
    while sel.get_map():
        now = time.monotonic()
        if now >= deadline:
            return True, None
        if watch is not None and now >= next_watch:
            next_watch = now + WATCH_EVERY_S
            reason = watch()
            if reason is not None:
                return False, reason
        for key, _ in sel.select(timeout=min(deadline - now, WATCH_EVERY_S)):
            if key.fileobj is proc.stdin:
                try:
                    pos += os.write(proc.stdin.fileno(), stdin[pos:pos + 65536])
                except (BrokenPipeError, OSError):
                    pos = len(stdin)
                if pos >= len(stdin):
                    sel.unregister(proc.stdin)
                    proc.stdin.close()
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                sel.unregister(proc.stdout)
                continue
            reader.take(chunk)
    return False, None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    # The child leads its own session; bwrap's --die-with-parent then takes down the whole pid namespace.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


__all__ = ["LIMIT_LABELS", "SANDBOX_ROOT", "Sandbox", "SandboxLimits", "SandboxResult", "limit_values", "python_executable",
           "sandbox_backend"]
