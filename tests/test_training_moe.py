"""LoRA on the tiny Qwen3-MoE (fused experts in transformers 5): the experts are adapted only when asked
(`target_experts`, peft `target_parameters`), the share of weights adapted says so, the merged model equals the
adapted one, and the merged MoE is served by a real vLLM CPU server that the round's server scope stops for the
train stage and starts again (round.placement.student_during_train: stop). vLLM CPU cannot serve LoRA on a MoE
model (its MoE LoRA layer runs Triton kernels), so the adapters themselves are checked in transformers here and
refused for CPU serving before training (tests/test_gpu_placement.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file
from training_helpers import make_trajectory

from deploy.tiny_model import TinyMoeSpec, build_tiny_moe
from training.config import TrainConfig
from training.dataset import build_dataset, load_tokenizer, write_dataset
from training.lora import TrainSummary, train_seeds
from training.merge import merge_adapter

FAST = dict(rank=4, lr=3e-3, epochs=6, micro_batch=8, warmup_ratio=0.1, gradient_checkpointing=False, seeds=1)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # two shared cores: intra-op threads only spin
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(tiny MoE directory, an 8-example dataset tokenized for it)."""
    root = tmp_path_factory.mktemp("moe")
    model = build_tiny_moe(root / "model", TinyMoeSpec())
    built = build_dataset([make_trajectory(i, 1, with_tools=False) for i in range(8)], load_tokenizer(model))
    return model, write_dataset(built, root / "ds")


def train(moe: tuple[Path, Path], out: Path, **over: object) -> TrainSummary:
    model, data = moe
    return train_seeds(data, model, out, TrainConfig(**{**FAST, **over}), show_progress=False)[0]


def test_experts_stay_frozen_unless_asked(moe: tuple[Path, Path], tmp_path: Path) -> None:
    # the recipe's targets (q/k/v/o/gate/up/down) and dropout 0.05: peft alone would turn gate/up/down into expert
    # targets and refuse the dropout; here the experts stay frozen and the adapter is attention only
    s = train(moe, tmp_path / "attn", dropout=0.05)
    keys = load_file(str(tmp_path / "attn" / "seed-0" / "adapter_model.safetensors"))
    assert keys and not [k for k in keys if ".experts" in k]
    a = s.adapted
    assert a is not None and a.targets == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert a.base_params == 542_976 and a.covered_params == 98_304  # 2 layers x (128x128 x2 + 64x128 x2)
    curve = [c.loss for c in s.loss_curve]
    assert curve[-1] < curve[0] - 0.1, curve


def test_expert_targets_reach_the_fused_experts_and_merge(moe: tuple[Path, Path], tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    s = train(moe, tmp_path / "exp", dropout=0.0, target_experts=True)
    adapter = tmp_path / "exp" / "seed-0"
    keys = load_file(str(adapter / "adapter_model.safetensors"))
    # peft's layout for fused experts: experts.base_layer = gate_up_proj, experts = down_proj; rank x experts rows
    assert keys["base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight"].shape == (4 * 4, 128)
    assert keys["base_model.model.model.layers.0.mlp.experts.lora_B.weight"].shape == (128, 4 * 4)
    a = s.adapted
    assert a is not None and a.targets == ["experts.down_proj", "experts.gate_up_proj", "k_proj", "o_proj", "q_proj",
                                           "v_proj"]
    assert a.covered_params == 98_304 + 2 * (4 * 128 * 128 + 4 * 128 * 64)  # attention + both expert tensors
    assert [c.loss for c in s.loss_curve][-1] < s.loss_curve[0].loss - 0.1

    model, _ = moe
    ids = torch.tensor([[5, 17, 300, 42, 7, 99, 1000, 3]])
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    before = {n: p.clone() for n, p in base.named_parameters() if ".experts." in n}
    adapted = PeftModel.from_pretrained(base, adapter)
    with torch.no_grad():
        want = adapted(input_ids=ids).logits
    merged_dir = merge_adapter(model, adapter, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    with torch.no_grad():
        got = merged(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    moved = [n for n, p in merged.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert sorted(moved) == sorted(before), moved  # every fused expert weight changed by the merge


@pytest.mark.vllm
@pytest.mark.slow
def test_merged_moe_served_on_vllm_cpu_is_stopped_for_training_and_restarted(moe: tuple[Path, Path],
                                                                              tmp_path: Path) -> None:
    from deploy.vllm_server import free_port
    from flows.config import parse_config
    from flows.servers import ModelServers

    model, _ = moe
    merged = merge_adapter(model, train(moe, tmp_path / "a", dropout=0.0, target_experts=True).adapter_dir,
                           tmp_path / "merged")
    port = free_port()
    config = parse_config({
        "servers": [{"model": str(merged), "name": "moe", "port": port, "enable_lora": False, "max_model_len": 2048}],
        "models": {"student": {"model": "hosted_vllm/moe", "api_base": f"http://127.0.0.1:{port}/v1"}},
        "evaluation": {"pairs": [{"model": "student"}]}})

    def answers() -> str:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120, json={
            "model": "moe", "messages": [{"role": "user", "content": "check stock"}], "max_tokens": 8, "temperature": 0})
        r.raise_for_status()
        return r.json()["choices"][0]["finish_reason"]

    repo = Path(__file__).resolve().parents[1]
    with ModelServers(config, tmp_path / "state", repo, ready_timeout_s=400) as servers:
        assert answers() in ("length", "stop")
        with servers.released("moe", "stop"):
            assert servers.down() == ["moe"]  # its memory is free while LoRA trains
        assert servers.down() == [] and answers() in ("length", "stop")
        assert servers.records["moe"].owned
    assert servers.down() == ["moe"]  # the scope stopped what it started
