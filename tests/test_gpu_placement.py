"""GPU placement and LoRA serving, checked before anything starts (flows/placement.py, deploy/vllm_support.py):
the paper's config places every server and training rank on named GPUs; a GPU shared by a serving student and
training, servers asking for more than a GPU's memory, a GPU server without GPUs, sleep mode without its server
setting, and adapters vLLM cannot serve are refused by `--dry-run` and by the run's start, each naming the key.
The launch side: CUDA_VISIBLE_DEVICES per server and for `accelerate launch`, the FSDP wrap class from the model.
(The round's stop-and-restart of a real vLLM CPU server is in tests/test_training_moe.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from deploy.vllm_server import ServeSpec
from flows.cli import app
from flows.config import ConfigError, parse_config
from flows.placement import check_lora_serving, check_placement
from training.config import TrainConfig
from training.launch import launch_command

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "deploy" / "configs" / "gpu_paper.yaml"


def paper(**round_placement: object) -> dict:
    raw = yaml.safe_load(PAPER.read_text())
    raw["round"]["placement"].update(round_placement)
    return raw


def dry_run(raw: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - click's Result
    monkeypatch.chdir(REPO)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return CliRunner().invoke(app, ["run", "--config", str(path), "--dry-run"])


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-MoE (a small vocabulary: built in a few seconds); the checks read its config.json."""
    from deploy.tiny_model import TinyMoeSpec, build_tiny_moe

    return build_tiny_moe(tmp_path_factory.mktemp("moe") / "model", TinyMoeSpec(vocab_size=512))


