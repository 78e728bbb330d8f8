"""The round report's pass@k, cost and campaign sections, its artifacts, and `coevo compare`, on real runs.

Real `coevo run`s (in process, under Prefect's test harness, on the session's Ray) of offline rounds: the
SIMULATED flawed student (`flawed/{family}@native`, and `@expert` in a second run) and the oracle expert, one
family, three test instances x two seeds. Then:
- the report has the pass@1 / pass@2 / pass^2 tables (numbers recomputed from the stored rollouts), the cost per
  row and per stage (model-seconds read back from the turn tables), both plots and the campaign, and the same
  tables are Prefect artifacts;
- `coevo compare` prints B - A on the shared units (recomputed by hand), writes it with --out, and refuses in one
  line a pair with no unit in common and a pair whose task suites differ (a run whose stored instance was edited).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import yaml

from agents.tables.trajectories import read_frame
from flows.store import RunStore
from tests.prefect_helpers import invoke, prefect_server

pytestmark = pytest.mark.slow
FAMILY = "payroll_audit"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module", autouse=True)
def prefect_harness() -> Iterator[None]:
    with prefect_server():
        yield


def _run(tmp: Path, name: str, student: str, stages: list[str], family: str = FAMILY, n: int = 3,
         seeds: int = 2) -> str:
    data = {"name": name, "runs_dir": str(tmp / "runs"),
            "models": {"student": {"model": student}, "expert": {"model": "oracle/{family}"}},
            "families": [family], "round": {"stages": stages, "search": {
                "seeds": 1, "budget_rollouts": 6, "minibatch_size": 2, "train_instances": 2, "val_instances": 2}},
            "evaluation": {"n_instances": n, "seeds": seeds, "bootstrap_samples": 200},
            "limits": {"max_turns": 30, "wall_s": 120}, "ray": {"num_cpus": 2, "actors": 2}}
    if "attribute" in stages:
        data["attribution"] = {}
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(data))
    before = set(_run_ids(tmp / "runs"))
    result = invoke(["run", "--config", str(cfg)])
    assert result.exit_code == 0, result.output[-3000:]
    (run_id,) = set(_run_ids(tmp / "runs")) - before
    return run_id


def _run_ids(runs: Path) -> list[str]:
    return sorted(p.name for p in runs.iterdir() if (p / "state.json").exists()) if runs.is_dir() else []


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> tuple[Path, str, str]:
    tmp = tmp_path_factory.mktemp("report")
    a = _run(tmp, "native", "flawed/{family}@native", ["evaluate_h0", "evolve", "evaluate_h_star", "attribute",
                                                          "report"])
    b = _run(tmp, "expertlike", "flawed/{family}@expert", ["evaluate_h0", "report"])
    return tmp / "runs", a, b


def _rows(md: str) -> dict[str, str]:
    return {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}


def _section(md: str, title: str) -> str:
    body = md.split(f"## {title}", 1)[1]
    return body.split("\n## ", 1)[0]


def test_the_report_has_pass_k_costs_plots_and_the_campaign(runs: tuple[Path, str, str]) -> None:
    root, a, _ = runs
    r0 = root / a / "rounds" / "r0"
    md = (r0 / "reports" / "report.md").read_text()
    student = read_frame(r0 / "trajectories" / "eval" / "M_t.h0")
    # pass@1 of a row is its success over the stored rollouts; pass^2 needs both seeds of an instance
    per_inst = student.group_by("instance_id").agg(pl.col("passed").cast(pl.Int64).sum().alias("c"))
    pass1, pass_hat2 = float(student["passed"].mean()), float((per_inst["c"] == 2).mean())
    pk = _section(md, "pass@1, pass@k and pass^k per family")
    assert f"| M_t on h0 | {100 * pass1:.1f} [" in pk.split("**pass@2**")[0]
    assert f"| M_t on h0 | {100 * pass_hat2:.1f} [" in pk.split("**pass^2**")[1]
    assert "| expert on h0 | 100.0 [100.0, 100.0] |" in pk
    # cost per stage: the evaluation stored 2 pairs x 3 instances x 2 seeds and its model calls took time
    stage = _rows(_section(md, "Cost and wall time per stage"))["evaluate_h0"].split("|")
    assert stage[2].strip() == "ran" and int(stage[6]) == 12 and float(stage[5]) > 0 and int(stage[7]) > 12
    assert "M_t on h0" in _section(md, "Cost per row (test split)")
    for png in ("family_success.png", "cost_vs_success.png", "campaign.png"):
        assert f"]({png})" in md and (r0 / "reports" / png).read_bytes()[:8] == PNG
    campaign = _section(md, "Campaign: round r0 (the first of this run)")
    assert f"| r0 | {FAMILY} | {100 * pass1:.1f} ± " in campaign
    record = RunStore.open_existing(root / a / "rounds", "r0").done("round")["report"]["output"]
    assert {r["metric"] for r in record["pass_k"]} == {"pass@1", "pass@k", "pass^k"} and record["row_costs"]

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        keys = {x.key for x in client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(
            like_=a.lower()[:15])))}
    slug_id = a.lower()
    assert {f"round-report-{slug_id}-r0", f"round-pass-k-{slug_id}-r0", f"round-row-costs-{slug_id}-r0",
            f"round-plot-{slug_id}-r0-cost-vs-success", f"round-plot-{slug_id}-r0-campaign"} <= keys, keys


def test_compare_prints_paired_differences_on_shared_units(runs: tuple[Path, str, str], tmp_path: Path) -> None:
    root, a, b = runs
    out = tmp_path / "diff.md"
    result = invoke(["compare", a, str(root / b), "--runs-dir", str(root), "--out", str(out), "--bootstrap", "500"])
    assert result.exit_code == 0, result.output
    mean = {r: float(read_frame(root / r / "rounds" / "r0" / "trajectories" / "eval" / "M_t.h0")["passed"].mean())
            for r in (a, b)}
    rows = _rows(out.read_text())
    assert rows["M_t.h0"].startswith(f"| M_t.h0 | {FAMILY} | {100 * mean[a]:.1f} | {100 * mean[b]:.1f} | "
                                     f"{100 * (mean[b] - mean[a]):+.1f} | [")
    assert "| 6 (3 instances) |" in rows["M_t.h0"] and "expert.h0" in rows
    assert "M_t.hstar" not in rows  # only run A evaluated h*
    assert "3 instances in common" in " ".join(result.output.split())


def test_compare_refuses_no_shared_unit_and_a_different_suite(runs: tuple[Path, str, str], tmp_path: Path) -> None:
    root, a, b = runs
    other = _run(tmp_path, "otherfam", "flawed/{family}@native", ["evaluate_h0", "report"], family="stock_alert",
                 n=1, seeds=1)
    apart = invoke(["compare", a, str(tmp_path / "runs" / other), "--runs-dir", str(root)])
    assert apart.exit_code == 2 and len(apart.output.strip().splitlines()) == 1, apart.output
    assert "share no (instance, seed) units" in apart.output

    # a copy of run B (named by its directory) with one instance's stored content edited, as a changed task
    # generator would have written it
    edited = tmp_path / "copy" / b
    shutil.copytree(root / b, edited)
    target = f"{FAMILY}/40"
    for path in (edited / "rounds" / "r0" / "trajectories").rglob("*.parquet"):
        if path.name.endswith(".turns.parquet"):
            continue
        frame = pl.read_parquet(path)
        inst = frame["instance_json"].map_elements(
            lambda j: json.dumps({**json.loads(j), "instruction": "changed"}) if json.loads(j)["id"] == target else j,
            return_dtype=pl.String())
        frame.with_columns(inst.alias("instance_json")).write_parquet(path)
    refused = invoke(["compare", a, str(edited), "--runs-dir", str(root)])
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert "ran different task suites" in refused.output and f"e.g. {target}" in refused.output
    assert invoke(["compare", a, "no-such-run", "--runs-dir", str(root)]).exit_code == 2
