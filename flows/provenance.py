"""The code a run ran: the git commit of the checkout at each start and resume, kept in `runs/<run_id>/code.json`.

A study frozen for a confirmatory run is a config AND the code of one commit. A run that spans sessions is resumed
from whatever checkout the command runs in; this module records the commit (and whether tracked files had
uncommitted changes) every time the run starts, so the report can say which code produced it and a resume from
other code is said out loud instead of found later:

    {"starts": [{"commit": "525f66b...", "dirty": false, "changed": [], "at": "2026-12-06T22:48:33Z"}, ...]}

Untracked files are not counted (runs/, .cache/ and build outputs are untracked); a checkout that is not a git
repository, or a machine without git, records `commit: null`.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from flows.store import atomic_write_text

CODE_FILE = "code.json"
_LISTED = 5  # changed files named in a description; the rest are counted


class CodeVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    commit: str | None = Field(description="`git rev-parse HEAD` of the checkout; None outside a git checkout.")
    dirty: bool = Field(default=False, description="Tracked files differ from the commit.")
    changed: list[str] = Field(default_factory=list, description="The tracked files that differ.")
    at: str = Field(default="", description="When the run (re)started, UTC, ISO 8601.")

    def short(self) -> str:
        if self.commit is None:
            return "not a git checkout"
        head = f"commit {self.commit[:7]}"
        if not self.dirty:
            return head + " (clean)"
        named = ", ".join(self.changed[:_LISTED]) + (f" and {len(self.changed) - _LISTED} more"
                                                     if len(self.changed) > _LISTED else "")
        return head + f" with uncommitted changes to {len(self.changed)} tracked file(s): {named}"

    def same_code(self, other: "CodeVersion") -> bool:
        return self.commit == other.commit and not self.dirty and not other.dirty


def _git(base: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(base), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def code_version(base: Path) -> CodeVersion:
    """The commit checked out at `base` and the tracked files that differ from it."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    head = _git(base, "rev-parse", "HEAD")
    if head is None:
        return CodeVersion(commit=None, at=at)
    status = _git(base, "status", "--porcelain", "--untracked-files=no") or ""
    changed = sorted(line[3:].strip() for line in status.splitlines() if line.strip())
    return CodeVersion(commit=head.strip(), dirty=bool(changed), changed=changed, at=at)


def read_starts(run_root: Path) -> list[CodeVersion]:
    path = run_root / CODE_FILE
    if not path.exists():
        return []
    return [CodeVersion.model_validate(s) for s in json.loads(path.read_text()).get("starts", [])]


def record_start(run_root: Path, base: Path) -> str | None:
    """Append this start's code version to `code.json`; the warning to log when the run's code is not one clean
    commit (this start differs from the first, or either has uncommitted changes), else None."""
    starts = [*read_starts(run_root), code_version(base)]
    atomic_write_text(run_root / CODE_FILE, json.dumps({"starts": [s.model_dump() for s in starts]}, indent=2))
    first, now = starts[0], starts[-1]
    if first.commit is None or first.same_code(now):
        return None
    if len(starts) == 1:
        return f"run {run_root.name} starts from {now.short()}: its report will not name one commit's code"
    return (f"run {run_root.name} started from {first.short()} and resumes from {now.short()}: its finished stages "
            f"ran the first code, the rest run this code. For a frozen study, resume from a checkout of the first "
            f"commit (`git worktree add DIR {first.commit[:7]}`, then run from DIR).")


def describe(run_root: Path) -> str:
    """The report's `code` line: the commit the run started from, and every other one it was resumed from."""
    starts = read_starts(run_root)
    if not starts:
        return "not recorded (a run started before code.json)"
    first = starts[0]
    others = [s for s in starts[1:] if not s.same_code(first)]
    if not others:
        return first.short() + (f"; resumed {len(starts) - 1} time(s) from the same code" if len(starts) > 1 else "")
    return first.short() + "; resumed from " + "; ".join(f"{s.short()} at {s.at}" for s in others)
