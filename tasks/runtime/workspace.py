"""Workspace families: an `Environment` whose state is a private directory, with the shared file and
command tools declared once (`shell`, `python`, `read_file`, `write_file`, `edit_file`, `list_files`).

File tools run in our process, so they check every path themselves: relative to the workspace (or under
`/workspace/`, the path commands see), no `..` component, and the resolved path (symlinks followed) must stay
inside the workspace. Writes go to a temporary file first and are renamed into place, so a refused or failed
call leaves nothing half-written. Commands run in `tasks.runtime.sandbox.Sandbox`. The workspace is a
capped tmpfs where we may mount (`tasks.runtime.disk.make_workspace`), so its disk cap holds for every tool. `workspace_copy()` is
the frozen copy of the directory that verifiers which run code read (`tasks.runtime.workspace_copy`).
"""

from __future__ import annotations

import errno
import os
import tempfile
from abc import abstractmethod
from pathlib import Path, PurePosixPath
from typing import ClassVar

from tasks.base import Environment
from tasks.runtime.disk import make_workspace, remove_workspace
from tasks.runtime.sandbox import SANDBOX_ROOT, Sandbox, SandboxLimits
from tasks.runtime.volatile import normalize_command_output
from tasks.runtime.workspace_copy import WorkspaceCopy, copy_workspace
from tasks.tooling import ToolError, off_loop, tool

MAX_FILE_BYTES = 2 << 20  # largest file read_file returns / write_file creates
MAX_LISTED = 500
MAX_COMMAND_S = 30
FIXED_MTIME = 1_704_067_200  # 2024-01-01 UTC: files we write get it, so `ls -l` replays identically


