"""The workspace's disk cap, whatever tool writes (a sandboxed command, a file tool in our own process).

Two mechanisms, the first wherever it is available:
- **a size-limited mount**: `make_workspace()` creates the directory and mounts a tmpfs on it with
  `size=<cap>` and `nr_inodes=<max files>` (needs root or CAP_SYS_ADMIN). The kernel refuses every write
  beyond the cap with ENOSPC, so the workspace can never hold more, and nothing has to be measured.
  The mount's source names our pid (`coevo-ws-<pid>`), so a later process unmounts the workspaces of a
  process that died without `remove_workspace()`.
- **measure and undo** (any other directory a `Sandbox` runs in, or where mounting is not allowed):
  `DiskGuard` copies the workspace aside before a sandboxed call, measures it while the call runs (the
  sandbox polls `over()` and kills the call at the cap) and after it; a call that ends over the cap is
  failed and the workspace is put back exactly as it was before the call.

Sizes are apparent sizes (`st_size`) in the measured mode and allocated pages in the tmpfs mode; both
count every regular file, and the file count counts every entry (files, directories, links).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
_SOURCE = "coevo-ws-"


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount_tmpfs(target: Path, size_bytes: int, max_files: int) -> str | None:
    """Mount a capped tmpfs on `target`; None on success, else the reason it could not be done."""
    data = f"size={size_bytes},nr_inodes={max_files},mode=0700".encode()
    rc = _libc().mount(f"{_SOURCE}{os.getpid()}".encode(), str(target).encode(), b"tmpfs",
                       _MS_NOSUID | _MS_NODEV, data)
    if rc == 0:
        return None
    err = ctypes.get_errno()
    return f"mount tmpfs: {os.strerror(err)}"


def _umount(target: Path) -> bool:
    return _libc().umount2(str(target).encode(), _MNT_DETACH) == 0


@functools.cache
def _first_use() -> None:
    """Once per process: unmount and delete workspaces whose owning process is gone."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        left, _, right = line.partition(" - ")
        tail = right.split()
        if len(tail) < 2 or tail[0] != "tmpfs" or not tail[1].startswith(_SOURCE):
            continue
        pid = tail[1][len(_SOURCE):]
        point = Path(left.split()[4].replace("\\040", " "))
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and point.name.startswith("coevo-"):
            if _umount(point):
                shutil.rmtree(point, ignore_errors=True)


def make_workspace(prefix: str, cap_bytes: int, max_files: int) -> tuple[Path, bool]:
    """A new private directory (`mkdtemp` under the system temp dir) and whether a capped tmpfs holds it."""
    _first_use()
    root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    why = _mount_tmpfs(root, cap_bytes, max_files)
    if why is not None:
        _note_no_mount(why)
        return root, False
    return root, True


@functools.cache
def _note_no_mount(why: str) -> None:
    log.warning("workspace disk cap: no size-limited mount (%s); each sandboxed call is measured and its writes "
                "undone when over the cap", why)


def remove_workspace(root: Path) -> None:
    """Unmount (lazily: a command still running there keeps its view until it ends) and delete."""
    if os.path.ismount(root):
        _umount(root)
    shutil.rmtree(root, ignore_errors=True)


def is_capped_mount(root: Path, cap_bytes: int) -> bool:
    """True when `root` is a mount no larger than `cap_bytes` (the kernel enforces the cap)."""
    if not os.path.ismount(root):
        return False
    st = os.statvfs(root)
    return st.f_blocks * st.f_frsize <= cap_bytes


def mount_full(root: Path) -> bool:
    """A capped mount with (nearly) no room or no inode left: writes in it have been failing."""
    st = os.statvfs(root)
    return st.f_bavail * st.f_frsize < (64 << 10) or st.f_favail == 0


def usage(root: Path, cap_bytes: int, max_files: int) -> tuple[int, int]:
    """(bytes, entries) under `root`, not following symlinks; stops counting once either cap is passed."""
    total, entries = 0, 0
    for dirpath, dirnames, files in os.walk(root):
        entries += len(dirnames) + len(files)
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
        if total > cap_bytes or entries > max_files:
            break
    return total, entries


def _copy_entry(src: str, dst: str) -> None:
    """copytree's copy function: regular files with their metadata; FIFOs recreated (never opened); sockets
    and devices skipped (a command cannot make a device, and a socket dies with its call)."""
    mode = os.lstat(src).st_mode
    if stat.S_ISREG(mode):
        shutil.copy2(src, dst, follow_symlinks=False)
    elif stat.S_ISFIFO(mode):
        os.mkfifo(dst, stat.S_IMODE(mode))


class DiskGuard:
    """Measure-and-undo for one call in a workspace that is not a capped mount."""

    def __init__(self, root: Path, cap_bytes: int, max_files: int) -> None:
        self.root, self.cap_bytes, self.max_files = root, cap_bytes, max_files
        self.before = usage(root, cap_bytes, max_files)
        self._backup = Path(tempfile.mkdtemp(prefix="coevo-undo-")) / "ws"
        shutil.copytree(root, self._backup, symlinks=True, copy_function=_copy_entry)

    def over(self) -> str | None:
        """'workspace_disk' / 'workspace_files' when this call has passed a cap, else None (a workspace that
        was already over a cap before the call is not blamed on the call unless the call made it grow)."""
        size, entries = usage(self.root, self.cap_bytes, self.max_files)
        if size > self.cap_bytes and size > self.before[0]:
            return "workspace_disk"
        return "workspace_files" if entries > self.max_files and entries > self.before[1] else None

    def finish(self, already_over: str | None) -> str | None:
        """After the call: the cap passed (if any), the workspace restored when one was; the backup removed."""
        try:
            passed = already_over or self.over()
            if passed is not None:
                self._restore()
            return passed
        finally:
            shutil.rmtree(self._backup.parent, ignore_errors=True)

    def _restore(self) -> None:
        for dirpath, dirnames, _ in os.walk(self.root):  # a command may have made folders unreadable
            for name in dirnames:
                full = os.path.join(dirpath, name)
                if not os.path.islink(full):
                    os.chmod(full, 0o700)
        for entry in os.listdir(self.root):
            path = self.root / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        shutil.copytree(self._backup, self.root, symlinks=True, copy_function=_copy_entry, dirs_exist_ok=True)


__all__ = ["DiskGuard", "is_capped_mount", "make_workspace", "mount_full", "remove_workspace", "usage"]
