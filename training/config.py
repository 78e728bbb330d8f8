"""Training settings, each defined once: `TrainConfig` (LoRA-SFT) and `LengthRule` (sequence length).

The defaults are the paper's recipe: LoRA rank 16 (or 64), 2 epochs, lr 1e-4, effective batch 8, 3 training
seeds, sequence length 49152 raised to 2 x 49152 = 98304 when more than 5% of the examples would be cut.
Everything else reads them from here: the run config (`flows/config.py` embeds both records), the
`coevo train` / `coevo dataset build` options (generated from these fields, help = `description`), the
flow's training stage. Small setups (the tiny model, tests) set smaller values explicitly.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RAISE_FACTOR = 2  # the raised sequence limit is this many times the configured one (49152 -> 98304)
# Fields that do not change the trained adapter: a checkpoint or a finished adapter made with other values is reused.
NOT_IN_DIGEST = frozenset({"checkpoint_every", "keep_checkpoints", "seeds"})


class TrainConfig(BaseModel):
    """LoRA-SFT settings of one training run (one adapter per seed). Every field says its unit or intent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int = Field(default=16, ge=1, description="LoRA rank r (16 or 64 in the recipe).")
    alpha: int | None = Field(default=None, ge=1, description="LoRA alpha; unset means 2 x rank.")
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: tuple[str, ...] = Field(default=ALL_LINEAR,
                                            description="Linear projections of attention and MLP that get adapters.")
    target_experts: bool = Field(
        default=False, description="MoE students: also adapt the fused expert weights (peft `target_parameters` "
        "on mlp.experts.gate_up_proj and mlp.experts.down_proj; dropout must then be 0). Off: the experts stay "
        "frozen, whatever target_modules names. A dense model refuses it.")
    epochs: int = Field(default=2, ge=1, description="Passes over the dataset.")
    lr: float = Field(default=1e-4, gt=0, description="Peak learning rate (AdamW; linear warmup, then cosine to 0).")
    warmup_ratio: float = Field(default=0.05, ge=0, lt=1, description="Fraction of optimizer steps of linear warmup.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay on the LoRA weights.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping (global L2 norm).")
    effective_batch: int = Field(default=8, ge=1,
                                 description="Examples per optimizer step = processes x micro_batch x accumulation.")
    micro_batch: int = Field(default=1, ge=1,
                             description="Examples per forward pass; 1 avoids padding (best tokens/s on CPU).")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        default="auto",
        description="auto = bf16 on a GPU that supports it, else fp32 (CPUs without AMX are slower in bf16).",
    )
    gradient_checkpointing: bool = Field(
        default=True, description="Recompute activations in the backward pass: needed for 49k-token sequences "
        "on large models; costs about a third more compute. Off is faster for short sequences.")
    checkpoint_every: int = Field(default=50, ge=1, description="Optimizer steps between resumable checkpoints.")
    keep_checkpoints: int = Field(default=2, ge=1, description="Newest checkpoints kept on disk.")
    seeds: int = Field(default=3, ge=1, description="Training seeds 0..S-1, one adapter each (the paper's 3); "
                       "seed 0 is the one served.")

    @model_validator(mode="after")
    def _batch_fits(self) -> "TrainConfig":
        if self.effective_batch % self.micro_batch:
            raise ValueError(f"effective_batch {self.effective_batch} must be a multiple of micro_batch {self.micro_batch}")
        if self.target_experts and self.dropout:
            raise ValueError(f"dropout {self.dropout}: expert LoRA (target_experts) needs dropout 0 (peft's ParamWrapper "
                             "cannot apply dropout to a fused expert weight)")
        return self

    @property
    def lora_alpha(self) -> int:
        return self.alpha if self.alpha is not None else 2 * self.rank

    def digest(self) -> str:
        """Settings that change one adapter (not checkpoint cadence, not how many seeds): a checkpoint or a
        finished adapter is reused only by its own settings."""
        # target_experts off (its default) leaves the digest as it was before the field existed: finished
        # adapters and checkpoints of earlier runs are still found
        same = self.model_dump(exclude=set(NOT_IN_DIGEST) | (set() if self.target_experts else {"target_experts"}))
        return hashlib.sha256(repr(sorted(same.items())).encode()).hexdigest()[:16]


class LengthRule(BaseModel):
    """Sequence-length policy of a dataset: a limit, raised to 2x when too many examples would be cut.

    Examples over the limit in force are dropped and counted, never truncated mid-turn.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_len: int = Field(default=49152, gt=0, description=f"Token limit per example; raised to {RAISE_FACTOR}x "
                         "when more than `raise_above` of the examples exceed it.")
    raise_above: float = Field(default=0.05, ge=0.0, le=1.0,
                               description="Raise the limit when more than this fraction of examples would be cut.")

    @property
    def raised_max_len(self) -> int:
        return RAISE_FACTOR * self.max_len
