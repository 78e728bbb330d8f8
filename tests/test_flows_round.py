"""The co-evolution round (flows/round/flow.py) end to end on the real tiny model served by vLLM CPU.

- one tiny round (1 family, 2 test instances, 1 seed, a 6-evaluation search, 1 training seed, 1 LoRA step per
  arm) through `coevo run`: every stage ran, the report's main table has every row, the registry holds the gate's
  decision with its evidence; `--resume` of the finished run skips every stage and sends the server no request;
  `--from-stage attribute` recomputes attribute, gate and report and nothing before;
- a stage past `round.stage_timeout_s` fails the run with its name and limit, keeps the finished stages, and
  `--resume` with the limit raised finishes without recomputing them;
- the run lock: a second writer gets one line naming the holder and exit code 2;
- `--dry-run` of the shipped round configs starts nothing and passes;
- two rounds on the run's own vLLM server: round 1 starts from round 0's promoted pair (the merged student-r1, h*_0),
  searches again, and its report shows h*_1 against h*_0 (the diff), M_1 on h*_1 vs h*_0 and its own gate;
- the `self` arm is exactly the own-success rows of the correction set.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agents.tables.trajectories import read_frame
from flows.ops.registry import PromotionRegistry
from flows.round.lock import LOCK_FILE, LockHeld, RunLock
from flows.round.train import _step_progress
from flows.round.config import DEFAULT_STAGES, RoundConfig
from flows.store import RunStore, list_runs
from tests.prefect_helpers import invoke, prefect_server, reset_prefect_logging, vllm_requests
from training.lora import SUMMARY_FILE, StepLog, TrainSummary

REPO = Path(__file__).resolve().parents[1]
FAMILY = "anomaly_detection"  # a quick environment; the oracle needs 5 turns


def round_config(tmp_path: Path, api_base: str, weights: Path) -> dict:
    return {
        "name": "roundtest",
        "runs_dir": str(tmp_path / "runs"),
        "models": {"student": {"model": "hosted_vllm/tiny", "api_base": api_base, "max_tokens": 32},
                   "expert": {"model": "flawed/{family}@expert"}},
        "families": [FAMILY],
        "evaluation": {"n_instances": 2, "seeds": 1, "bootstrap_samples": 200},
        "limits": {"max_turns": 8, "max_tokens_per_turn": 32, "wall_s": 120},
        "ray": {"num_cpus": 2, "actors": 2},
        "attribution": {"attributor": "heuristic"},
        "round": {
            "student_weights": str(weights),
            "index": os.getpid() % 100_000,  # the session server outlives the test: adapter names no run loaded
            "search": {"seeds": 1, "budget_rollouts": 6, "minibatch_size": 2, "train_instances": 2, "val_instances": 2},
            "data": {"instances": 2, "expert_seeds": 1, "student_samples": 1, "corrections": 4, "self_successes": 2},
            "correction": {"n": 2, "replays": 1, "extra_turns": 8},
            "gate": {"val_instances": 2, "val_seeds": 1, "bootstrap_samples": 200},
        },
        "lora": {"rank": 8, "epochs": 1, "lr": 1e-3, "seeds": 1, "effective_batch": 8},
        "length": {"max_len": 8192},
    }


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def prefect_harness() -> Iterator[None]:
    with prefect_server():
        reset_prefect_logging()
        yield


def _round_state(runs: Path, run_id: str, t: int) -> dict:
    return RunStore.open_existing(runs / run_id / "rounds", f"r{t}").done("round")


@pytest.mark.vllm
def test_round_end_to_end_then_resume_skips_and_from_stage_recomputes(
        tmp_path: Path, vllm_server: str, tiny_model_dir: Path, ray_local: None, one_torch_thread: None,
        prefect_harness: None) -> None:
    raw = round_config(tmp_path, vllm_server, tiny_model_dir)
    t = raw["round"]["index"]
    cfg = tmp_path / "round.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    t0 = time.monotonic()
    result = invoke(["run", "--config", str(cfg), "--rounds", "1"])
    first_s = time.monotonic() - t0
    assert result.exit_code == 0, result.output
    runs = tmp_path / "runs"
    (run_id,) = list_runs(runs)
    state = _round_state(runs, run_id, t)
    assert set(state) == set(DEFAULT_STAGES)  # every stage ran and recorded its output
    report = (runs / run_id / "rounds" / f"r{t}" / "reports" / "report.md").read_text()
    for row in ("M_t on h0", "M_t on h*", "expert on h0", "expert on h*", "imitation on h0", "imitation on h*",
                "correction on h*", "self-training on h*"):
        assert f"| {row} |" in report, row
    assert "| M_t on h*_{t-1} |" not in report  # round 0 starts from h0: no earlier h*
    assert "correction vs self-training (corr h* - self h*" in report
    assert "## Promotion gate" in report and "SIMULATED" in report and "## Cost and wall time per stage" in report
    assert "- code: commit " in report or "- code: not a git checkout" in report  # runs/<id>/code.json
    (decision,) = PromotionRegistry.under(runs).decisions(run_id)
    assert decision.round == t and decision.reason.startswith(("PROMOTED", "NOT PROMOTED"))
    gate = state["gate"]["output"]
    if gate["candidate"]:  # a correction adapter was trained: the decision carries the validation and fit numbers
        assert decision.evidence["val"] and decision.evidence["diff"]["n_units"] > 0 and decision.evidence["fit"]
        # judged on the val instances after the search's 2 (val 22-23), never on the ones that chose h*
        assert gate["instances"] == {"search's per family": 2, "gate's per family": 2, "seed chosen on": 0,
                                     "judged on": 2}
        val_ids = set(read_frame(runs / run_id / "rounds" / f"r{t}" / "trajectories" / "eval" / "val.M_t.hstar")[
            "instance_id"])
        assert val_ids == {f"{FAMILY}/22", f"{FAMILY}/23"}
        assert gate["fit"]["n_base"] == 2  # the fit alarm read M_t's validation rollouts, not the test ones
        cand, base = gate["val"][f"val.corr.s{gate['best_seed']}.hstar"], gate["val"]["val.M_t.hstar"]
        assert gate["promoted"] or cand <= base or gate["fit_flag"] or gate["diff"]["ci_high"] < 0
        if cand <= base:  # the default rule promotes only a gain
            assert not gate["promoted"] and decision.reason.startswith("NOT PROMOTED: no gain")
    else:  # e.g. the random tiny student carries no correction forward: none kept, no adapter trained
        assert "no correction adapter" in decision.reason
    assert gate["promoted"] == decision.promoted
    if decision.promoted:
        assert (Path(gate["merged_dir"]) / "model.safetensors").exists()
        assert PromotionRegistry.under(runs).current(FAMILY)[0].run_id == run_id
    trained = state["train"]["output"]["arms"]
    assert any(a["adapters"] for a in trained.values()), trained  # at least one arm trained an adapter

    # resume of the finished run: every stage skipped, no request reaches the server
    requests = vllm_requests(vllm_server)
    again = invoke(["run", "--resume", run_id, "--runs-dir", str(runs)])
    assert again.exit_code == 0, again.output
    assert vllm_requests(vllm_server) == requests
    assert _round_state(runs, run_id, t) == state

    # --from-stage attribute: attribute, gate and report recompute; the stages before them are kept as they were
    forced = invoke(["run", "--resume", run_id, "--runs-dir", str(runs), "--from-stage", "attribute"])
    assert forced.exit_code == 0, forced.output
    after = _round_state(runs, run_id, t)
    for name in DEFAULT_STAGES[:DEFAULT_STAGES.index("attribute")]:
        assert after[name] == state[name], name
    for name in ("attribute", "gate", "report"):
        assert after[name]["at"] > state[name]["at"], name
    assert any((runs / run_id / "rounds" / f"r{t}" / "superseded").iterdir())
    print(f"round test: first run {first_s:.0f} s")  # noqa: T201 - the figure docs/flows.md quotes


@pytest.mark.vllm
def test_an_evaluation_only_round_runs_its_stages_and_nothing_else(
        tmp_path: Path, vllm_server: str, tiny_model_dir: Path, ray_local: None, prefect_harness: None) -> None:
    """`round.stages: [evaluate_h0, attribute, report]` (deploy/configs/local_eval.yaml's shape): M_t and the expert on
    h0, attributed and reported; no search, data, training or gate, and a second round is not started."""
    raw = round_config(tmp_path, vllm_server, tiny_model_dir)
    raw["round"]["stages"] = ["evaluate_h0", "attribute", "report"]
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    result = invoke(["run", "--config", str(cfg), "--rounds", "2"])
    assert result.exit_code == 0, result.output
    assert "runs only evaluate_h0, attribute, report" in " ".join(result.output.split())
    runs = tmp_path / "runs"
    (run_id,) = list_runs(runs)
    t = raw["round"]["index"]
    assert set(_round_state(runs, run_id, t)) == {"evaluate_h0", "attribute", "report"}
    assert not (runs / run_id / "rounds" / f"r{t + 1}").exists()
    r0 = runs / run_id / "rounds" / f"r{t}"
    assert not (r0 / "adapters").exists() or not any((r0 / "adapters").iterdir())
    report = (r0 / "reports" / "report.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if line.startswith("| ")}
    assert re.search(r"\| \d+\.\d", rows["M_t on h0"]) and re.search(r"\| \d+\.\d", rows["expert on h0"])  # evaluated
    assert rows["M_t on h*"].count("–") == 2 and rows["correction on h*"].count("–") == 2  # not run: one per column
    assert "the harness search did not run" in report and "the gate has not run" in report
    assert "library reflector" not in report  # no search: no note about it


@pytest.mark.vllm
def test_an_imitation_round_without_a_search_trains_on_the_start_harness(
        tmp_path: Path, vllm_server: str, tiny_model_dir: Path, ray_local: None, one_torch_thread: None,
        prefect_harness: None) -> None:
    """deploy/configs/local_train.yaml's shape: [evaluate_h0, arm_data, train, evaluate_arms, report] with arms
    [imit_h0]. No `evolve`: h*_t is the start harness (h0); the set is built from the TRAIN split only, LoRA trains
    once, the adapter is served and evaluated on h0, and the report's imitation row is filled."""
    raw = round_config(tmp_path, vllm_server, tiny_model_dir)
    raw["round"] |= {"stages": ["evaluate_h0", "arm_data", "train", "evaluate_arms", "report"], "arms": ["imit_h0"]}
    cfg = tmp_path / "imit.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    result = invoke(["run", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    runs, t = tmp_path / "runs", raw["round"]["index"]
    (run_id,) = list_runs(runs)
    state = _round_state(runs, run_id, t)
    assert set(state) == {"evaluate_h0", "arm_data", "train", "evaluate_arms", "report"}
    r0 = runs / run_id / "rounds" / f"r{t}"
    assert not (r0 / "evolution").exists() and not (r0 / "h_star").exists()  # no search ran
    arm_set = state["arm_data"]["output"]["sets"]["imit_h0"]
    assert arm_set["harness"] == "baseline" and arm_set["rows"] > 0, arm_set
    rows = read_frame(r0 / "trajectories" / "sets" / "imit_h0")
    assert rows.height == arm_set["rows"] and set(rows["split"]) == {"train"}  # never the test split it is scored on
    (adapter,) = state["train"]["output"]["arms"]["imit_h0"]["adapters"].values()
    assert (Path(adapter) / "adapter_model.safetensors").stat().st_size > 0
    assert set(state["evaluate_arms"]["output"]["pairs"]) == {"imit_h0.s0.h0"}
    report = (r0 / "reports" / "report.md").read_text()
    rows_md = {line.split("|")[1].strip(): line for line in report.splitlines() if line.startswith("| ")}
    assert re.search(r"\| \d+\.\d", rows_md["imitation on h0"]), rows_md["imitation on h0"]
    assert rows_md["imitation on h*"].count("–") == 2  # the h* arms did not run


def _run_stopped(tmp_path: Path, raw: dict, exit_code: int) -> tuple[str, str, dict, Path]:
    """Run the config, which must stop with `exit_code`, name how to resume and release its lock.
    Returns (run id, the output on one line, the round's stage records, the config file)."""
    cfg = tmp_path / "round.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    result = invoke(["run", "--config", str(cfg)])
    assert result.exit_code == exit_code, result.output
    (run_id,) = list_runs(tmp_path / "runs")
    text = " ".join(result.output.split())
    assert f"coevo run --resume {run_id}" in text
    assert not (tmp_path / "runs" / run_id / LOCK_FILE).exists()  # the lock is released: resumable
    return run_id, text, _round_state(tmp_path / "runs", run_id, raw["round"]["index"]), cfg


@pytest.mark.vllm
def test_spent_budget_stops_the_round_cleanly_and_resumably(tmp_path: Path, vllm_server: str, tiny_model_dir: Path,
                                                            ray_local: None, prefect_harness: None) -> None:
    raw = round_config(tmp_path, vllm_server, tiny_model_dir)
    raw["models"]["student"]["input_cost_per_token"] = 1e-3  # priced like an API role: the first stage spends it
    raw["round"]["budget_usd"] = 0.01
    _, text, state, _ = _run_stopped(tmp_path, raw, exit_code=3)
    assert "API budget $0.01 spent" in text
    assert set(state) == {"evaluate_h0"} and state["evaluate_h0"]["cost_usd"] > 0.01  # stopped before `evolve`


@pytest.mark.vllm
def test_a_stage_past_its_timeout_fails_the_run_and_keeps_finished_stages(
        tmp_path: Path, vllm_server: str, tiny_model_dir: Path, ray_local: None, prefect_harness: None) -> None:
    raw = round_config(tmp_path, vllm_server, tiny_model_dir)
    raw["round"]["stage_timeout_s"] = {"evolve": 1}  # a 6-evaluation search on vLLM takes longer than 1 s
    # and this round's LoRA runs under `accelerate launch`, 2 CPU processes (DDP over gloo), as on a GPU node
    raw["round"]["accelerate_config"] = str(REPO / "deploy" / "accelerate" / "cpu_ddp.yaml")
    raw["lora"]["effective_batch"] = 2  # 2 processes x 1: the 2-instance sets make full batches
    run_id, text, state, cfg = _run_stopped(tmp_path, raw, exit_code=1)
    assert "StageTimeout" in text and "stage evolve passed its limit of 1 s (round.stage_timeout_s.evolve)" in text
    assert set(state) == {"evaluate_h0"}  # the finished stage is kept; the timed-out one is not recorded as done

    # the limit raised in the config, then --resume: nothing recomputed before the stage that timed out
    raw["round"]["stage_timeout_s"] = {"evolve": 3600}
    cfg.write_text(yaml.safe_dump(raw))
    again = invoke(["run", "--resume", run_id, "--config", str(cfg)])
    assert again.exit_code == 0, again.output
    after = _round_state(tmp_path / "runs", run_id, raw["round"]["index"])
    assert set(after) == set(DEFAULT_STAGES) and after["evaluate_h0"] == state["evaluate_h0"]
    adapters = [Path(d) for arm in after["train"]["output"]["arms"].values() for d in arm["adapters"].values()]
    assert adapters, after["train"]["output"]
    for d in adapters:  # each written once by rank 0 of a 2-process group
        summary = TrainSummary.model_validate_json((d / SUMMARY_FILE).read_text())
        assert summary.world_size == 2 and (d / "adapter_model.safetensors").exists()


def test_stage_timeouts_name_an_unknown_stage_or_a_bad_limit(tiny_model_dir: Path) -> None:
    from pydantic import ValidationError

    assert RoundConfig(student_weights=str(tiny_model_dir), stage_timeout_s={"train": 600}).stage_timeout_s == {"train": 600}
    with pytest.raises(ValidationError, match="unknown stage 'evolv'; stages: evaluate_pairs, evaluate_h0, evolve"):
        RoundConfig(student_weights=str(tiny_model_dir), stage_timeout_s={"evolv": 600})
    with pytest.raises(ValidationError, match="stage 'train': timeout must be > 0 seconds"):
        RoundConfig(student_weights=str(tiny_model_dir), stage_timeout_s={"train": 0})


def test_second_writer_gets_one_line_naming_the_holder(tmp_path: Path, tiny_model_dir: Path) -> None:
    raw = round_config(tmp_path, "http://127.0.0.1:9/v1", tiny_model_dir)
    cfg = tmp_path / "round.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    run = RunStore(tmp_path / "runs", "20261201-000000-roundtest")
    holder = {"pid": os.getppid(), "host": socket.gethostname(), "started": time.time() - 60}
    (run.root / LOCK_FILE).write_text(json.dumps(holder))
    result = invoke(["run", "--resume", run.run_id, "--config", str(cfg)])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"pid {os.getppid()}" in lines[0] and socket.gethostname() in lines[0], result.output
    assert (run.root / LOCK_FILE).exists()  # the holder's lock is left alone


def test_run_lock_takes_over_a_dead_writers_lock(tmp_path: Path) -> None:
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()  # a pid that no longer runs
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": child.pid, "host": socket.gethostname(), "started": 0}))
    with RunLock(tmp_path):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            RunLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize("name", ["local.yaml", "micro_study.yaml", "gpu_paper.yaml"])
def test_dry_run_plans_and_checks_without_starting_anything(name: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = invoke(["run", "--config", str(REPO / "deploy" / "configs" / name), "--dry-run", "--runs-dir",
                     str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "stages: serve -> evaluate_h0 -> evolve" in out and "LoRA runs per round" in out
    assert "rollouts per role per round: student" in out and "estimate per round" in out
    assert "config OK (dry run: nothing started)" in out
    assert not (tmp_path / "runs").exists()


def test_dry_run_names_a_bad_accelerate_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    raw = yaml.safe_load((REPO / "deploy/configs/gpu_paper.yaml").read_text())
    raw["round"]["accelerate_config"] = "deploy/accelerate/cpu.yaml"  # CPU training for a GPU-served student
    raw["lora"]["effective_batch"] = 6
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = invoke(["run", "--config", str(path), "--dry-run"])
    assert result.exit_code == 1, result.output
    assert "error: round.accelerate_config: cpu.yaml trains on CPU but the student is served on GPU" in result.output
    assert "mixed_precision" in result.output


def test_next_round_serves_the_merged_student_and_starts_from_h_star(tmp_path: Path) -> None:
    from flows.config import ConfigError, load_config
    from flows.round.context import RoundContext, round_store
    from flows.round.next import first_state, next_round

    config = load_config(REPO / "deploy/configs/local.yaml")
    run = RunStore(tmp_path / "runs", "r-next")
    state, cfg = first_state(config, run, REPO)
    assert state.t == 0 and state.start_harness == "baseline" and state.student_model == "hosted_vllm/micro"
    ctx = RoundContext(config=cfg, store=round_store(run.root, 0), base=REPO, state=state)
    h_star = str(ctx.h_star_dir)
    ctx.store.mark_done("round", "evolve", {"output": {"h_star_dir": h_star}})
    ctx.store.mark_done("round", "gate", {"output": {"promoted": False, "merged_dir": ""}})
    kept, same = next_round(ctx, run)
    assert (kept.t, kept.student_model, kept.start_harness, same) == (1, "hosted_vllm/micro", h_star, cfg)
    merged = str(tmp_path / "merged" / "student-r1")
    ctx.store.mark_done("round", "gate", {"output": {"promoted": True, "merged_dir": merged}})
    promoted, nxt = next_round(ctx, run)
    assert (promoted.t, promoted.student_model, promoted.student_weights) == (1, "hosted_vllm/student-r1", merged)
    assert nxt.servers[0].model == merged and nxt.servers[0].name == "student-r1" and nxt.servers[0].port == 8123
    assert nxt.models["student"].model == "hosted_vllm/student-r1"
    unmanaged = cfg.model_copy(update={"servers": []})  # a student served elsewhere cannot be swapped by the run
    with pytest.raises(ConfigError, match="student-r1 must be served by a server the run manages"):
        next_round(RoundContext(config=unmanaged, store=ctx.store, base=REPO, state=state), run)


def test_a_round_that_changed_nothing_is_not_run_again(tmp_path: Path) -> None:
    """Not promoted and no edit accepted: round t+1 would start where round t did, with the same seeds."""
    from flows.config import load_config
    from flows.round.context import RoundContext, round_store
    from flows.round.next import first_state, repeats

    config = load_config(REPO / "deploy/configs/local.yaml")
    run = RunStore(tmp_path / "runs", "r-repeat")
    state, cfg = first_state(config, run, REPO)
    ctx = RoundContext(config=cfg, store=round_store(run.root, 0), base=REPO, state=state)
    families = {f: {"accepted_edits": []} for f in cfg.family_names()}
    ctx.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(ctx.h_star_dir), "families": families}})
    no_gain = "NOT PROMOTED: no gain (validation 0.267 vs 0.267)"
    ctx.store.mark_done("round", "gate", {"output": {"promoted": False, "merged_dir": "", "reason": no_gain}})
    why = repeats(ctx)
    assert why is not None and "round 1 would run the same jobs" in why and no_gain in why
    beaten = {**families, "payroll_audit": {"accepted_edits": [{"op": "insert_section", "in_h_star": False}]}}
    ctx.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(ctx.h_star_dir), "families": beaten}})
    assert repeats(ctx) == why  # accepted on a minibatch, beaten on validation: h* is the start harness
    edited = {**families, "payroll_audit": {"accepted_edits": [{"op": "insert_section", "in_h_star": True}]}}
    ctx.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(ctx.h_star_dir), "families": edited}})
    assert repeats(ctx) is None  # a new harness: round 1 searches from it
    ctx.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(ctx.h_star_dir), "families": families}})
    ctx.store.mark_done("round", "gate", {"output": {"promoted": True, "merged_dir": "m", "reason": "PROMOTED"}})
    assert repeats(ctx) is None  # a new student


