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
"""

from __future__ import annotations

import functools
import hashlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Backend = Literal["bwrap", "rlimit"]
SANDBOX_ROOT = "/workspace"  # where the workspace appears inside the bwrap view
MAX_ARG_CHARS = 100_000  # the kernel refuses single argv strings over 128 KiB
_BWRAP = "/usr/bin/bwrap"
_SANDBOX_UID_BASE = 200_000  # unprivileged uids used when we are root; far above any login user
_SANDBOX_UID_SPAN = 50_000


class SandboxLimits(BaseModel):
    """Resource limits for one command. Units are in the field names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_s: float = Field(default=10.0, gt=0, description="Wall-clock limit; the process tree is killed after it.")
    cpu_s: int = Field(default=10, gt=0, description="RLIMIT_CPU per process.")
    memory_bytes: int = Field(default=1 << 30, gt=0, description="RLIMIT_AS per process.")
    file_bytes: int = Field(default=32 << 20, gt=0, description="RLIMIT_FSIZE: largest file a command may write.")
    max_procs: int = Field(default=48, gt=1, description="RLIMIT_NPROC: processes the sandbox user may hold.")
    max_output_chars: int = Field(default=16_000, gt=0, description="Kept output (stdout+stderr, merged).")
    tmp_bytes: int = Field(default=64 << 20, gt=0, description="Size of the tmpfs mounted at /tmp (bwrap).")


class SandboxResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    exit_code: int | None = Field(description="None when the command was killed at the wall-clock limit.")
    output: str
    timed_out: bool = False
    truncated: bool = False

    def render(self) -> str:
        """The text a model sees: the exit status first, then the output."""
        if self.timed_out:
            head = "[killed: wall-clock limit reached]"
        elif self.exit_code is not None and self.exit_code < 0:
            head = f"[killed by signal {signal.Signals(-self.exit_code).name}: a resource limit was hit]"
        else:
            head = f"[exit code {self.exit_code}]"
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


def _prlimit_args(limits: SandboxLimits, uid: int | None) -> list[str]:
    # RLIMIT_NPROC counts every process of the real uid: a dedicated uid starts near 0, our own uid does not.
    nproc = limits.max_procs if uid is not None else _count_user_processes(os.getuid()) + limits.max_procs
    return [
        shutil.which("prlimit") or "/usr/bin/prlimit",
        f"--cpu={limits.cpu_s}", f"--as={limits.memory_bytes}", f"--fsize={limits.file_bytes}",
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
        if self._uid is not None:
            _chown_tree(self.workspace, self._uid)  # files the in-process tools wrote belong to root
        if self.backend == "bwrap":
            cmd = [*_prlimit_args(limits, self._uid), *_bwrap_args(self.workspace, self.ro_binds, limits), "--", *argv]
            env: dict[str, str] | None = {}
        else:
            net = _UNSHARE_NET if _unshare_net_works() else []
            cmd = [*_prlimit_args(limits, self._uid), *net, *argv]
            env = _env(str(self.workspace))
        user = _user_kwargs(self._uid)
        try:
            proc = subprocess.Popen(
                cmd, cwd=self.workspace, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, **user,
            )
        except OSError as e:
            return SandboxResult(exit_code=127, output=f"could not start the command: {e}")
        return _pump(proc, stdin.encode(), wall_s or limits.wall_s, limits.max_output_chars)


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                os.lchown(os.path.join(dirpath, name), uid, uid)
            except OSError:
                continue


def _pump(proc: subprocess.Popen[bytes], stdin: bytes, wall_s: float, cap_chars: int) -> SandboxResult:
    """Feed stdin, read merged output up to a byte cap (discarding the rest), kill at the deadline."""
    assert proc.stdin is not None and proc.stdout is not None
    deadline = time.monotonic() + wall_s
    cap = cap_chars * 4  # bytes; decoded and cut to characters below
    kept = bytearray()
    dropped = 0
    sel = selectors.DefaultSelector()
    os.set_blocking(proc.stdout.fileno(), False)
    sel.register(proc.stdout, selectors.EVENT_READ)
    if stdin:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    pos = 0
    timed_out = False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
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
                room = cap - len(kept)
                kept += chunk[:max(room, 0)]
                dropped += max(len(chunk) - max(room, 0), 0)
        if not timed_out:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.05))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        sel.close()
        if timed_out or proc.poll() is None:
            _kill(proc)
        for f in (proc.stdin, proc.stdout):
            if f and not f.closed:
                f.close()
    text = kept.decode("utf-8", errors="replace")
    truncated = dropped > 0 or len(text) > cap_chars
    return SandboxResult(
        exit_code=None if timed_out else proc.returncode,
        output=text[:cap_chars],
        timed_out=timed_out,
        truncated=truncated,
    )


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


__all__ = ["SANDBOX_ROOT", "Sandbox", "SandboxLimits", "SandboxResult", "python_executable", "sandbox_backend"]