class WorkspaceEnvironment(Environment):
    """Subclasses write their starting files in `_populate(root)`; `verify()` judges a snapshot of the directory."""

    sandbox_limits: ClassVar[SandboxLimits] = SandboxLimits()
    normalize_output = staticmethod(normalize_command_output)  # temp paths, durations, clocks in command output

    _root: Path | None = None

    @abstractmethod
    def _populate(self, root: Path) -> None:
        """Write the instance's starting files under `root` (deterministically, from `self.instance`)."""

    # --- lifecycle ------------------------------------------------------------------------------
    def _setup(self) -> None:
        # mkdtemp under the system temp dir: world-traversable parents, so the sandbox uid can reach it. A
        # tmpfs of the workspace's size is mounted on it where we may mount: the disk cap then holds for
        # every tool; elsewhere the sandbox measures each call (tasks.runtime.disk).
        limits = self.sandbox_limits
        self._root, self.disk_capped = make_workspace(f"coevo-{self.instance.family}-", limits.workspace_bytes,
                                                      limits.workspace_files)
        self._populate(self._root)
        for dirpath, dirnames, files in os.walk(self._root):
            for name in dirnames + files:
                os.utime(os.path.join(dirpath, name), (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
        os.utime(self._root, (FIXED_MTIME, FIXED_MTIME))
        self._sandbox = Sandbox(self._root, self.sandbox_limits)

    def _teardown(self) -> None:
        if self._root is not None:
            remove_workspace(self._root)
            self._root = None

    @property
    def workspace(self) -> Path:
        if self._root is None:
            raise ToolError("the environment is not set up; call reset() first")
        return self._root

    @property
    def sandbox(self) -> Sandbox:
        self.workspace  # raises when not set up
        return self._sandbox

    # --- path safety ----------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """Map a model-supplied path to a real path inside the workspace, or raise ToolError."""
        if not path.strip():
            raise ToolError("path is empty; give a path relative to the workspace, e.g. 'report.csv'")
        if "\x00" in path:
            raise ToolError("path contains a NUL byte")
        p = PurePosixPath(path.strip())
        if p.is_absolute():
            if p == PurePosixPath(SANDBOX_ROOT):
                p = PurePosixPath(".")
            elif p.is_relative_to(SANDBOX_ROOT):
                p = p.relative_to(SANDBOX_ROOT)
            else:
                raise ToolError(f"'{path}' is outside the workspace; use a path relative to the workspace")
        if ".." in p.parts:
            raise ToolError(f"'{path}': '..' is not allowed; paths must stay inside the workspace")
        root = self.workspace
        real = Path(os.path.realpath(root / p))
        if real != root and not real.is_relative_to(root):
            raise ToolError(f"'{path}' resolves (through a symlink) outside the workspace")
        return real

    def workspace_copy(self) -> WorkspaceCopy:
        """The whole directory as a frozen record (see `tasks.runtime.workspace_copy`)."""
        return copy_workspace(self.workspace)

    def rel(self, real: Path) -> str:
        return real.relative_to(self.workspace).as_posix() or "."

    def workspace_bytes(self) -> int:
        total = 0
        for dirpath, _, files in os.walk(self.workspace):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_size
                except OSError:
                    continue
        return total

    def read_text(self, path: str) -> str:
        """Read a workspace file as text (for tools and verifiers); ToolError when missing or binary."""
        real = self.resolve(path)
        if not real.is_file():
            raise ToolError(f"'{path}' does not exist or is not a file")
        if real.stat().st_size > MAX_FILE_BYTES:
            raise ToolError(f"'{path}' is larger than {MAX_FILE_BYTES} bytes; inspect it with the shell tool")
        data = real.read_bytes()
        if b"\x00" in data[:8192]:
            raise ToolError(f"'{path}' is a binary file; read it with a tool made for its format")
        return data.decode("utf-8", errors="replace")

    def write_text(self, path: str, content: str) -> Path:
        real = self.resolve(path)
        if real.is_dir():
            raise ToolError(f"'{path}' is a directory")
        data = content.encode()
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"content is {len(data)} bytes; the limit per file is {MAX_FILE_BYTES}")
        old = real.stat().st_size if real.exists() else 0
        cap = self.sandbox_limits.workspace_bytes
        if self.workspace_bytes() - old + len(data) > cap:
            raise ToolError(f"the workspace would exceed its disk limit of {cap} bytes")
        parent = real.parent
        if parent.exists() and not parent.is_dir():
            raise ToolError(f"'{self.rel(parent)}' is a file, not a directory")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ToolError(f"cannot create the folder '{self.rel(parent)}': {e.strerror}") from None
        try:
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=".coevo-write-")
        except OSError as e:
            raise ToolError(f"cannot create a file in '{self.rel(parent)}': {e.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.utime(tmp, (FIXED_MTIME, FIXED_MTIME))
            os.replace(tmp, real)
        except OSError as e:  # e.g. the capped workspace is full (ENOSPC): nothing was written
            Path(tmp).unlink(missing_ok=True)
            why = (f"the workspace is full (its disk limit is {cap} bytes)" if e.errno == errno.ENOSPC
                   else e.strerror)
            raise ToolError(f"could not write '{self.rel(real)}': {why}; nothing was changed") from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return real

    # --- tools ----------------------------------------------------------------------------------
    @tool
    async def shell(self, command: str, timeout_s: int = 10) -> str:
        """Run a /bin/sh command in the workspace (the working directory, /workspace) and return its exit
        code and combined output. No network; only the workspace is writable.

        Args:
            command: the shell command line.
            timeout_s: wall-clock limit in seconds (1-30).
        """
        if not 1 <= timeout_s <= MAX_COMMAND_S:
            raise ToolError(f"timeout_s must be between 1 and {MAX_COMMAND_S}")
        result = await off_loop(self.sandbox.shell, command, wall_s=float(timeout_s))
        return result.render()

    @tool
    async def python(self, code: str, timeout_s: int = 10) -> str:
        """Run Python 3 source code (standard library only) in the workspace and return its exit code and
        combined output. Print what you want to see.

        Args:
            code: the program text.
            timeout_s: wall-clock limit in seconds (1-30).
        """
        if not 1 <= timeout_s <= MAX_COMMAND_S:
            raise ToolError(f"timeout_s must be between 1 and {MAX_COMMAND_S}")
        result = await off_loop(self.sandbox.python, code, wall_s=float(timeout_s))
        return result.render()

    @tool
    def read_file(self, path: str, start_line: int = 1, max_lines: int = 400) -> str:
        """Read a text file of the workspace; lines are numbered in the output.

        Args:
            path: path relative to the workspace.
            start_line: first line to show (1-based).
            max_lines: how many lines to show at most.
        """
        if start_line < 1 or max_lines < 1:
            raise ToolError("start_line and max_lines must be >= 1")
        lines = self.read_text(path).splitlines()
        shown = lines[start_line - 1:start_line - 1 + max_lines]
        body = "\n".join(f"{start_line + i:>5}  {line}" for i, line in enumerate(shown))
        rest = len(lines) - (start_line - 1 + len(shown))
        more = f"\n[{rest} more lines; call again with start_line={start_line + len(shown)}]" if rest > 0 else ""
        return f"{path} ({len(lines)} lines)\n{body}{more}"

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a text file in the workspace (parent folders are created).

        Args:
            path: path relative to the workspace.
            content: the complete new file content.
        """
        real = self.write_text(path, content)
        return f"wrote {len(content)} characters to {self.rel(real)}"

    @tool
    def edit_file(self, path: str, old_text: str, new_text: str) -> str:
        """Replace one exact occurrence of `old_text` with `new_text` in a workspace file.

        Args:
            path: path relative to the workspace.
            old_text: text to find; it must occur exactly once (include surrounding lines to disambiguate).
            new_text: replacement text.
        """
        if not old_text:
            raise ToolError("old_text is empty; give the exact text to replace")
        text = self.read_text(path)
        n = text.count(old_text)
        if n != 1:
            hint = "not found (check whitespace and indentation)" if n == 0 else f"found {n} times; add context"
            raise ToolError(f"old_text {hint} in '{path}'; nothing was changed")
        self.write_text(path, text.replace(old_text, new_text, 1))
        return f"edited {path}: replaced {len(old_text)} characters with {len(new_text)}"

    @tool
    def list_files(self, path: str = ".") -> str:
        """List the files under a workspace folder, recursively, with their sizes in bytes.

        Args:
            path: folder relative to the workspace ('.' for all).
        """
        real = self.resolve(path)
        if not real.is_dir():
            raise ToolError(f"'{path}' is not a folder")
        entries = []
        for dirpath, dirnames, files in os.walk(real):
            dirnames.sort()
            for f in sorted(files):
                full = Path(dirpath) / f
                try:
                    size = full.lstat().st_size
                except OSError:
                    continue
                entries.append(f"{self.rel(full)}  {size}")
        if not entries:
            return f"{path}: no files"
        more = f"\n[{len(entries) - MAX_LISTED} more]" if len(entries) > MAX_LISTED else ""
        return "\n".join(sorted(entries)[:MAX_LISTED]) + more


__all__ = ["WorkspaceEnvironment"]
