"""runs/<id>/code.json: the commit each start and resume of a run ran from, on a real git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flows.provenance import code_version, describe, read_starts, record_start


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "stage.py").write_text("STEP = 1\n")
    _git(repo, "add", "stage.py")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_a_run_resumed_from_the_same_clean_commit_names_one_code(tmp_path: Path) -> None:
    repo, run = _repo(tmp_path), tmp_path / "runs" / "r-1"
    run.mkdir(parents=True)
    (repo / "runs").mkdir()
    (repo / "runs" / "out.txt").write_text("untracked outputs are not code\n")
    assert record_start(run, repo) is None
    assert record_start(run, repo) is None
    starts = read_starts(run)
    head = _git(repo, "rev-parse", "HEAD")
    assert [s.commit for s in starts] == [head, head] and not any(s.dirty for s in starts)
    assert describe(run) == f"commit {head[:7]} (clean); resumed 1 time(s) from the same code"


def test_a_resume_from_another_commit_or_uncommitted_changes_is_said(tmp_path: Path) -> None:
    repo, run = _repo(tmp_path), tmp_path / "runs" / "r-2"
    run.mkdir(parents=True)
    first = _git(repo, "rev-parse", "HEAD")
    assert record_start(run, repo) is None
    (repo / "stage.py").write_text("STEP = 2\n")
    _git(repo, "commit", "-q", "-am", "second")
    second = _git(repo, "rev-parse", "HEAD")
    moved = record_start(run, repo)
    assert moved is not None and f"started from commit {first[:7]} (clean)" in moved
    assert f"resumes from commit {second[:7]} (clean)" in moved and f"git worktree add DIR {first[:7]}" in moved
    (repo / "stage.py").write_text("STEP = 3\n")
    now = code_version(repo)
    assert now.commit == second and now.dirty and now.changed == ["stage.py"]
    assert "uncommitted changes to 1 tracked file(s): stage.py" in (record_start(run, repo) or "")
    line = describe(run)
    assert line.startswith(f"commit {first[:7]} (clean); resumed from commit {second[:7]} (clean) at ")
    assert "stage.py" in line


def test_outside_a_git_checkout_the_commit_is_unknown_and_nothing_fails(tmp_path: Path) -> None:
    plain, run = tmp_path / "plain", tmp_path / "runs" / "r-3"
    plain.mkdir()
    run.mkdir(parents=True)
    assert record_start(run, plain) is None
    assert read_starts(run)[0].commit is None and describe(run) == "not a git checkout"
    assert describe(tmp_path / "runs" / "never-started") == "not recorded (a run started before code.json)"
