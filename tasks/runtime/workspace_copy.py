"""A frozen copy of a workspace directory, as data: what a verifier that must execute code reads.

`copy_workspace(root)` reads the tree once (never following symlinks, never opening anything but regular
files, so a FIFO or a device the agent created cannot block or feed it); `materialized(copy)` writes it
into a fresh temp directory for the checks that run there (AST parsing, the sandboxed hidden tests) and
removes it afterwards. The verifier thus never touches the live workspace, and what it runs cannot change
the environment's state.

Caps keep a flooded workspace from flooding memory: a file's bytes are kept up to `max_file_bytes` and up
to `max_total_bytes` in all; a file beyond either is kept by its size only and materialised as a sparse
file of that size (zeros), so size-based checks see the same size. Special files (FIFOs, sockets,
devices) are listed in `special` and not materialised.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

MAX_FILE_BYTES = 8 << 20
MAX_TOTAL_BYTES = 64 << 20
MAX_ENTRIES = 20_000


class WorkspaceCopy(BaseModel):
    """Relative posix paths -> content. Directories are listed so empty ones survive."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    files: dict[str, bytes] = Field(default_factory=dict)
    oversized: dict[str, int] = Field(default_factory=dict, description="path -> size of a file kept by size only")
    symlinks: dict[str, str] = Field(default_factory=dict, description="path -> the link's target, unresolved")
    dirs: list[str] = Field(default_factory=list)
    special: list[str] = Field(default_factory=list, description="FIFOs, sockets and devices: not materialised")
    truncated: bool = Field(default=False, description="more than MAX_ENTRIES entries: the rest is left out")


def copy_workspace(root: Path, *, max_file_bytes: int = MAX_FILE_BYTES,
                   max_total_bytes: int = MAX_TOTAL_BYTES) -> WorkspaceCopy:
    files: dict[str, bytes] = {}
    oversized: dict[str, int] = {}
    symlinks: dict[str, str] = {}
    dirs: list[str] = []
    special: list[str] = []
    total = entries = 0
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not descend into symlinked dirs
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            entries += 1
            if entries > MAX_ENTRIES:
                return WorkspaceCopy(files=files, oversized=oversized, symlinks=symlinks, dirs=dirs,
                                     special=special, truncated=True)
            full = os.path.join(dirpath, name)
            rel = Path(full).relative_to(root).as_posix()
            try:
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    symlinks[rel] = os.readlink(full)
                elif stat.S_ISDIR(st.st_mode):
                    dirs.append(rel)
                elif not stat.S_ISREG(st.st_mode):
                    special.append(rel)
                elif st.st_size > max_file_bytes or total + st.st_size > max_total_bytes:
                    oversized[rel] = st.st_size
                else:
                    files[rel] = _read_regular(full, st.st_size)
                    total += len(files[rel])
            except OSError:
                continue  # vanished or unreadable: left out, as a command would not see it either
    return WorkspaceCopy(files=files, oversized=oversized, symlinks=symlinks, dirs=dirs, special=special)


def _read_regular(path: str, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # swapped for a FIFO or link: no hang
    with os.fdopen(fd, "rb") as f:
        return f.read(size)


@contextmanager
def materialized(copy: WorkspaceCopy, prefix: str = "coevo-verify-") -> Iterator[Path]:
    """The copy written into a fresh temp directory (world-traversable, so a sandbox uid can read it)."""
    root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    try:
        root.chmod(0o755)
        for rel in copy.dirs:
            (root / rel).mkdir(parents=True, exist_ok=True)
        for rel, content in copy.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(content)
        for rel, size in copy.oversized.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            with open(root / rel, "wb") as f:
                f.truncate(size)
        for rel, target in copy.symlinks.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, root / rel)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["WorkspaceCopy", "copy_workspace", "materialized"]
