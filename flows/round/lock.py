"""One writer per run: `<run>/run.lock` holds the writer's pid, host and start time.

    with RunLock(run_dir):        # raises LockHeld (one line naming the holder) when another live writer has it
        ...

A lock left by a dead process on this host is taken over (its line is logged); a lock from another host is
respected, since its process cannot be checked from here (remove the file by hand when that host is gone).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

LOCK_FILE = "run.lock"


class LockHeld(RuntimeError):
    """Another writer holds the run; the message is one line naming it."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_line(info: dict, run_dir: Path) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info.get("started", 0)))
    return (f"run {run_dir.name} is being written by pid {info.get('pid')} on host {info.get('host')} since "
            f"{started}; wait for it to finish or stop it (lock: {run_dir / LOCK_FILE})")


class RunLock:
    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    old = json.loads(self.path.read_text() or "{}")
                except (OSError, ValueError):
                    old = {}
                if old.get("pid") == os.getpid() and old.get("host") == info["host"]:
                    raise LockHeld(holder_line(old, self.path.parent)) from None
                if old.get("host") == info["host"] and isinstance(old.get("pid"), int) and not _alive(old["pid"]):
                    self.path.unlink(missing_ok=True)  # a dead writer's lock: take it over
                    continue
                raise LockHeld(holder_line(old, self.path.parent)) from None
            with os.fdopen(fd, "w") as f:
                json.dump(info, f)
            self.held = True
            return
        raise LockHeld(f"could not take the lock {self.path}")

    def check(self) -> None:
        """Raise LockHeld when a live writer (or one on another host) holds the run; a dead one's lock is fine."""
        if not self.path.exists():
            return
        try:
            old = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            old = {}
        same_host = old.get("host") == socket.gethostname()
        if same_host and isinstance(old.get("pid"), int) and not _alive(old["pid"]):
            return
        raise LockHeld(holder_line(old, self.path.parent))

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
