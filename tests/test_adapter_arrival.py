"""Adapter arrival on the real vLLM CPU server: after a hot-load, a fixed probe compares the adapter's logprobs with
the base model's; an adapter that changes nothing (LoRA B still zero) is unloaded and refused, a weak but real
one (less KL than local.yaml's 0.008 nats) passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.adapter_probe import MIN_DIFF, PROBE, AdapterRefused, probe_diff
from deploy.vllm_server import load_adapter, served_models, unload_adapter


def adapter(base_dir: Path, out: Path, scale: float | None) -> float:
    """A LoRA adapter of the tiny model: B zero (scale None, peft's default init) or random scaled by `scale`;
    returns its mean KL(base || adapter) over the probe, in nats."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = torch.tensor([AutoTokenizer.from_pretrained(base_dir)(PROBE)["input_ids"]])
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=scale is None))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name and scale is not None:
                p.mul_(scale)
        lb, la = (torch.log_softmax(m(ids).logits, -1) for m in (base, model))
    model.save_pretrained(out)
    return float((lb.exp() * (lb - la)).sum(-1).mean())


@pytest.mark.vllm
def test_a_no_op_adapter_is_refused_and_a_weak_real_one_passes(vllm_server: str, tiny_model_dir: Path,
                                                               tmp_path: Path) -> None:
    assert adapter(tiny_model_dir, tmp_path / "zero", None) == 0.0
    with pytest.raises(AdapterRefused, match=r"student@r9-zero: its logprobs on the probe equal the base model's"):
        load_adapter(vllm_server, "student@r9-zero", tmp_path / "zero")
    assert "student@r9-zero" not in served_models(vllm_server)  # unloaded: nothing can evaluate it

    kl = adapter(tiny_model_dir, tmp_path / "weak", 0.01)
    assert 0 < kl < 0.008  # weaker than the round's promoted adapter on local.yaml
    load_adapter(vllm_server, "student@r9-weak", tmp_path / "weak")
    try:
        assert probe_diff(vllm_server, "student@r9-weak") > 100 * MIN_DIFF
    finally:
        unload_adapter(vllm_server, "student@r9-weak")
