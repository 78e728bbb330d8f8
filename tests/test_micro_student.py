"""The micro student M0 at test scale: the same build code path as `coevo model micro` (real flawed@native
demonstrations on pretrain instances, tokenizer, full-parameter training), deterministic on one machine, and
served by vLLM CPU, where it plays a real episode with the rollout runtime."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import tasks
from agents.jobs import Limits
from agents.providers.registry import close_provider_environments
from agents.records import ModelRole
from agents.rollout import run_episode
from training.micro.mixture import NAMED, draw, named_harness
from training.micro.build import BUILD_RECORD, MicroSpec, build_micro_model, weights_digest
from harness.baseline import baseline
from harness.evolution.cards import stated_keys
from training.pretrain import PretrainConfig

FAMILIES = ("stock_alert", "anomaly_detection")
SPEC = MicroSpec(families=FAMILIES, demos_per_family=2, demo_weights={}, vocab_size=700, hidden_size=128, intermediate_size=256,
                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, max_len=8192,
                 max_position_embeddings=16384, copy_examples=1, copy_tokens=64, copy_phase_steps=2,
                 copy_phase_batch=2, copy_phase_len=32, train=PretrainConfig(steps=4, threads=1, checkpoint_every=2))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("micro")
    return (build_micro_model(root / "a", SPEC, progress=False),
            build_micro_model(root / "b", SPEC, progress=False))


def test_build_is_deterministic_and_records_its_figures(built: tuple[Path, Path]) -> None:
    a, b = built
    assert weights_digest(a) == weights_digest(b)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    record = json.loads((a / BUILD_RECORD).read_text())
    assert record["weights_sha256"] == weights_digest(a)
    assert record["demonstrations"]["demonstrations"] == 4
    by_family = record["demonstrations"]["by_family"]
    assert set(by_family) == set(FAMILIES)
    assert by_family["anomaly_detection"]["show_work"] == 2 and by_family["stock_alert"]["show_work"] == 0
    assert record["training"]["steps"] == 4 and record["training"]["tokens_seen"] > 0
    assert record["copy_phase"]["steps"] == 2 and record["copy_phase"]["tokens_seen"] == 2 * 2 * 32
    assert record["copy_phase_formed"] is False  # two steps from random weights: loss ~6.5, nowhere near formed
    assert not list((a / ".work").glob("*/pretrain_checkpoint.pt"))  # removed once training finished
    assert sorted(p.stem for p in (a / "harness_hK").glob("*.yaml")) == sorted(FAMILIES)
    config = json.loads((a / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["head_dim"] == 64


def test_mixture_is_seeded_and_names_its_harness() -> None:
    import random

    assert draw("stock_alert", random.Random(3))[1].id == draw("stock_alert", random.Random(3))[1].id
    hk = named_harness("stock_alert")
    assert stated_keys(hk) and not stated_keys(baseline("stock_alert"))
    seen = {draw("stock_alert", rng)[0] for rng in [random.Random(0)] for _ in range(40)}
    assert seen == {"h0", NAMED, "var"}


def test_cli_rejects_an_unknown_family(tmp_path: Path) -> None:
    from flows.cli import model as cli_model

    app = typer.Typer()
    cli_model.register(app)
    res = CliRunner().invoke(app, ["model", "micro", "--out", str(tmp_path / "m"), "--families", "stock_alert,nope"])
    assert res.exit_code == 2 and "--families" in res.output and "nope" in res.output
    assert not (tmp_path / "m").exists()


def test_cli_rejects_a_copy_phase_stop_loss_that_can_never_be_reached(tmp_path: Path) -> None:
    from flows.cli import model as cli_model

    app = typer.Typer()
    cli_model.register(app)
    res = CliRunner().invoke(app, ["model", "micro", "--out", str(tmp_path / "m"), "--copy-phase-stop-loss", "0"])
    assert res.exit_code == 2 and "--copy-phase-stop-loss" in res.output
    assert not (tmp_path / "m").exists()


def _tiny_lm() -> object:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                        num_attention_heads=1, num_key_value_heads=1, head_dim=64,
                                        tie_word_embeddings=True))


def test_pretrain_stops_once_the_recent_mean_loss_is_below_stop_below(tmp_path: Path) -> None:
    from training.pretrain import pretrain

    seq = [1, 2, 3, 4, 5, 6, 7, 8] * 4  # one sequence, learnt fast: its loss falls under 1.0 within 60 steps
    examples = [(seq, seq)]
    base = PretrainConfig(steps=60, lr=1e-2, warmup_steps=0, threads=1, checkpoint_every=1000, stop_window=5)
    full = pretrain(_tiny_lm(), examples, base, tmp_path / "full", progress=False)
    assert full.steps == 60 and not full.stopped_early
    threshold = 1.0
    assert min(sum(full.losses[i - 5:i]) / 5 for i in range(5, 61)) < threshold
    stopped = pretrain(_tiny_lm(), examples, base.model_copy(update={"stop_below": threshold}), tmp_path / "stop",
                       progress=False)
    assert stopped.stopped_early and 5 <= stopped.steps < 60
    assert sum(stopped.losses[-5:]) / 5 < threshold  # it stopped at the first window under the threshold ...
    assert all(sum(stopped.losses[i - 5:i]) / 5 >= threshold for i in range(5, stopped.steps))  # ... not before
    assert stopped.losses == full.losses[:stopped.steps]  # same seed, same steps until then


@pytest.mark.vllm
def test_vllm_cpu_serves_it_for_a_real_episode(built: tuple[Path, Path], tmp_path: Path) -> None:
    from deploy.vllm_server import ServeSpec, free_port, start_server, stop_server

    spec = ServeSpec(model=str(built[0]), name="micro", port=free_port(), max_lora_rank=16, max_loras=1,
                     max_model_len=16384, cpu_kvcache_gib=1)
    handle = start_server(spec, state_dir=tmp_path, ready_timeout_s=400)
    try:
        inst = tasks.instances("stock_alert", "test", 1)[0]
        env = tasks.get("stock_alert").make_env(inst)
        role = ModelRole(model="hosted_vllm/micro", api_base=handle.api_base, max_tokens=48, temperature=0.7)
        with env:
            traj = asyncio.run(run_episode(role, baseline("stock_alert"), env, seed=0, limits=Limits(max_turns=2)))
        close_provider_environments()
        assert traj.stop_reason not in ("model_error", "error"), traj.error
        assert traj.turns and traj.turns[0].completion_tokens > 0  # the served model generated the first turn
        assert traj.turns[0].prompt_tokens > 1000  # it read the whole harness and tool schema (its own tokenizer)
    finally:
        stop_server(spec.port, state_dir=tmp_path)


def test_micro_config_loads_and_points_at_the_committed_model() -> None:
    from flows.config import load_config, preflight

    repo = Path(__file__).resolve().parent.parent
    config = load_config(repo / "deploy" / "configs" / "micro.yaml")
    assert config.servers[0].model == "deploy/micro" and set(config.families) <= set(tasks.families())
    assert config.models["expert"].model == "flawed/{family}@expert"
    preflight(config, repo)  # deploy/micro exists (committed weights)


@pytest.mark.parametrize("args, says", [
    (["--blocks", "payroll:5"], "--blocks: Value error, reading block 'payroll:5'"),
    (["--programs", "code_refactor=nope"], "--programs: showwork/code_refactor@nope: unknown program"),
    (["--demos", "code_refactor"], "--demos: write FAMILY=VALUE"),
])
def test_extend_cli_names_the_offending_option_before_any_work(tmp_path: Path, args: list[str], says: str) -> None:
    from flows.cli import model as cli_model

    app = typer.Typer()
    cli_model.register(app)
    base = Path(__file__).resolve().parents[1] / "deploy" / "micro1"
    res = CliRunner().invoke(app, ["model", "extend", "--base", str(base), "--out", str(tmp_path / "m"), *args])
    assert res.exit_code == 2 and says in " ".join(res.output.split()), res.output
    assert not (tmp_path / "m").exists()
