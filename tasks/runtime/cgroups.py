"""Whole-call caps for sandboxed commands: one cgroup per call holds the call's whole process tree.

Per-process rlimits (`prlimit`) do not bound a call: three processes of 700 MB each are three times the
address-space limit, and a process count limit counts processes of a uid, not of a call. A cgroup does:
`CallCgroup.open(memory_bytes, max_procs)` creates a fresh cgroup with a memory cap (RSS, page cache and
tmpfs pages together) and a task cap (processes and threads), the sandbox places the command in it before
the command runs (the command waits on a gate until then), and `close()` kills whatever is left in it, reads
what happened (peak memory, OOM kills, refused forks) and removes it. No cgroup outlives its call.

Where the cgroups live (probed once per process, `cgroup_support()`):
- cgroup v1 (these machines): the `memory` and `pids` hierarchies, each under this process's own cgroup
  (`/proc/self/cgroup`), so a parent's limits still cover every call.
- cgroup v2: under `COEVO_CGROUP_PARENT` when set, else under this process's own cgroup, which must have
  (or be able to enable) the `memory` and `pids` controllers in its `cgroup.subtree_control`. A v2
  cgroup that holds processes cannot enable controllers for children (the "no internal processes" rule),
  so on a systemd machine delegate one (`systemd-run --user -p Delegate=yes ...`) and name it.
- neither writable: the sandbox keeps its per-process rlimits only, and one log line says so.
`COEVO_CGROUP=off` turns whole-call cgroups off.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

PREFIX = "coevo-call-"  # every cgroup we create: coevo-call-<our pid>-<random>
_KILL_ROUNDS_S = 3.0  # how long close() keeps killing and retrying rmdir before it gives up (and logs)


@dataclass(frozen=True)
class CgroupSupport:
    """Where call cgroups can be made: `version` None means nowhere (`note` says why)."""

    version: Literal["v1", "v2"] | None
    memory_parent: Path | None = None  # v1: a dir of the memory hierarchy; v2: the parent of call cgroups
    pids_parent: Path | None = None  # v1 only (v2 uses memory_parent for both)
    note: str = ""


@dataclass(frozen=True)
class CgroupStats:
    """What a call's cgroup saw: its peak memory, processes the OOM killer ended, forks refused at the cap."""

    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    procs_refused: int = 0


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of every cgroup mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[3], fields[4].replace("\\040", " "), tail[0], tail[2]))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or '' for v2) -> this process's cgroup path in that hierarchy."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _under(mount_root: str, mount_point: str, own: str) -> Path | None:
    """The directory of our own cgroup inside a mount (None when the mount does not show it)."""
    if mount_root != "/" and not (own == mount_root or own.startswith(mount_root.rstrip("/") + "/")):
        return None
    rel = own[len(mount_root):] if mount_root != "/" else own
    return Path(mount_point) / rel.lstrip("/")


def _probe_dir(parent: Path, needed: str) -> str | None:
    """None when a child cgroup with the `needed` file can be made (and removed) under `parent`; else why not."""
    probe = parent / f"{PREFIX}{os.getpid()}-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as e:
        return f"cannot create a cgroup under {parent} ({e.strerror})"
    try:
        return None if (probe / needed).exists() else f"{parent} gives no {needed}"
    finally:
        _rmdir(probe)


def _v1_support() -> CgroupSupport | None:
    own = _own_paths()
    parents: dict[str, Path] = {}
    for root, point, fstype, opts in _mounts():
        for controller in ("memory", "pids"):
            if fstype == "cgroup" and controller in opts.split(",") and controller in own and controller not in parents:
                d = _under(root, point, own[controller])
                if d is not None and d.is_dir():
                    parents[controller] = d
    if not parents:
        return None
    mem, pids = parents.get("memory"), parents.get("pids")
    if mem is not None and _probe_dir(mem, "memory.limit_in_bytes") is not None:
        mem = None
    if pids is not None and _probe_dir(pids, "pids.max") is not None:
        pids = None
    if mem is None and pids is None:
        return None
    missing = [c for c, d in (("memory", mem), ("pids", pids)) if d is None]
    note = f"cgroup v1 without {', '.join(missing)}" if missing else "cgroup v1"
    return CgroupSupport("v1", mem, pids, note)


def _v2_parent() -> Path | None:
    forced = os.environ.get("COEVO_CGROUP_PARENT", "").strip()
    if forced:
        return Path(forced)
    own = _own_paths().get("")
    for root, point, fstype, _ in _mounts():
        if fstype == "cgroup2" and own is not None:
            return _under(root, point, own)
    return None


def _v2_support() -> CgroupSupport | str:
    parent = _v2_parent()
    if parent is None or not parent.is_dir():
        return "no cgroup2 mount shows this process's cgroup"
    try:
        available = (parent / "cgroup.controllers").read_text().split()
    except OSError as e:
        return f"cannot read {parent}/cgroup.controllers ({e.strerror})"
    if not {"memory", "pids"} <= set(available):
        return f"cgroup2 at {parent} offers no memory/pids controllers (they are bound to cgroup v1)"
    enabled = (parent / "cgroup.subtree_control").read_text().split()
    if not {"memory", "pids"} <= set(enabled):
        try:
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError as e:
            return (f"cannot enable memory/pids for children of {parent} ({e.strerror}; a cgroup that holds "
                    "processes cannot); delegate a cgroup and name it in COEVO_CGROUP_PARENT")
    why = _probe_dir(parent, "memory.max")
    return why if why is not None else CgroupSupport("v2", parent, None, "cgroup v2")


