"""The correction_data stage and `coevo correct` on SIMULATED failing rollouts (real environments, real
rollout runtime): a rerun after a kill repeats no expert or student call; bad CLI input is one clear error."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from correction_helpers import STUDENT, student_rollout
from log_capture import logged_lines
from scripted_model import Step, scripted
from typer.testing import CliRunner

from agents.budget import BudgetSpent, SpendCap
from agents.jobs import RolloutJob
from agents.records import ModelRole
from agents.tables.trajectories import read_trajectories, write_trajectories
from correction.records import boundary_instances
from correction.runner import local_rollouts
from flows.round.correct import STAGE, CorrectionConfig, correct_run
from flows.store import RunStore
from harness import baseline
from training.dataset import marked_turns

CASES = [("payroll_audit", 40, 0), ("anomaly_detection", 41, 0)]


@pytest.fixture(scope="module")
def failing():
    out = [asyncio.run(student_rollout(*c)) for c in CASES]
    assert all(not t.passed for t in out)
    return out


class Killed(RuntimeError):
    pass


class Recorder:
    """A RolloutFn that records the job keys it ran, and dies after `die_after` batches (a kill)."""

    def __init__(self, die_after: int | None = None) -> None:
        self.inner, self.keys, self.batches, self.die_after = local_rollouts(2), [], 0, die_after

    async def __call__(self, jobs: Sequence[RolloutJob]):
        if self.die_after is not None and self.batches >= self.die_after:
            raise Killed("killed")
        self.batches += 1
        self.keys += [j.key for j in jobs]
        return await self.inner(jobs)


def test_rerun_after_a_kill_repeats_no_call(failing, tmp_path):
    harnesses = {baseline(t.family).id: baseline(t.family) for t in failing}
    with pytest.raises(ValueError, match="leakage"):  # test-split rollouts never become training rows by default
        correct_run(RunStore(tmp_path, "leak"), failing, {}, CorrectionConfig(student=ModelRole(model=STUDENT)))
    config = CorrectionConfig(student=ModelRole(model=STUDENT), replays=1, concurrency=1, keep="improved",
                              splits=["train", "test"])  # a measurement run on test instances
    # (keep 'improved': the student's own resample finishes these too, so the control would keep none)
    killed = Recorder(die_after=4)
    with pytest.raises(Killed):
        correct_run(RunStore(tmp_path, "r"), failing, harnesses, config, run=killed)
    assert killed.keys
    resumed = Recorder()
    with logged_lines("flows.round.correct") as lines:
        first = correct_run(RunStore(tmp_path, "r"), failing, harnesses, config, run=resumed)
    assert not set(resumed.keys) & set(killed.keys), "a finished episode ran again"
    assert lines and re.fullmatch(r"correction sources \(\d kept of [12] run here\): 2/2 \(100%\), .+, done",
                                  lines[-1]), lines  # the progress line at the stage's end
    assert len(first.corrections) == 2 and first.card["corrections"] == len(first.corrected) >= 1
    again = Recorder()
    second = correct_run(RunStore(tmp_path, "r"), failing, harnesses, config, run=again)
    assert again.keys == [] and second.reused == 2 and second.calls == {}
    assert [c.model_dump() for c in second.corrections] == [c.model_dump() for c in first.corrections]
    assert {t.id for t in second.corrected} == {c.corrected_trajectory_id for c in first.corrections if c.status == "corrected"}
    card = json.loads((tmp_path / "r" / "datasets" / STAGE / "card.json").read_text())
    assert card["sources"] == 2 and card["boundary_share"] == 0.0  # only failing samples given: no boundary
    assert boundary_instances([("a", True), ("a", False), ("b", False), ("c", True)]) == {"a"}


def test_the_stage_stops_at_the_api_budget_and_keeps_its_finished_work(failing, tmp_path):
    """A priced expert (a scripted stand-in for a paid API at $0.10 a call): the cap is checked before every batch,
    so the stage stops inside itself; the source finished before the stop and every episode run are kept."""
    expert, script = scripted([Step(calls=[("list_files", {})])] * 4, input_cost_per_token=1e-3)  # 100 tokens a call
    harnesses = {baseline(t.family).id: baseline(t.family) for t in failing}
    config = CorrectionConfig(student=ModelRole(model=STUDENT), expert=expert, n=1, replays=1, concurrency=1,
                              keep="any", splits=["train", "test"])
    cap = SpendCap(limit_usd=0.15, hint="raise the budget")
    with pytest.raises(BudgetSpent, match=r"API budget \$0.15 spent \(\$0.20\); finished work is kept"):
        correct_run(RunStore(tmp_path, "b"), failing, harnesses, config, run=local_rollouts(2), cap=cap)
    assert len(script.seen) == 2 and len(RunStore(tmp_path, "b").done(STAGE)) == 1  # one source finished
    again = Recorder()
    done = correct_run(RunStore(tmp_path, "b"), failing, harnesses, config, run=again, cap=SpendCap(None))
    assert len(script.seen) == 2, "a paid rewrite ran again"
    assert done.reused == 1 and len(done.corrections) == 2 and again.keys  # only the unfinished source's replays


def _text(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def app():
    import typer

    from flows.cli import correct as cli_correct

    a = typer.Typer()
    cli_correct.register(a)
    return a


def test_cli_writes_corrections_and_rejects_bad_input(failing, tmp_path):
    src = tmp_path / "src" / "trajectories.parquet"
    write_trajectories(src, failing[:1])
    out = tmp_path / "out"
    base = ["--trajectories", str(src.parent), "--student", STUDENT, "--replays", "1", "--keep", "improved", "--out",
            str(out)]
    leak = CliRunner().invoke(app(), base)  # test-split rollouts: the leakage guard refuses them
    assert leak.exit_code == 2 and "leakage" in _text(leak.output) and not out.exists()
    base = [*base, "--allow-split", "test"]
    res = CliRunner().invoke(app(), base)
    assert res.exit_code == 0, res.output
    rows = read_trajectories(out / "trajectories")
    assert len(rows) == 1 and rows[0].tag == "correction" and len(marked_turns(rows[0])) == 1
    for bad, word in [(["--locator", "psychic"], "--locator"), (["--selector", "coin"], "--selector"),
                      (["--harness", str(tmp_path / "nope.yaml")], "--harness"), (["--n", "0"], "--n")]:
        r = CliRunner().invoke(app(), [*base[:-3], str(tmp_path / "bad"), *bad])
        assert r.exit_code == 2 and word in _text(r.output), (bad, r.output)
    r = CliRunner().invoke(app(), ["--trajectories", str(tmp_path / "none"), "--student", STUDENT, "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and "does not exist" in _text(r.output)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "b").exists()


def test_the_episode_cache_does_not_depend_on_where_the_model_is_served(failing, tmp_path):
    """A resumed run whose server moved (another port or host) finds its episodes; a cache written with the
    server in the key (before) is still read."""
    from agents.prefix import prefix_of
    from correction.roles import continuation
    from correction.runner import CachedRollouts

    view = failing[0].view()
    at = {port: continuation(view, baseline(view.family), ModelRole(model="hosted_vllm/micro",
                                                                      api_base=f"http://127.0.0.1:{port}/v1"),
                             prefix_of(view, 1), 0, "student-replay", extra_turns=3) for port in (8123, 8141)}
    cache = CachedRollouts(local_rollouts(1), tmp_path / "cache")
    assert at[8123].key != at[8141].key and cache._path(at[8123]) == cache._path(at[8141])
    legacy = cache._path(at[8123], legacy=True)
    assert legacy != cache._path(at[8123]) and cache._cached(at[8141]) is None
    write_trajectories(legacy, [failing[0]])  # an episode cached by a run that keyed on its server
    assert cache._cached(at[8123]) == failing[0] and cache._cached(at[8141]) is None


def test_train_takes_the_correct_output_directory(failing, tmp_path, tiny_model_dir):
    """`coevo correct --out DIR` then `coevo train --data DIR`: an adapter from the corrected trajectories (their
    marked turns), not a schema error about the Correction table; a wrong directory or mask is one line."""
    from flows.cli import app as coevo

    src = tmp_path / "src" / "trajectories.parquet"
    write_trajectories(src, failing[:1])
    out = tmp_path / "corr"
    res = CliRunner().invoke(app(), ["--trajectories", str(src.parent), "--student", STUDENT, "--replays", "1",
                                     "--keep", "improved", "--allow-split", "test", "--out", str(out)])
    assert res.exit_code == 0, res.output
    fast = ["--base", str(tiny_model_dir), "--epochs", "1", "--seeds", "1", "--effective-batch", "1",
            "--no-gradient-checkpointing", "--no-progress"]
    trained = CliRunner().invoke(coevo, ["train", "--data", str(out), "--out", str(tmp_path / "a"), *fast])
    assert trained.exit_code == 0, trained.output
    assert (tmp_path / "a" / "seed-0" / "adapter_model.safetensors").exists()
    manifest = json.loads((tmp_path / "a" / "dataset" / "manifest.json").read_text())
    assert manifest["mask"] == "turns" and manifest["stats"]["examples"] == 1
    assert [s["tag"] for s in manifest["sources"]] == ["correction"] and len(manifest["sources"][0]["trained_turns"]) == 1
    table = CliRunner().invoke(coevo, ["train", "--data", str(out / "datasets" / STAGE), "--out", str(tmp_path / "b"), *fast])
    assert table.exit_code == 2 and f"pass the `coevo correct --out` directory ({out})" in _text(table.output)
    mask = CliRunner().invoke(coevo, ["train", "--data", str(out), "--mask", "assistant", "--out", str(tmp_path / "b"), *fast])
    assert mask.exit_code == 2 and "--mask turns" in _text(mask.output) and not (tmp_path / "b").exists()