def test_a_round_whose_search_changes_nothing_after_a_round_that_did_not_promote_stops_after_its_search(
        tmp_path: Path) -> None:
    """Round 0 not promoted (but an edit accepted, so round 1 runs); round 1's search from h*_0 accepts nothing:
    round 1's arms would be round 0's again. A promoted round 0, or an edit in round 1, lets round 1 go on."""
    from flows.config import load_config
    from flows.round.context import RoundContext, round_store
    from flows.round.next import first_state, next_round, repeats, search_repeats
    from flows.round.reporting import _notes

    config = load_config(REPO / "deploy/configs/local.yaml")
    run = RunStore(tmp_path / "runs", "r-search-repeat")
    state, cfg = first_state(config, run, REPO)
    r0 = RoundContext(config=cfg, store=round_store(run.root, 0), base=REPO, state=state)
    none = {f: {"accepted_edits": []} for f in cfg.family_names()}
    edited = {**none, "payroll_audit": {"accepted_edits": [{"op": "insert_section", "in_h_star": True}]}}
    # the confirmatory run's round 1: edits accepted on minibatches, none on validation (not in h*_1)
    beaten = {**none, "code_refactor": {"accepted_edits": [{"op": "hide_tool", "in_h_star": False}]}}
    r0.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(r0.h_star_dir), "families": edited}})
    no_gain = "NOT PROMOTED: no gain (paired -0.001 [-0.017, +0.014])"
    r0.store.mark_done("round", "gate", {"output": {"promoted": False, "merged_dir": "", "reason": no_gain}})
    assert repeats(r0) is None and search_repeats(r0, None) is None  # round 0 has no round before it
    s1, c1 = next_round(r0, run)
    r1 = RoundContext(config=c1, store=round_store(run.root, 1), base=REPO, state=s1)
    assert search_repeats(r1, r0) is None  # round 1's search has not run yet
    r1.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(r1.h_star_dir), "families": beaten}})
    why = search_repeats(r1, r0)
    assert why is not None and "h*_1 = h*_0" in why and no_gain in why and "stops after round 1's search" in why
    r1.stopped = why  # what the round flow sets before writing the stopped round's page
    assert _notes(r1, {})[0] == f"Stopped after the search: {why}."
    r1.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(r1.h_star_dir), "families": edited}})
    assert search_repeats(r1, r0) is None  # h*_1 differs from h*_0: new arms
    r1.store.mark_done("round", "evolve", {"output": {"h_star_dir": str(r1.h_star_dir), "families": none}})
    r0.store.mark_done("round", "gate", {"output": {"promoted": True, "merged_dir": "m", "reason": "PROMOTED"}})
    assert search_repeats(r1, r0) is None  # M_1 is a new student: its arms are new


