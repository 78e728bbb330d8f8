"""Evaluating pairs under Prefect's test harness, against the real tiny model on vLLM CPU: a config without
`round:` is the round [evaluate_pairs, report] (its `evaluation.pairs` side by side).

- fault once after `evaluate_pairs` stored its rollouts -> the run fails -> `coevo run --resume` finishes it
  without re-running them (counted with the vLLM server's own request counter), then the report and artifacts;
- the run's own vLLM server is killed in the middle of the stage's rollouts -> the server scope restarts it
  once and runs the stage again, every job has exactly one trajectory;
- the round's evaluation stages copy a rollout an earlier stage (or the search) ran instead of re-running it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import yaml

from agents.tables.trajectories import read_frame
from deploy.vllm_server import free_port, is_ready
from flows.config import parse_config
from flows.store import RunStore
from tests.prefect_helpers import invoke, prefect_server, reset_prefect_logging, vllm_requests

pytestmark = pytest.mark.vllm
FAMILIES = ["payroll_audit", "anomaly_detection"]  # quick environments; the flow is the subject here


@pytest.fixture(scope="module", autouse=True)
def prefect_harness() -> Iterator[None]:
    with prefect_server():
        yield


@pytest.fixture(autouse=True)
def fresh_prefect_logging() -> Iterator[None]:
    reset_prefect_logging()
    yield


def _config(tmp_path: Path, api_base: str, **extra: object) -> dict:
    return {
        "name": "flowtest",
        "runs_dir": str(tmp_path / "runs"),
        "models": {"student": {"model": "hosted_vllm/tiny", "api_base": api_base, "max_tokens": 32},
                   "expert": {"model": "oracle/{family}"}},
        "families": FAMILIES,
        "evaluation": {"n_instances": 2, "seeds": 2, "bootstrap_samples": 200,
                       "pairs": [{"model": "student", "tool_choice": "required"}, {"model": "expert"}]},
        "limits": {"max_turns": 5, "max_tokens_per_turn": 32, "wall_s": 120},  # the oracle needs 5 on anomaly_detection
        "ray": {"num_cpus": 2, "actors": 2},
        **extra,
    }


def _pair_files(run: Path, pair: str) -> list[Path]:
    """The stored rollouts of one configured pair (one file each; every chunk has its turn table beside it)."""
    return sorted(p for p in (run / "rounds" / "r0" / "trajectories" / "eval" / f"pairs.{pair}").glob("*.parquet")
                  if not p.name.endswith(".turns.parquet"))


def test_fault_in_evaluate_then_resume_reuses_rollouts(tmp_path: Path, vllm_server: str, ray_local: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(tmp_path, vllm_server)))
    monkeypatch.setenv("COEVO_TEST_FAULT", "evaluate_pairs")
    before = vllm_requests(vllm_server)
    first = invoke(["run", "--config", str(cfg_path)])
    assert first.exit_code == 1, first.output
    assert "injected fault" in first.output and "--resume" in first.output
    (run_id,) = os.listdir(tmp_path / "runs")
    run = tmp_path / "runs" / run_id
    student_files, expert_files = _pair_files(run, "student"), _pair_files(run, "expert")
    jobs = len(FAMILIES) * 2 * 2
    assert len(student_files) == len(expert_files) == jobs  # every rollout was stored before the fault
    assert "evaluate_pairs" not in RunStore(run / "rounds", "r0").done("round")  # the stage is not recorded done
    after_first = vllm_requests(vllm_server)
    student = read_frame(run / "rounds" / "r0" / "trajectories" / "eval" / "pairs.student")
    assert after_first - before == student["n_turns"].sum() > 0  # one vLLM request per student turn
    mtimes = {f: f.stat().st_mtime_ns for f in student_files}

    resumed = invoke(["run", "--resume", run_id, "--runs-dir", str(tmp_path / "runs")])
    assert resumed.exit_code == 0, resumed.output
    assert vllm_requests(vllm_server) == after_first  # no student rollout ran again
    assert {f: f.stat().st_mtime_ns for f in student_files} == mtimes
    assert set(RunStore(run / "rounds", "r0").done("round")) == {"evaluate_pairs", "report"}

    # every number in the report comes from the stored trajectories
    report = run / "rounds" / "r0" / "reports" / "report.md"
    assert str(report.resolve()) in resumed.output.replace("\n", "")
    main = report.read_text().split("## Main table", 1)[1].split("\n## ", 1)[0]  # later tables repeat the row labels
    rows = {line.split("|")[1].strip(): line for line in main.splitlines() if line.startswith("| ")}
    expert = read_frame(run / "rounds" / "r0" / "trajectories" / "eval" / "pairs.expert")
    assert student.height == expert.height == jobs and student["id"].n_unique() == jobs
    assert rows["student"].rstrip().endswith(f"| {overall_cell(student)} |")
    assert rows["expert"].rstrip().endswith(f"| {overall_cell(expert)} |")
    assert "M_t on h0" not in rows  # the round's own rows did not run: only the configured pairs are listed

    # Prefect artifacts: the stage's record, the round's page, the run's progress
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        keys = {a.key for a in client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=run_id.lower()[:8])))}
    slug_id = run_id.lower()
    assert {f"round-{slug_id}-r0-evaluate-pairs", f"round-report-{slug_id}-r0", f"round-progress-{slug_id}"} <= keys

    # `coevo report RUN_ID` names the round's page
    again = invoke(["report", run_id, "--runs-dir", str(tmp_path / "runs")])
    assert again.exit_code == 0, again.output
    assert "report.md" in again.output and "--from-stage report" in " ".join(again.output.split())
    assert "code: commit " in again.output or "code: not a git checkout" in again.output  # runs/<id>/code.json


def overall_cell(frame: pl.DataFrame) -> str:
    """The report's overall cell recomputed by hand: per seed the mean of family rates, then mean ± SEM."""
    per_seed = []
    for seed in sorted(set(frame["seed"])):
        rows = frame.filter(pl.col("seed") == seed)
        fams = sorted(set(rows["family"]))
        per_seed.append(statistics.mean(rows.filter(pl.col("family") == f)["passed"].mean() for f in fams))
    sem = statistics.stdev(per_seed) / math.sqrt(len(per_seed))
    return f"{100 * statistics.mean(per_seed):.1f} ± {100 * sem:.1f}"


