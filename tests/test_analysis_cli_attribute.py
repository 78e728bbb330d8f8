"""`coevo attribute` on a directory of trajectories, and the round's `attribute` stage on a round's store."""

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
from flows.cli import app
from flows.config import AttributionConfig, parse_config
from flows.round.context import RoundContext, RoundState
from flows.round.eval import EvalRecord
from flows.round.stages import attribute, build_attributor
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


def _record(name: str, trajs: list[Trajectory]) -> EvalRecord:
    return EvalRecord(name=name, label=name, model="-", harness="baseline", split="test", stage=f"eval/{name}",
                      chunk_keys=["k0"], rollouts=len(trajs), rollouts_run=0, model_calls=0,
                      success=sum(t.passed for t in trajs) / len(trajs), cost_usd=0.0)


def test_the_rounds_attribute_stage_on_its_store(rollouts: dict[str, list[Trajectory]], tmp_path: Path) -> None:
    """M_t on h* (the oracle's passing rollouts) and a correction seed (the injected faults): each failing rollout
    gets its fault's category, the composition, trigger and fit sections are built, and a rerun reuses the files."""
    store = RunStore(tmp_path / "runs", "r0")
    tests = {}
    for name, trajs in (("M_t.hstar", rollouts["oracle"]), ("corr.s0.hstar", rollouts["faulty"])):
        store.write_trajectories(f"eval/{name}", "k0", trajs, harnesses=harnesses_of(trajs))
        tests[name] = _record(name, trajs)
    config = parse_config({"models": {"student": {"model": "oracle/{family}"}}, "attribution": {"bootstrap_samples": 200},
                           "evaluation": {"pairs": [{"model": "student"}]},
                           "round": {"stages": ["evaluate_pairs", "attribute", "report"]}})
    ctx = RoundContext(config=config, store=store, base=tmp_path,
                       state=RoundState(t=0, student_model="-", student_weights="", start_harness="baseline"))
    rec = attribute(ctx, tests)
    assert rec.attributor == "heuristic" and rec.failing == {"M_t.hstar": 0, "corr.hstar": len(rollouts["faulty"])}
    trained = read_attribution_frame(rec.files["corr.hstar"])
    assert sorted(trained["category"]) == sorted(t.injected_faults[0].category for t in rollouts["faulty"])
    assert [s.kind for s in rec.sections] == ["composition", "triggers", "fit"]
    assert {r["pair"] for r in rec.sections[2].rows} >= {"corr.hstar"}  # the fit of the arm against M_t on h*
    mtimes = {g: Path(f).stat().st_mtime_ns for g, f in rec.files.items()}
    again = attribute(ctx, tests)
    assert again.files == rec.files and {g: Path(f).stat().st_mtime_ns for g, f in again.files.items()} == mtimes
    assert pl.read_parquet(rec.files["M_t.hstar"]).height == 0
    with pytest.raises(ValueError, match="judge:MODEL"):
        AttributionConfig(attributor="judgement")
    with pytest.raises(ValueError, match="`judge` role"):
        build_attributor(AttributionConfig(attributor="judge"))
