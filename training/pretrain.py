"""Full-parameter training of a small causal LM from scratch on rendered demonstrations (the micro student).

One optimizer step = one example: a whole trajectory (batch 1, no padding: trajectories differ in length) or
a batch of equal-length sequences (input_ids a list of lists, as the copy curriculum's short segments are);
the loss is the mean cross-entropy over the example's trained tokens, or, for an example that carries per-token
weights (a third list, 0 where untrained), the weighted mean: a token of weight w counts w times. With
`weight_anneal_to` below 1 the extra weight (w - 1) shrinks linearly to that share of itself by the last step.
The step count is fixed, never
time-based, so the result does not depend on how busy the machine is; with `stop_below` it is a maximum, and
training stops once the recent mean loss falls below that value (deterministic too). Examples are visited in
a seeded shuffled order, epoch after epoch. AdamW, linear warmup then cosine decay to `min_lr_ratio`.

Deterministic by seed on one machine: the torch RNG is seeded, the number of intra-op threads is fixed
(`threads`), and the data order comes from `random.Random(seed)`. A checkpoint (weights, optimizer, step,
losses) is written every `checkpoint_every` steps; `pretrain` resumes from it, so a crash loses at most
that many steps. A tqdm bar shows steps, loss and ETA.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CHECKPOINT = "pretrain_checkpoint.pt"


class PretrainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(gt=0, description="Optimizer steps (one example each).")
    lr: float = Field(default=2e-3, gt=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    warmup_steps: int = Field(default=30, ge=0)
    weight_decay: float = Field(default=0.01, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)
    seed: int = 0
    threads: int = Field(default=2, ge=1, description="torch intra-op threads (fixed for determinism).")
    checkpoint_every: int = Field(default=100, ge=1)
    stop_below: float | None = Field(
        default=None, gt=0, description="Stop once the mean loss of the last `stop_window` steps is below this "
                                        "(`steps` is then the most steps run); None: always `steps`.")
    stop_window: int = Field(default=100, ge=1)
    weight_anneal_to: float = Field(default=1.0, ge=0, le=1, description="Share of a weighted token's extra "
                                    "weight (w - 1) left at the last step (linear from 1 at the first).")


class PretrainReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int = Field(description="Steps run (fewer than configured when `stop_below` stopped it).")
    examples: int
    tokens_seen: int
    trained_tokens_seen: int
    first_loss: float
    last_loss: float = Field(description="Mean loss over the last 10% of steps.")
    wall_s: float
    tokens_per_s: float
    resumed_from: int = 0
    losses: list[float] = Field(default_factory=list, description="Per-step loss.")
    stopped_early: bool = Field(default=False, description="`stop_below` was reached before `steps`.")


def lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def order(n_examples: int, steps: int, seed: int) -> list[int]:
    """Example index for every step: seeded shuffles of all examples, one epoch after another."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < steps:
        epoch = list(range(n_examples))
        rng.shuffle(epoch)
        out.extend(epoch)
    return out[:steps]


def _resume(ckpt: Path, model: Any, opt: Any) -> tuple[int, list[float], dict[str, int]]:
    import torch

    if not ckpt.exists():
        return 0, [], {"tokens": 0, "trained": 0}
    state = torch.load(ckpt, weights_only=False)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    return state["step"], state["losses"], state["counts"]


def _save(ckpt: Path, model: Any, opt: Any, step: int, losses: list[float], counts: dict[str, int]) -> None:
    import torch

    tmp = ckpt.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "losses": losses,
                "counts": counts, "rng": torch.get_rng_state()}, tmp)
    tmp.replace(ckpt)  # atomic: a crash mid-write keeps the previous checkpoint


def _converged(losses: list[float], cfg: PretrainConfig) -> bool:
    """Whether `cfg.stop_below` is set and the mean of the last `cfg.stop_window` losses is under it."""
    window = losses[-cfg.stop_window:]
    return cfg.stop_below is not None and len(window) == cfg.stop_window and sum(window) / len(window) < cfg.stop_below


Example = (tuple[list[int], list[int]] | tuple[list[list[int]], list[list[int]]]
           | tuple[list[int], list[int], list[float]] | tuple[list[list[int]], list[list[int]], list[list[float]]])


def _tensor(rows: list[int] | list[list[int]] | list[float] | list[list[float]]) -> Any:
    import torch

    return torch.tensor(rows if rows and isinstance(rows[0], list) else [rows])


def _loss(model: Any, x: Any, y: Any, weights: Any | None, extra: float) -> Any:
    """Mean cross-entropy over trained tokens; with `weights`, each token's counts 1 + extra * (w - 1) times."""
    import torch

    if weights is None:
        return model(input_ids=x, labels=y).loss
    logits = model(input_ids=x).logits[:, :-1].float()
    target, w = y[:, 1:], weights[:, 1:].float()
    w = torch.where(target != -100, 1.0 + extra * (w - 1.0), torch.zeros_like(w))
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1),
                                           ignore_index=-100, reduction="none")
    return (ce * w.reshape(-1)).sum() / w.sum().clamp_min(1e-9)


def pretrain(model: Any, examples: list[Example], cfg: PretrainConfig,
             work_dir: Path, *, progress: bool = True) -> PretrainReport:
    """Train `model` in place on (input_ids, labels) examples; see the module docstring."""
    import torch
    from tqdm import tqdm

    if not examples:
        raise ValueError("pretrain: no examples to train on")
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    ckpt = work_dir / CHECKPOINT
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    start, losses, counts = _resume(ckpt, model, opt)
    plan = order(len(examples), cfg.steps, cfg.seed)
    model.train()
    t0, tokens_now = time.perf_counter(), 0
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="micro pretrain", unit="step",
               disable=not progress, dynamic_ncols=True)
    for step in bar:
        ids, labels, *weights = examples[plan[step]]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = _tensor(ids), _tensor(labels)
        extra = 1.0 - (1.0 - cfg.weight_anneal_to) * step / max(1, cfg.steps - 1)
        loss = _loss(model, x, y, _tensor(weights[0]) if weights else None, extra)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(round(float(loss.detach()), 5))
        counts["tokens"] += x.numel()
        counts["trained"] += int((y != -100).sum())
        tokens_now += x.numel()
        rate = tokens_now / max(1e-9, time.perf_counter() - t0)
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}", tok_s=f"{rate:.0f}")
        if _converged(losses, cfg):
            break
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            _save(ckpt, model, opt, step + 1, losses, counts)
    bar.close()
    wall = time.perf_counter() - t0
    tail = losses[-max(1, len(losses) // 10):]
    report = PretrainReport(
        steps=len(losses), examples=len(examples), tokens_seen=counts["tokens"], trained_tokens_seen=counts["trained"],
        first_loss=losses[0], last_loss=round(sum(tail) / len(tail), 5), wall_s=round(wall, 1),
        tokens_per_s=round(tokens_now / max(1e-9, wall), 1), resumed_from=start, losses=losses,
        stopped_early=len(losses) < cfg.steps)
    (work_dir / "pretrain_report.json").write_text(json.dumps(report.model_dump(), indent=1))
    ckpt.unlink(missing_ok=True)
    return report