def _kill_when_first_chunk_lands(runs_dir: Path, port: int, killed: list[int], stop: threading.Event) -> None:
    """Wait for the first stored student rollout, then SIGKILL the run's vLLM server (its whole process group)."""
    while not stop.is_set():
        chunks = [p for p in runs_dir.glob("*/rounds/r0/trajectories/eval/pairs.student/*.parquet")
                  if not p.name.endswith(".turns.parquet")]
        states = list(runs_dir.glob(f"*/rounds/r0/logs/servers/{port}.json"))
        if chunks and states:
            pid = json.loads(states[0].read_text())["pid"]
            os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.1)


def test_server_killed_mid_collect_is_restarted_and_no_job_is_lost(tmp_path: Path, tiny_model_dir: Path,
                                                                   ray_local: None) -> None:
    from flows.round.flow import coevolution_run
    from flows.store import new_run_id

    port = free_port()
    api_base = f"http://127.0.0.1:{port}/v1"
    raw = _config(tmp_path, api_base)
    raw["servers"] = [{"model": str(tiny_model_dir), "name": "tiny", "port": port, "max_model_len": 4096,
                       "max_lora_rank": 8, "max_loras": 1}]
    raw["evaluation"]["pairs"] = [{"model": "student", "tool_choice": "required"}]
    raw["evaluation"]["n_instances"] = 3
    raw["limits"]["max_turns"] = 3
    # one episode at a time, in job order: the first rollout lands while eleven are still to run
    raw["ray"] = {"num_cpus": 2, "actors": 1, "concurrency_per_server": 1}
    config = parse_config(raw)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_when_first_chunk_lands, args=(tmp_path / "runs", port, killed, stop), daemon=True)
    killer.start()
    try:
        result = coevolution_run(config, new_run_id(config.name), base_dir=str(tmp_path))
    finally:
        stop.set()
    assert killed, "the server was never killed (the stage finished before the first rollout was seen)"
    (done,) = result.rounds
    # the server scope found the server dead when the stage failed, restarted it once and ran the stage again
    assert [(r["server"], r["stage"]) for r in done.server_restarts] == [("tiny", "evaluate_pairs")]
    frame = read_frame(Path(result.run_dir) / "rounds" / "r0" / "trajectories" / "eval" / "pairs.student")
    jobs = len(FAMILIES) * 3 * 2
    assert frame.height == jobs and frame["id"].n_unique() == jobs
    assert frame.filter(pl.col("stop_reason").is_in(["model_error", "error"])).is_empty()
    assert not is_ready(api_base)  # the restarted server belongs to the run and was stopped at its end


