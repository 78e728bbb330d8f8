"""`coevo attribute` on a directory of trajectories, and the `attribute` stage on a run store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import polars as pl
import pytest
from attribution_helpers import CASES, make_case, oracle_run
from typer.testing import CliRunner

from agents.records import Trajectory
from agents.tables.trajectories import write_trajectories
from analysis.attribution.records import read_attribution_frame
from flows.evaluation.attribution import AttributionConfig, attribute_run
from flows.cli import app
from flows.store import RunStore
from harness import Harness, baseline

KINDS = ("wrong_columns", "finish_early", "blocked_valid_call")


@pytest.fixture(scope="module")
def rollouts() -> dict[str, list[Trajectory]]:
    async def build() -> dict[str, list[Trajectory]]:
        memo: dict = {}
        faulty = [await make_case(c, c.families[0], 41, memo) for c in CASES if c.name in KINDS]
        return {"faulty": faulty, "oracle": [memo[k] for k in sorted(memo)]}
    return asyncio.run(build())


def test_cli_attributes_and_measures(rollouts: dict[str, list[Trajectory]], tmp_path: Path) -> None:
    src = tmp_path / "trajs"
    write_trajectories(src / "a.parquet", rollouts["faulty"])
    write_trajectories(src / "b.parquet", rollouts["oracle"])
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["attribute", "--trajectories", str(src), "--out", str(out), "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    frame = read_attribution_frame(out / "attributions.parquet")
    assert frame.height == len(rollouts["faulty"]) and set(frame["attributor"]) == {"heuristic"}
    assert "accuracy 100.0% (3/3 single-fault" in (out / "accuracy.md").read_text()
    assert "| planning |" in (out / "composition.md").read_text()
    assert (out / "composition.png").read_bytes()[:4] == b"\x89PNG"


def _text(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def test_cli_rejects_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["attribute", "--trajectories", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "does not exist" in _text(res.output)
    (tmp_path / "t").mkdir()
    res = runner.invoke(app, ["attribute", "--trajectories", str(tmp_path / "t"), "--out", str(tmp_path / "o"),
                              "--attributor", "judge"])
    assert res.exit_code == 2 and "judge:MODEL" in _text(res.output)
    assert not (tmp_path / "o").exists()


def harnesses_of(trajs: list[Trajectory]) -> list[Harness]:
    """The harnesses these cases ran under: each family's baseline, and the modified ones of the cases."""
    families = {t.family for t in trajs}
    candidates = [baseline(f) for f in families] + [c.harness(f) for c in CASES if c.harness for f in families]
    return [h for h in candidates if h.id in {t.harness_id for t in trajs}]


def test_stage_on_a_run_store(rollouts: dict[str, list[Trajectory]], tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs", "r1")
    for pair, trajs in (("base", rollouts["oracle"]), ("trained", rollouts["faulty"])):
        store.write_trajectories(f"eval-{pair}", "k0", trajs, harnesses=harnesses_of(trajs))
        store.mark_done("evaluate", pair, {"stage": f"eval-{pair}", "chunks": ["k0"]})
    config = AttributionConfig(base_pair="base", shifts=[("base", "trained")], bootstrap_samples=200)
    rec = attribute_run(store, config)
    assert rec.failing == {"base": 0, "trained": len(rollouts["faulty"])} and rec.reused == []
    trained = read_attribution_frame(rec.files["trained"])
    assert sorted(trained["category"]) == sorted(t.injected_faults[0].category for t in rollouts["faulty"])
    text = Path(rec.report_path).read_text()
    assert "## Failure composition" in text and "## Model-harness fit" in text and "| trained | overall |" in text
    again = attribute_run(store, config)
    assert again.reused == ["base", "trained"] and again.files == rec.files
    assert set(store.done("attribute")) == {"base", "trained"}
    with pytest.raises(ValueError, match="judge:MODEL"):
        AttributionConfig(attributor="judgement")
    with pytest.raises(ValueError, match="`judge` role"):
        attribute_run(store, AttributionConfig(attributor="judge"))
    assert pl.read_parquet(rec.files["base"]).height == 0