def test_dry_run_prints_the_paper_placement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = dry_run(paper(), tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "GPU 0: server student TP rank 0 (0.90 of memory); train rank 0" in out
    assert "GPU 7: train rank 7" in out and "server student sleeps (vLLM sleep mode level 1)" in out
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in out


def test_training_beside_a_serving_student_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = dry_run(paper(student_during_train="keep"), tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert ("error: GPU 0: oversubscribed during the train stage: server 'student' keeps 0.90 of its memory while "
            "training rank 0 runs there; set round.placement.student_during_train to sleep or stop") in result.output
    assert "GPU 1: oversubscribed" in result.output and "GPU 2: oversubscribed" not in result.output


def test_gpus_and_sleep_settings_are_named_when_missing_or_wrong(tmp_path: Path) -> None:
    raw = paper(train_gpus=[0, 1, 2, 3], node_gpus=2)
    raw["servers"][0].pop("gpus")
    raw["servers"][0]["sleep_mode"] = False
    errors = check_placement(parse_config(raw), REPO).errors
    assert any(e.startswith("servers.0.gpus: GPU server 'student' has no GPUs assigned") for e in errors), errors
    assert any(e.startswith("round.placement.student_during_train: sleep needs servers.0.sleep_mode: true")
               for e in errors), errors
    assert any("4 GPU(s) [0, 1, 2, 3] for num_processes 8" in e for e in errors), errors
    assert any(e.startswith("GPU 2: the node has 2 GPU(s)") for e in errors), errors


def test_servers_asking_for_more_than_a_gpu_are_refused(tmp_path: Path) -> None:
    raw = paper(student_during_train="stop")
    second = {**raw["servers"][0], "name": "expert-local", "port": 8001, "gpus": [1], "tensor_parallel_size": 1,
              "gpu_memory_utilization": 0.3, "sleep_mode": False}
    raw["servers"].append(second)
    errors = check_placement(parse_config(raw), REPO).errors
    assert ("GPU 1: oversubscribed: server student TP rank 1 (0.90 of memory) + server expert-local TP rank 0 (0.30 "
            "of memory) ask for 1.20 of its memory (> 1); lower gpu_memory_utilization or move a server") in errors
    # the other server is not the student's: it keeps serving while training runs on its GPU
    assert any(e.startswith("GPU 1: oversubscribed during the train stage: server 'expert-local'") and
               e.endswith("move round.placement.train_gpus") for e in errors), errors
    assert not any("server 'student' keeps" in e for e in errors)  # stopped during train


def test_run_start_refuses_a_bad_placement_before_anything_starts(tmp_path: Path, tiny_model_dir: Path) -> None:
    from flows.round.flow import run_rounds

    raw = paper(student_during_train="keep")
    raw["runs_dir"] = str(tmp_path / "runs")
    raw["round"]["student_weights"] = raw["servers"][0]["model"] = str(tiny_model_dir)
    raw["round"].pop("budget_usd")
    for role in ("expert", "reflector"):
        raw["models"][role] = {"model": "flawed/{family}@expert"}
    raw["round"]["search"]["reflector"] = "library"
    raw["lora"].update(target_experts=False)
    raw["servers"][0]["extra_args"] = []
    with pytest.raises(ConfigError, match="placement refused:\n  GPU 0: oversubscribed during the train stage"):
        run_rounds(parse_config(raw), base=REPO)
    assert not (tmp_path / "runs").exists()


def test_adapters_vllm_cannot_serve_are_refused_before_training(tmp_path: Path, tiny_model_dir: Path,
                                                                 tiny_moe: Path) -> None:
    moe = tiny_moe
    raw = paper()
    raw["round"]["student_weights"] = raw["servers"][0]["model"] = str(moe)
    raw["servers"][0]["extra_args"] = []
    errors, _ = check_lora_serving(parse_config(raw), REPO)
    assert errors == ["lora: server 'student': expert LoRA (target_experts) on Qwen3MoeForCausalLM needs vLLM's "
                      "--enable-mixed-moe-lora-format (vLLM keeps its MoE LoRA in 2-D form and refuses a fused-expert "
                      "adapter without it); add it to the server's extra_args"]
    raw["round"]["student_weights"] = raw["servers"][0]["model"] = str(tiny_model_dir)  # dense
    errors, _ = check_lora_serving(parse_config(raw), REPO)
    assert errors[0] == "lora: target_experts: Qwen3ForCausalLM is dense (no experts in its config.json)"
    local = yaml.safe_load((REPO / "deploy/configs/local.yaml").read_text())
    local["round"]["student_weights"] = local["servers"][0]["model"] = str(moe)  # a MoE student on vLLM CPU
    result = CliRunner().invoke(app, ["run", "--config", str(_write(tmp_path / "l.yaml", local)), "--dry-run"])
    assert result.exit_code == 1
    assert "error: lora: server 'micro': vLLM CPU cannot serve LoRA on the MoE model Qwen3MoeForCausalLM" \
        in result.output.replace("\n", " ")


def _write(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def test_expert_targets_need_dropout_zero_named_by_key() -> None:
    raw = paper()
    raw["lora"]["dropout"] = 0.05  # the recipe's dropout with the paper's target_experts
    with pytest.raises(ConfigError, match=r"lora: dropout 0\.05: expert LoRA \(target_experts\) needs dropout 0"):
        parse_config(raw)
    assert TrainConfig(dropout=0.0).digest() != TrainConfig(dropout=0.0, target_experts=True).digest()


def test_each_process_gets_its_gpus_and_fsdp_wraps_the_models_own_layer(tmp_path: Path, tiny_model_dir: Path,
                                                                         tiny_moe: Path) -> None:
    spec = ServeSpec(model="m", name="s", device="gpu", tensor_parallel_size=2, gpus=[2, 3], sleep_mode=True)
    env, cmd = spec.environment(), spec.command()
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["VLLM_SERVER_DEV_MODE"] == "1" and "--enable-sleep-mode" in cmd
    with pytest.raises(ValidationError, match=r"gpus: \[2\] must be 2 distinct GPU ids"):
        ServeSpec(model="m", name="s", device="gpu", tensor_parallel_size=2, gpus=[2])
    with pytest.raises(ValidationError, match="sleep_mode: server 's' binds 0.0.0.0"):
        ServeSpec(model="m", name="s", device="gpu", host="0.0.0.0", api_key_env="K", sleep_mode=True)
    fsdp = REPO / "deploy/accelerate/fsdp.yaml"
    assert "fsdp_transformer_layer_cls_to_wrap" not in (yaml.safe_load(fsdp.read_text())["fsdp_config"])
    for weights, layer in ((tiny_model_dir, "Qwen3DecoderLayer"), (tiny_moe, "Qwen3MoeDecoderLayer")):
        cmd = launch_command(fsdp, tmp_path / "d", weights, tmp_path / "o", TrainConfig())
        assert cmd[cmd.index("--fsdp_transformer_layer_cls_to_wrap") + 1] == layer
