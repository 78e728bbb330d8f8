"""The nightly evaluation over the promotion registry: real evaluation runs of offline (SIMULATED) students.

Night 1 evaluates the promoted `flawed/{family}@expert` student under its harness; night 2 the family's
pair is a much worse student (`@native+finish_early=1`, which stops at its first turn), whose previous night is given night 1's measured score (the same served
student with worse weights tonight): the regression is flagged in the report, the registry and the exit
status (`coevo nightly` exits 3; the flow itself fails when `fail_on_regression`), and night 2's report links to
its comparison with night 1 on the units both ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.tables.trajectories import read_frame
from flows.ops.nightly import MIN_DROP, regressed
from flows.ops.registry import NightlyScore, Promotion, PromotionRegistry
from harness import baseline
from tests.ops_helpers import FAMILY, child_env, coevo, small_config
from tests.prefect_helpers import prefect_server


WORSE = f"flawed/{FAMILY}@native+finish_early=1"  # the native profile that always stops at its first turn


def _promote(reg: PromotionRegistry, student: str, harness: Path, round_: int) -> Promotion:
    h = baseline(FAMILY)
    h.dump(harness)
    p = Promotion(family=FAMILY, student=student, harness_id=h.id, harness_path=str(harness), run_id=f"seed-r{round_}",
                  round=round_, evidence={"seeded_by": "test"})
    reg.promote(p)
    return p


def test_regression_rule_is_a_drop_beyond_noise_and_five_points() -> None:
    assert regressed(1.0, 10, 0.0, 2) == (True, MIN_DROP)
    assert not regressed(0.80, 60, 0.78, 60)[0]  # 2 points: within the 5-point floor
    bad, threshold = regressed(0.5, 20, 0.35, 20)  # 15 points, but SE at n=20 is ~0.157 -> allowed ~0.26
    assert not bad and 0.25 < threshold < 0.27
    assert regressed(0.5, 600, 0.35, 600)[0]  # the same drop over 600 rollouts is real


@pytest.mark.slow
def test_nightly_twice_flags_the_worse_student(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    reg = PromotionRegistry.under(runs)
    env = child_env(tmp_path / "prefect")
    config = small_config(tmp_path)
    good = _promote(reg, f"flawed/{FAMILY}@expert", tmp_path / "h_star.yaml", 1)
    first = coevo(["nightly", "--runs-dir", str(runs), "--config", str(config), "--night", "2026-11-30"], env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "first night" in first.stdout and "(SIMULATED)" in first.stdout
    [night1] = reg.nightly(FAMILY)
    assert night1.student == good.student and night1.n == 2 and night1.run_id == f"nightly-2026-11-30-{FAMILY}"
    assert night1.mean > MIN_DROP  # the expert profile solves these instances

    worse = _promote(reg, WORSE, tmp_path / "h_star.yaml", 2)
    reg.record_nightly(NightlyScore(family=FAMILY, student=worse.student, harness_id=worse.harness_id,
                                    run_id=night1.run_id, night="2026-11-30", mean=night1.mean, n=night1.n))
    second = coevo(["nightly", "--runs-dir", str(runs), "--config", str(config), "--night", "2026-12-01"], env)
    assert second.returncode == 3, second.stdout[-2000:] + second.stderr[-3000:]
    assert "REGRESSION" in second.stdout
    report = json.loads((runs / "nightly" / "2026-12-01.json").read_text())
    [row] = report["pairs"]
    assert row["regression"] and row["previous_mean"] == night1.mean and row["student"] == worse.student
    assert row["mean"] < night1.mean - MIN_DROP
    assert f"Regressions: {FAMILY}" in (runs / "nightly" / "2026-12-01.md").read_text()
    # each night links to the comparison with the family's previous night (what `coevo compare` prints)
    [link] = report["links"]
    assert link["previous_night"] == "2026-11-30" and link["previous_run"] == night1.run_id and link["units"] == 2
    passed = {r: float(read_frame(runs / r / "rounds" / "r0" / "trajectories" / "eval" / "pairs.promoted")["passed"]
                       .mean()) for r in (night1.run_id, row["run_id"])}
    assert link["diff"] < 0 and link["diff"] == pytest.approx(passed[row["run_id"]] - passed[night1.run_id])
    night_md = (runs / "nightly" / "2026-12-01.md").read_text()
    assert "## Compared with the previous night" in night_md and "(2026-12-01-compare.md)" in night_md
    compared = (runs / "nightly" / "2026-12-01-compare.md").read_text()
    assert f"coevo compare {night1.run_id} nightly-2026-12-01-{FAMILY}" in compared and "| pairs.promoted |" in compared
    first_links = json.loads((runs / "nightly" / "2026-11-30.json").read_text())["links"]
    assert [k["why_not"] for k in first_links] == ["first night: nothing to compare with"]
    assert [s.night for s in reg.nightly(FAMILY)] == ["2026-11-30", "2026-11-30", "2026-12-01"]


@pytest.mark.slow
def test_the_flow_fails_on_a_regression_after_recording(tmp_path: Path) -> None:
    from flows.ops.nightly import NightlyRegression, nightly_evaluation

    runs = tmp_path / "runs"
    reg = PromotionRegistry.under(runs)
    worse = _promote(reg, WORSE, tmp_path / "h.yaml", 1)
    reg.record_nightly(NightlyScore(family=FAMILY, student=worse.student, harness_id=worse.harness_id,
                                    run_id="earlier", night="2026-11-30", mean=1.0, n=10))
    with prefect_server(), pytest.raises(NightlyRegression, match=FAMILY):
        nightly_evaluation(runs_dir=str(runs), config_path=str(small_config(tmp_path)), night="2026-12-01")
    assert reg.nightly(FAMILY)[-1].night == "2026-12-01"  # recorded before failing
    assert (runs / "nightly" / "2026-12-01.md").exists()


def test_nightly_bad_input_is_one_line_naming_the_option(tmp_path: Path) -> None:
    env = child_env(tmp_path / "prefect")
    (tmp_path / "runs").mkdir()
    cases = [(["--runs-dir", str(tmp_path / "no-such-dir")], "--runs-dir"),
             (["--runs-dir", str(tmp_path / "runs"), "--config", str(tmp_path / "missing.yaml")], "--config"),
             (["--runs-dir", str(tmp_path / "runs"), "--night", "../etc"], "--night")]
    for args, option in cases:
        done = coevo(["nightly", *args], env, timeout=120)
        assert done.returncode == 2, done.stderr
        assert option in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "no-such-dir").exists()
    assert list((tmp_path / "runs").iterdir()) == []  # nothing written on bad input
