"""What a LoRA adapter reaches in a given student, decided here from the model itself, not from peft's guesses.

    layout = model_layout("/models/Qwen3-Coder-30B-A3B")   # config.json only: MoE or dense, decoder layer class
    modules, params = lora_targets(model, config)          # explicit peft target_modules / target_parameters
    share = adapted_share(peft_model)                      # how much of the base the adapter covers

Dense students: LoRA on the `target_modules` projections (q/k/v/o/gate/up/down). MoE students whose experts
are fused 3-D parameters (transformers 5: `mlp.experts.gate_up_proj` [E, 2I, H] and `mlp.experts.down_proj`
[E, H, I]): the expert weights are not `nn.Linear` modules, so they are reached only through peft's
`target_parameters`, and only when `TrainConfig.target_experts` asks. peft 0.21 on transformers 5 also
rewrites `gate_proj/up_proj/down_proj` in `target_modules` into expert targets on its own (its v4 -> v5
conversion, with the gate/up rank doubled); passing full module names that exist in the model, and checking
what was adapted afterwards (`check_adapted`), keeps the choice ours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from training.config import TrainConfig

EXPERTS = "experts"  # the container of fused expert parameters in transformers' MoE blocks


class ModelLayout(BaseModel):
    """What a model directory's config.json says about LoRA and sharding (no weights read)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architecture: str = Field(description="config.json `architectures[0]`, e.g. Qwen3MoeForCausalLM.")
    model_type: str = Field(description="config.json `model_type`, e.g. qwen3_moe.")
    num_experts: int = Field(description="Routed experts per MoE layer; 0 for a dense model.")
    decoder_layer: str | None = Field(description="The transformers class of one decoder layer (the FSDP wrap "
                                      "unit): the model class's `_no_split_modules[0]`; None if unknown.")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def model_layout(model_dir: str | Path) -> ModelLayout:
    """Read `model_dir/config.json`; ValueError naming the file when it is missing or has no architecture."""
    path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read the model's config ({type(e).__name__}: {e})") from None
    archs = cfg.get("architectures") or []
    if not archs:
        raise ValueError(f"{path}: no `architectures` entry; cannot tell the model class")
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0
    return ModelLayout(architecture=archs[0], model_type=str(cfg.get("model_type", "")), num_experts=int(experts),
                       decoder_layer=_decoder_layer(archs[0]))


def _decoder_layer(architecture: str) -> str | None:
    import transformers

    cls = getattr(transformers, architecture, None)
    layers = getattr(cls, "_no_split_modules", None) or []
    return layers[0] if layers else None


def _fused_expert_params(model: Any) -> dict[str, Any]:
    """Full name -> parameter of every 3-D parameter held by an `experts` module (fused expert weights)."""
    return {name: p for name, p in model.named_parameters()
            if p.ndim == 3 and name.rsplit(".", 2)[-2] == EXPERTS}


def lora_targets(model: Any, config: TrainConfig) -> tuple[list[str], list[str]]:
    """(target_modules as full module names, target_parameters as `experts.<leaf>` suffixes) for peft.

    ValueError when nothing matches, or when `target_experts` is asked of a model without fused experts."""
    import torch

    modules = [name for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in config.target_modules
               and f".{EXPERTS}." not in f".{name}."]
    fused = _fused_expert_params(model)
    if not fused:  # a dense model: the leaf names (a short adapter_config.json), as peft matches them anyway
        leaves = {name.rsplit(".", 1)[-1] for name in modules}
        modules = [t for t in config.target_modules if t in leaves]
    params = sorted({f"{EXPERTS}.{name.rsplit('.', 1)[-1]}" for name in fused}) if config.target_experts else []
    if config.target_experts and not fused:
        raise ValueError(f"target_experts: {type(model).__name__} has no fused expert weights (a dense model, or "
                         "experts stored as nn.Linear, which target_modules already reaches); turn target_experts off")
    if not modules and not params:
        raise ValueError(f"target_modules {list(config.target_modules)} match no nn.Linear of "
                         f"{type(model).__name__}")
    return modules, params


def adapted_params(peft_model: Any) -> tuple[set[str], set[str]]:
    """(base modules with a LoRA on a weight, fused expert parameters with a LoRA), by their peft-side names."""
    from peft.tuners.lora.layer import LoraLayer, ParamWrapper

    modules, params = set(), set()
    for name, m in peft_model.named_modules():
        if isinstance(m, ParamWrapper):
            params.add(f"{name}.{m.parameter_name}")
        elif isinstance(m, LoraLayer):
            modules.add(name)
    return modules, params


def check_adapted(peft_model: Any, config: TrainConfig) -> None:
    """Refuse an adapter that reaches the experts unasked, or misses them when asked (peft versions differ)."""
    _, params = adapted_params(peft_model)
    if params and not config.target_experts:
        raise ValueError(f"peft adapted {len(params)} fused expert weight(s) (e.g. {sorted(params)[0]}) although "
                         "target_experts is off: this peft converts gate_proj/up_proj/down_proj into expert "
                         "targets; drop those names from target_modules or set target_experts")
    if config.target_experts and not params:
        raise ValueError("target_experts is on but peft adapted no fused expert weight (peft >= 0.17 is needed "
                         "for target_parameters)")


class AdaptedShare(BaseModel):
    """How much of the base model an adapter covers, and how many parameters it trains."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_params: int = Field(description="Parameters of the base model (LoRA weights excluded).")
    covered_params: int = Field(description="Base parameters with a LoRA on them (their weight matrices).")
    trainable_params: int = Field(description="LoRA parameters trained.")
    targets: list[str] = Field(description="Adapted weight kinds, e.g. q_proj, experts.gate_up_proj.")

    @property
    def covered(self) -> float:
        return self.covered_params / self.base_params if self.base_params else 0.0

    @property
    def trainable(self) -> float:
        return self.trainable_params / self.base_params if self.base_params else 0.0


def adapted_share(peft_model: Any) -> AdaptedShare:
    """Count, over the whole model, the base weights an adapter covers and the LoRA weights it trains."""
    modules, params = adapted_params(peft_model)
    named = dict(peft_model.named_modules())
    covered, kinds = 0, set()
    for name in modules:
        base = named[name].get_base_layer()
        if hasattr(base, "weight"):
            covered += base.weight.numel()
            kinds.add(name.rsplit(".", 1)[-1])
    base_of = dict(peft_model.named_parameters())
    for name in params:
        holder, _, leaf = name.rpartition(".")
        p = getattr(named[holder].get_base_layer(), leaf, None)
        covered += p.numel() if p is not None else 0
        kinds.add(f"{EXPERTS}.{leaf}")
    lora = sum(p.numel() for n, p in base_of.items() if "lora_" in n)
    return AdaptedShare(base_params=sum(p.numel() for n, p in base_of.items() if "lora_" not in n),
                        covered_params=covered, trainable_params=lora, targets=sorted(kinds))