def test_the_self_arm_is_exactly_the_correction_sets_own_successes(tmp_path: Path) -> None:
    from agents.records import Trajectory, TurnRecord
    from flows.config import load_config
    from flows.round.context import RoundContext, round_store
    from flows.round.data import _store_set, read_set, self_set
    from flows.round.next import first_state
    from harness import baseline
    from tasks.records import TaskInstance, Verdict

    config = load_config(REPO / "deploy/configs/local.yaml")
    run = RunStore(tmp_path / "runs", "r-self")
    state, cfg = first_state(config, run, REPO)
    ctx = RoundContext(config=cfg, store=round_store(run.root, 0), base=REPO, state=state)
    h = baseline("payroll_audit")
    ctx.store.save_harness(h)

    def row(i: int, tag: str) -> Trajectory:
        inst = TaskInstance(id=f"payroll_audit/{i}", family="payroll_audit", index=i, split="train", instruction="x",
                            difficulty="easy", seed=i)
        return Trajectory(instance=inst, harness_id=h.id, model_id="m", seed=0,
                          messages=[{"role": "user", "content": "x"}],
                          turns=[TurnRecord(index=0, assistant={"role": "assistant", "content": f"{tag} {i}"})],
                          stop_reason="submitted", verdict=Verdict(score=1.0), tag=tag).with_id()

    rows = [row(0, "correction"), row(1, "self_success"), row(2, "correction"), row(3, "self_success")]
    corr = _store_set(ctx, "corr", "baseline", "k1", rows, {"rows": 4})
    own = self_set(ctx, "baseline", corr)
    assert own.rows == 2 and [t.id for t in read_set(ctx, own)] == [rows[1].id, rows[3].id]
    assert self_set(ctx, "baseline", corr) == own  # found again by its key
    empty = self_set(ctx, "baseline", corr.model_copy(update={"rows": 0, "reason": "no correction kept"}))
    assert empty.rows == 0 and "no correction kept" in empty.reason