class _Off(Exception):
    pass


@functools.cache
def cgroup_support() -> CgroupSupport:
    """Probed once per process: side-effect free apart from a probe cgroup made and removed at once."""
    reasons = []
    try:
        if os.environ.get("COEVO_CGROUP", "").strip().lower() == "off":
            raise _Off("turned off by COEVO_CGROUP=off")
        v1 = _v1_support()
        if v1 is not None:
            _sweep_stale(v1)
            return v1
        reasons.append("no writable cgroup v1 memory/pids hierarchy")
        v2 = _v2_support()
        if isinstance(v2, CgroupSupport):
            _sweep_stale(v2)
            return v2
        reasons.append(v2)
    except _Off as e:
        reasons.append(str(e))
    except OSError as e:  # /proc or /sys missing or unreadable
        reasons.append(f"cgroups unreadable ({e})")
    note = "; ".join(reasons)
    log.warning("sandbox: whole-call memory and process caps are OFF (per-process rlimits only): %s", note)
    return CgroupSupport(None, note=note)


def _sweep_stale(support: CgroupSupport) -> None:
    """Remove empty call cgroups left by a process of ours that died before its close() (e.g. SIGKILL)."""
    for parent in {p for p in (support.memory_parent, support.pids_parent) if p is not None}:
        for d in parent.glob(f"{PREFIX}*"):
            pid = d.name[len(PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _rmdir(d)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _read_int(path: Path, key: str | None = None) -> int | None:
    """A file holding one number, or the value of `key` in a `key value` file; None when absent."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if key is None:
        return int(text.split()[0]) if text.strip() and text.split()[0].isdigit() else None
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return None


class CallCgroup:
    """The cgroup(s) of one sandboxed call. Build with `open()`; always `close()` (it removes them)."""

    def __init__(self, support: CgroupSupport, dirs: list[Path]) -> None:
        self.support = support
        self.dirs = dirs

    @classmethod
    def open(cls, memory_bytes: int, max_procs: int) -> CallCgroup | None:
        """A fresh cgroup capped at `memory_bytes` and `max_procs` tasks; None where cgroups are unavailable."""
        support = cgroup_support()
        if support.version is None:
            return None
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        parents = [p for p in (support.memory_parent, support.pids_parent) if p is not None]
        made = cls(support, [])
        try:
            for parent in dict.fromkeys(parents):
                d = parent / name
                d.mkdir()
                made.dirs.append(d)
            made._limit(memory_bytes, max_procs)
        except OSError as e:
            log.warning("sandbox: could not create the call's cgroup (%s); this call runs with rlimits only", e)
            made.close()
            return None
        return made

    def _limit(self, memory_bytes: int, max_procs: int) -> None:
        for d in self.dirs:
            if self.support.version == "v1":
                if (d / "memory.limit_in_bytes").exists():
                    (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    if (d / "memory.memsw.limit_in_bytes").exists():  # no swapping around the cap
                        (d / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                if (d / "pids.max").exists():
                    (d / "pids.max").write_text(str(max_procs))
            else:
                (d / "memory.max").write_text(str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(max_procs))

    def add(self, pid: int) -> None:
        """Move `pid` (the gated command, not yet running anything) into the call's cgroup(s)."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue
        return out

    def stats(self) -> CgroupStats:
        peak, ooms, refused = None, 0, 0
        for d in self.dirs:
            if self.support.version == "v1":
                peak = _read_int(d / "memory.max_usage_in_bytes") if peak is None else peak
                ooms += _read_int(d / "memory.oom_control", "oom_kill") or 0
            else:
                peak = _read_int(d / "memory.peak")
                ooms += _read_int(d / "memory.events", "oom_kill") or 0
            refused += _read_int(d / "pids.events", "max") or 0
        return CgroupStats(peak_memory_bytes=peak, oom_kills=ooms, procs_refused=refused)

    def kill_all(self) -> None:
        """SIGKILL every process still in the cgroup (v2 `cgroup.kill` where the kernel has it)."""
        for d in self.dirs:
            if self.support.version == "v2" and (d / "cgroup.kill").exists():
                try:
                    (d / "cgroup.kill").write_text("1")
                except OSError:
                    pass
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue

    def close(self) -> CgroupStats:
        """Kill what is left, read the stats, remove the cgroup(s). Safe to call twice."""
        if not self.dirs:
            return CgroupStats()
        deadline = time.monotonic() + _KILL_ROUNDS_S
        self.kill_all()
        stats = self.stats()
        left = list(self.dirs)
        while left:
            left = [d for d in left if not _rmdir(d)]
            if not left or time.monotonic() > deadline:
                break
            self.kill_all()  # a fork that raced the first round
            time.sleep(0.02)
        for d in left:
            log.warning("sandbox: cgroup %s still holds processes after %.0f s; not removed", d, _KILL_ROUNDS_S)
        self.dirs = []
        return stats


__all__ = ["CallCgroup", "CgroupStats", "CgroupSupport", "cgroup_support"]