async def test_a_rollout_an_earlier_stage_of_the_round_ran_is_copied_not_rerun(tmp_path: Path) -> None:
    """M_t on h* when the search kept h0: the same job keys as M_t on h0, so the stored rollouts are copied."""
    from agents.records import ModelRole
    from agents.rollout import run_episode
    from flows.plan import RolloutSpec, plan
    from flows.round.eval import per_rollout, reuse_earlier
    from flows.store import RunStore
    from harness import baseline
    import tasks

    store = RunStore(tmp_path, "r0")
    role = ModelRole(model="oracle/{family}")
    chunks = {name: per_rollout(plan(RolloutSpec(name=name, model=role, families=["stock_alert"], split="test",
                                                 n_instances=2, seeds=1, stage=f"eval/{name}"), tmp_path))
              for name in ("M_t.h0", "M_t.hstar")}
    for c in chunks["M_t.h0"]:  # evaluate_h0 ran these
        job = c.jobs[0]
        env = tasks.make_env(job.instance)
        try:
            t = await run_episode(job.model, job.harness, env, job.seed, job.limits, tag=job.tag)
        finally:
            env.close()
        store.write_trajectories(c.stage, c.key, [t.model_copy(update={"id": job.key})], harnesses=[baseline("stock_alert")])
    assert [c.key for c in chunks["M_t.h0"]] == [c.key for c in chunks["M_t.hstar"]]
    assert reuse_earlier(store, chunks["M_t.hstar"]) == 2
    assert all(store.has(c.stage, c.key) for c in chunks["M_t.hstar"])
    assert store.read_chunks("eval/M_t.hstar", [c.key for c in chunks["M_t.hstar"]]) == \
        store.read_chunks("eval/M_t.h0", [c.key for c in chunks["M_t.h0"]])
    assert reuse_earlier(store, chunks["M_t.hstar"]) == 0  # nothing left to copy


def test_the_gates_validation_rollouts_the_search_ran_are_copied_not_rerun(tmp_path: Path, ray_local: None) -> None:
    """The search evaluated h on the first validation instances (seed 0); the gate's M_t-on-h* pair plans the same
    jobs under its own tag: they are copied from the search's store, with the gate's job key and tag."""
    from agents.jobs import Limits
    from agents.pool.driver import RolloutPool
    from agents.records import ModelRole
    from flows.evolution_pool import PoolEvaluator, search_stage
    from flows.plan import RolloutSpec, plan
    from flows.round.eval import per_rollout, reuse_search
    from flows.store import RunStore
    from harness import baseline
    from harness.evolution.protocols import items_for
    import tasks

    family, limits = "stock_alert", Limits(max_turns=40, wall_s=120)
    store = RunStore(tmp_path, "r0")
    role = ModelRole(model="oracle/{family}")
    search_role = role.model_copy(update={"model": f"oracle/{family}"})  # the search formats its role per family
    with RolloutPool(1) as pool:
        PoolEvaluator(pool, search_role, limits, store, search_stage(family))(
            baseline(family), items_for(tasks.instances(family, "val", 2), range(1)))
    gate = per_rollout(plan(RolloutSpec(name="val.M_t.hstar", model=role, families=[family], split="val",
                                        n_instances=2, seeds=1, limits=limits, tag="gate",
                                        stage="eval/val.M_t.hstar"), tmp_path))
    other_seed = per_rollout(plan(RolloutSpec(name="val.M_t.s1", model=role, families=[family], split="val",
                                              n_instances=2, seeds=2, limits=limits, tag="gate",
                                              stage="eval/val.M_t.s1"), tmp_path))
    assert reuse_search(store, gate) == 2
    copied = store.read_chunks("eval/val.M_t.hstar", [c.key for c in gate])
    assert [(t.id, t.tag, t.instance.id, t.seed) for t in copied] == \
        [(c.jobs[0].key, "gate", c.jobs[0].instance.id, 0) for c in gate]
    assert all(t.verdict.passed for t in copied)  # the oracle's real rollouts, not placeholders
    assert reuse_search(store, gate) == 0  # nothing left to copy
    # seed 1 was never run by the search: only the seed-0 jobs are found
    assert reuse_search(store, other_seed) == 2 and sum(store.has(c.stage, c.key) for c in other_seed) == 2