@pytest.mark.vllm
@pytest.mark.slow
def test_two_rounds_the_second_from_the_first_rounds_promoted_pair(
        tmp_path: Path, tiny_model_dir: Path, ray_local: None, one_torch_thread: None, prefect_harness: None) -> None:
    """The run's own server (so round 1 can serve the merged student-r1). The random tiny student gains nothing, so
    round 0 promotes under `non_inferior` with the fit risk allowed and every correction kept (as the gate kill test
    does); round 1 starts from (student-r1, h*_0), searches from h*_0 and reports against it."""
    from deploy.vllm_server import free_port

    port = free_port()
    raw = round_config(tmp_path, f"http://127.0.0.1:{port}/v1", tiny_model_dir)
    raw["servers"] = [{"model": str(tiny_model_dir), "name": "tiny", "port": port, "max_lora_rank": 16,
                       "max_loras": 2, "cpu_kvcache_gib": 1}]
    raw["round"] |= {"index": 0, "arms": ["corr", "self"]}
    raw["round"]["gate"].update(rule="non_inferior", allow_fit_risk=True)
    raw["round"]["correction"].update(keep="any", n=1)
    raw["evaluation"]["n_instances"] = 1
    cfg = tmp_path / "two.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    result = invoke(["run", "--config", str(cfg), "--rounds", "2"])
    assert result.exit_code == 0, result.output
    runs = tmp_path / "runs"
    (run_id,) = list_runs(runs)
    r0, r1 = _round_state(runs, run_id, 0), _round_state(runs, run_id, 1)
    assert r0["gate"]["output"]["promoted"] and set(r1) == set(DEFAULT_STAGES)
    h_star_0 = r0["evolve"]["output"]["h_star_dir"]
    assert set(r1["evaluate_h_star"]["output"]["pairs"]) == {"M_t.hstar", "expert.hstar", "M_t.hstart"}
    start = r1["evaluate_h_star"]["output"]["pairs"]["M_t.hstart"]
    assert start["harness"] == h_star_0 and start["model"] == "hosted_vllm/student-r1"  # M_1 on h*_0
    report = (runs / run_id / "rounds" / "r1" / "reports" / "report.md").read_text()
    assert "- M_t: hosted_vllm/student-r1" in report and f"- start harness: {h_star_0}" in report
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if line.startswith("| ")}
    assert re.search(r"\| \d+\.\d", rows["M_t on h*_{t-1}"])  # M_1 on h*_0, beside M_1 on h*_1
    assert "this round's search (M_t h*_t - M_t h*_{t-1})" in report
    assert "## Harness change (start harness -> h*_t)" in report and f"- {FAMILY}: " in report
    decisions = PromotionRegistry.under(runs).decisions(run_id)
    assert [d.round for d in decisions] == [0, 1] and decisions[1].reason.startswith(("PROMOTED", "NOT PROMOTED"))
    assert f"**{decisions[1].reason}**" in report  # the report says whether round 1 promotes, and why
    # the campaign closes round 1's page: M_t on h0 and h*_t per round, and round 0's promoted M_1 on h*_0
    campaign = report.split("## Campaign: rounds r0..r1 of this run", 1)[1]
    cell = r"[\d.]+ ± [–\d.]+"
    assert re.search(rf"\| r0 \| {FAMILY} \| {cell} \| {cell} \| {cell} \| promoted \|", campaign), campaign
    assert re.search(rf"\| r1 \| {FAMILY} \| {cell} \| {cell} \| ", campaign), campaign
    assert (runs / run_id / "rounds" / "r1" / "reports" / "campaign.png").read_bytes()[:4] == b"\x89PNG"


