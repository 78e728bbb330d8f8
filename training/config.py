"""LoRA-SFT settings. Every field says its unit or intent; the defaults are the paper's recipe."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class TrainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int = Field(default=16, ge=1, description="LoRA rank r (16 or 64 in the recipe).")
    alpha: int | None = Field(default=None, ge=1, description="LoRA alpha; None means 2 x rank.")
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: tuple[str, ...] = Field(default=ALL_LINEAR,
                                            description="Linear projections of attention and MLP that get adapters.")
    epochs: int = Field(default=2, ge=1, description="Passes over the dataset.")
    lr: float = Field(default=1e-4, gt=0, description="Peak learning rate (AdamW).")
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

    @model_validator(mode="after")
    def _batch_fits(self) -> "TrainConfig":
        if self.effective_batch % self.micro_batch:
            raise ValueError(f"effective_batch {self.effective_batch} must be a multiple of micro_batch {self.micro_batch}")
        return self

    @property
    def lora_alpha(self) -> int:
        return self.alpha if self.alpha is not None else 2 * self.rank

    def digest(self) -> str:
        """Settings that change the result (not checkpoint cadence): a checkpoint only resumes its own run."""
        same = self.model_dump(exclude={"checkpoint_every", "keep_checkpoints"})
        return hashlib.sha256(repr(sorted(same.items())).encode()).hexdigest()[:16]
