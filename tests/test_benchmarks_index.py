"""benchmarks/results_index.py and results_io.save_results: the README's results table matches the raw files, every
raw file gets a dated row, and new records carry their commit.

The benchmark scripts import each other by bare name with benchmarks/ on sys.path (`from results_io import ...`);
so do these tests (appended, so that no benchmark script shadows another module). The real benchmarks/results/ is
only read.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "benchmarks") not in sys.path:
    sys.path.append(str(REPO / "benchmarks"))

import results_index  # noqa: E402
import results_io  # noqa: E402


def test_readme_results_table_is_in_sync() -> None:
    problem = results_index.check()
    assert problem is None, f"{problem} (then commit benchmarks/README.md)"


def test_every_results_file_gets_a_dated_row_with_a_benchmark() -> None:
    files = sorted(p.name for p in results_io.RESULTS_DIR.glob("*.json"))
    rows = results_index.rows()
    assert files and sorted(r.file for r in rows) == files
    for r in rows:
        assert re.match(r"\d{4}-\d{2}-\d{2}", r.date), r
        assert r.benchmark.strip(), r
        assert r.headline.strip() and r.commit and r.machine and r.load, r
    assert [(r.date, r.file) for r in rows] == sorted((r.date, r.file) for r in rows)


def test_unknown_layout_falls_back_to_a_count(tmp_path: Path) -> None:
    (tmp_path / "mystery-2026-01-02.json").write_text(json.dumps([{"a": 1}, {"a": 2}]))
    (tmp_path / "decode_limit-2026-01-03.json").write_text(json.dumps({"benchmark": "decode_limit", "results": {}}))
    rows = results_index.rows(tmp_path)
    assert [(r.benchmark, r.date, r.headline) for r in rows] == [
        ("mystery", "2026-01-02", "2 records"), ("decode_limit", "2026-01-03", "0 keys")]
    assert {r.machine for r in rows} == {r.load for r in rows} == {"not recorded"}


def test_save_results_records_the_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results_io, "RESULTS_DIR", tmp_path / "results")
    path = results_io.save_results("probe", {"x": 1})
    assert path.parent == tmp_path / "results"
    record = json.loads(path.read_text())
    assert re.fullmatch(r"[0-9a-f]{4,40}(-dirty)?|not recorded", record["commit"]), record["commit"]
    assert record["results"] == {"x": 1} and record["benchmark"] == "probe"


def test_commit_without_git_is_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert results_io.commit() == "not recorded"


def test_save_results_never_overwrites_a_committed_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerun the same day once overwrote the committed decode_limit evidence; a committed file is now kept."""
    committed = sorted(p for p in results_io.RESULTS_DIR.glob("*.json") if results_io.committed(p))
    if not committed:
        pytest.skip("no git checkout: nothing here is committed")
    import datetime as dt

    day = dt.date(2026, 12, 4)

    class Today(dt.datetime):
        @classmethod
        def now(cls, tz: object = None) -> "Today":
            return cls(day.year, day.month, day.day, 12, 0, 0)

    name = "decode_limit"
    target = results_io.RESULTS_DIR / f"{name}-{day.isoformat()}.json"
    assert results_io.committed(target)
    before = target.read_bytes()
    monkeypatch.setattr(results_io.dt, "datetime", Today)
    path = results_io.save_results(name, {"probe": True})
    try:
        assert path != target and path.name.startswith(f"{name}-{day.isoformat()}-")
        assert target.read_bytes() == before
        # an uncommitted record of the same benchmark is ours to overwrite
        again = results_io.save_results(name, {"probe": 2})
        assert again == path and json.loads(again.read_text())["results"] == {"probe": 2}
    finally:
        path.unlink(missing_ok=True)