def test_merge_adapter_gives_the_same_logits_as_base_plus_adapter(tmp_path: Path, tiny_model_dir: Path) -> None:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.merge import merge_adapter, merged

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))  # random B: the adapter changes the outputs
    lora.save_pretrained(tmp_path / "adapter")
    out = merge_adapter(tiny_model_dir, tmp_path / "adapter", tmp_path / "student-r1")
    assert merged(out, tiny_model_dir, tmp_path / "adapter") and (out / "tokenizer.json").exists()
    ids = torch.tensor([[1, 5, 9, 42, 7]])
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        want = PeftModel.from_pretrained(fresh, tmp_path / "adapter")(ids).logits
        got = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)(ids).logits
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)(ids).logits
    assert torch.allclose(got, want, atol=1e-4) and not torch.allclose(got, plain, atol=1e-4)
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    merge_adapter(tiny_model_dir, tmp_path / "adapter", out)  # a finished merge is left as it is
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime


def test_from_stage_must_name_a_stage_of_an_existing_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = tmp_path / "round.yaml"
    cfg.write_text(yaml.safe_dump(round_config(tmp_path, "http://127.0.0.1:9/v1", tiny_model_dir)))
    fresh = invoke(["run", "--config", str(cfg), "--from-stage", "attribute"])
    assert fresh.exit_code == 2 and "--from-stage recomputes stages of an existing run" in fresh.output
    run = RunStore(tmp_path / "runs", "20261201-000000-roundtest")
    bad = invoke(["run", "--resume", run.run_id, "--config", str(cfg), "--from-stage", "nope"])
    assert bad.exit_code == 2 and "--from-stage: unknown stage 'nope'; stages: evaluate_pairs, evaluate_h0" in " ".join(bad.output.split())


def test_train_stage_reports_optimizer_steps_and_each_seeds_final_loss(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="flows.round.train")
    on_step = _step_progress("corr", steps_per_seed=3, seeds=2)  # training.fit: 10 examples in batches of 4
    for _seed in range(2):
        for step in (1, 2, 3):
            on_step(StepLog(step=step, epoch=0, loss=1.0 / step, lr=1e-3, trained_tokens=10, tokens=20))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-2].startswith("train corr: optimizer steps: 6/6 (100%)") and lines[-2].endswith("done")
    assert lines.count("train corr: a seed finished at loss 0.3333") == 2
