"""LoRA-SFT of the student on a built dataset, through accelerate; writes adapters vLLM serves.

    # one process (CPU or one GPU), in-process:
    summaries = train_seeds("runs/x/datasets/d", ".cache/tiny-model", "runs/x/adapters/r1", TrainConfig())  # seeds 0, 1, 2
    # several GPUs (FSDP or DeepSpeed ZeRO-3), the same code under accelerate launch:
    accelerate launch --config_file deploy/accelerate/fsdp.yaml -m flows.cli train --data D --base M --out O

Recipe (the `TrainConfig` defaults, training/config.py): LoRA on q/k/v/o/gate/up/down, rank 16, alpha 2 x
rank, dropout 0.05, AdamW lr 1e-4 with linear warmup then cosine decay to 0, 2 epochs, effective batch 8 by
gradient accumulation, 3 seeds, bf16 on GPUs that have it (fp32 on CPU). The loss is the mean over the
trained tokens of the whole effective batch (not a mean of per-example means), so long and short examples
weigh per token.

Reproducibility: the LoRA init and dropout draw from torch's generator, seeded with the training seed; the
data order is a seeded permutation per epoch (`random.Random`). A run killed after a checkpoint and
resumed ends with the same adapter as an uninterrupted one (see training/checkpoint.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import resource
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from training import checkpoint
from training.config import TrainConfig
from training.dataset import Example, load_dataset, manifest_sha256
from training.render import IGNORE
from training.targets import AdaptedShare, adapted_share, check_adapted, lora_targets

log = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"
CHECKPOINT_DIR = "checkpoints"


class StepLog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = Field(description="Optimizer step, 1-based.")
    epoch: int
    loss: float = Field(description="Mean token loss over the trained tokens of this step's batch.")
    lr: float = Field(description="Learning rate used for this step.")
    trained_tokens: int
    tokens: int


class TrainSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int
    config: TrainConfig
    config_digest: str
    base_model: str
    data: str
    data_manifest_sha256: str
    examples: int
    steps: int
    loss_curve: list[StepLog]
    tokens_per_s: float = Field(description="All tokens forwarded per second of this process's training.")
    trained_tokens_per_s: float = Field(description="Tokens with a loss per second.")
    wall_s: float = Field(description="Training wall time of this process (a resumed run counts its part only).")
    resumed_from_step: int = 0
    precision: str
    device: str
    world_size: int
    peak_rss_mib: float
    peak_gpu_mib: float = 0.0
    adapter_dir: str
    adapted: AdaptedShare | None = Field(default=None, description="Base weights the adapter covers, LoRA "
                                         "parameters trained, adapted weight kinds (None in summaries written "
                                         "before it was recorded).")


def batch_plan(n_examples: int, effective_batch: int, epochs: int, seed: int) -> list[tuple[int, list[int]]]:
    """(epoch, example indices) per optimizer step: a seeded shuffle per epoch, the last batch may be short."""
    plan = []
    for epoch in range(epochs):
        order = list(range(n_examples))
        random.Random(f"coevo-train:{seed}:{epoch}").shuffle(order)
        plan += [(epoch, order[i: i + effective_batch]) for i in range(0, n_examples, effective_batch)]
    return plan


def lr_lambda(total: int, warmup: int) -> Callable[[int], float]:
    """Multiplier of the peak lr at step s: linear warmup from lr/warmup, then cosine to 0."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return f


def _precision(config: TrainConfig) -> str:
    if config.precision != "auto":
        return config.precision
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _micro_batch(examples: Sequence[Example], device: torch.device) -> dict[str, torch.Tensor]:
    """Right-padded tensors; padding has attention 0 and no loss."""
    width = max(e.n_tokens for e in examples)
    ids = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    attn = torch.zeros((len(examples), width), dtype=torch.long)
    for row, e in enumerate(examples):
        ids[row, : e.n_tokens] = torch.tensor(e.input_ids)
        labels[row, : e.n_tokens] = torch.tensor(e.labels)
        attn[row, : e.n_tokens] = 1
    return {"input_ids": ids.to(device), "labels": labels.to(device), "attention_mask": attn.to(device)}


def token_loss_sum(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum of next-token cross-entropies over the trained positions.

    Logits are computed only where a loss is taken (`logits_to_keep` with the positions): the
    [tokens x vocab] logit tensor is the largest activation of an LM step and most positions need none.
    """
    targets = batch["labels"][:, 1:]
    keep = (targets != IGNORE).any(dim=0).nonzero().squeeze(-1)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False,
                logits_to_keep=keep)
    logits = out.logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets[:, keep].reshape(-1),
                                             ignore_index=IGNORE, reduction="sum")


def _set_sync(accelerator: Any, sync: bool) -> None:
    # Tells DeepSpeed whether this micro-batch ends the accumulation (its engine steps only then); for
    # DDP/FSDP `no_sync` below does the same job. accelerate exposes no public setter for it.
    accelerator.gradient_state._set_sync_gradients(sync)


def _load_model(base: Path, config: TrainConfig, precision: str, fsdp: bool = False) -> Any:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    model.config.use_cache = False
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    modules, params = lora_targets(model, config)  # explicit names: what peft adapts is our choice (targets.py)
    lora = LoraConfig(r=config.rank, lora_alpha=config.lora_alpha, lora_dropout=config.dropout,
                      target_modules=modules, target_parameters=params or None, bias="none", task_type="CAUSAL_LM")
    # LoRA weights stay fp32 (peft's default autocast_adapter_dtype), except under FSDP, which flattens each wrapped
    # layer's parameters into one buffer of one dtype (bf16 base + fp32 adapters: "Must flatten tensors with uniform
    # dtype", seen on an H200 by deploy/gpu_check.sh): there the adapters keep the base's dtype, as TRL does.
    peft_model = get_peft_model(model, lora, autocast_adapter_dtype=not fsdp)
    check_adapted(peft_model, config)
    return peft_model


@dataclass
class _Setup:
    """What one seed's training holds while it runs (accelerate-prepared model and optimizer, the step plan)."""

    accelerator: Any
    model: Any
    optimizer: Any
    scheduler: Any
    plan: list[tuple[int, list[int]]]
    precision: str
    sharded: bool
    adapted: AdaptedShare

    @property
    def world(self) -> int:
        return self.accelerator.num_processes


def _full_batches(plan: list[tuple[int, list[int]]], effective_batch: int, n_examples: int,
                  world: int) -> list[tuple[int, list[int]]]:
    """FSDP/DeepSpeed need the same number of forward passes on every rank: keep only full batches."""
    if world == 1:
        return plan
    short = [b for _, b in plan if len(b) < effective_batch]
    full = [(e, b) for e, b in plan if len(b) == effective_batch]
    if short:
        log.warning("%d processes: skipping %d short batch(es) (%d examples) at epoch ends",
                    world, len(short), sum(len(b) for b in short))
    if not full:
        raise ValueError(f"{n_examples} examples make no full batch of {effective_batch}")
    return full


def make_accelerator(precision: str) -> Any:
    """The run's `Accelerator`. Under a multi-process launcher (WORLD_SIZE > 1) on a machine with no CUDA,
    accelerate only forms a process group when told `cpu=True` (DDP over gloo); without it every process
    believes it is rank 0 of 1 and trains and writes the whole run on its own. Refuse that state."""
    from accelerate import Accelerator

    launched = int(os.environ.get("WORLD_SIZE", "1"))
    cpu_ddp = launched > 1 and not torch.cuda.is_available()
    if cpu_ddp:
        log.info("WORLD_SIZE=%d and no CUDA: data-parallel training on CPU (DDP over gloo)", launched)
    accelerator = Accelerator(mixed_precision="bf16" if precision == "bf16" else "no", cpu=cpu_ddp)
    if accelerator.num_processes != launched:
        raise RuntimeError(f"launched as {launched} processes (WORLD_SIZE) but accelerate formed a group of "
                           f"{accelerator.num_processes}: check the accelerate config's distributed_type")
    return accelerator


def _setup(n_examples: int, base: Path, config: TrainConfig, seed: int, accelerator: Any) -> _Setup:
    """Check the batch split, load base + LoRA (seeded), build optimizer, scheduler and the step plan."""
    from accelerate.utils import DistributedType

    if not n_examples:
        raise ValueError("the dataset has no examples; check its manifest's dropped counts")
    precision = _precision(config)
    accelerator = accelerator or make_accelerator(precision)
    world = accelerator.num_processes
    if config.effective_batch % (world * config.micro_batch):
        raise ValueError(f"effective_batch {config.effective_batch} is not a multiple of processes ({world}) x "
                         f"micro_batch ({config.micro_batch}); change --micro-batch or the number of processes")
    # The LoRA init and dropout use torch's global generator; seeding it is how peft runs become repeatable.
    torch.manual_seed(seed)
    model = _load_model(base, config, precision, fsdp=accelerator.distributed_type == DistributedType.FSDP)
    adapted = adapted_share(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    plan = _full_batches(batch_plan(n_examples, config.effective_batch, config.epochs, seed),
                         config.effective_batch, n_examples, world)
    warmup = max(1, math.ceil(config.warmup_ratio * len(plan)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(len(plan), warmup))
    model, optimizer = accelerator.prepare(model, optimizer)
    sharded = accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)
    return _Setup(accelerator=accelerator, model=model, optimizer=optimizer, scheduler=scheduler, plan=plan,
                  precision=precision, sharded=sharded, adapted=adapted)


def _resume(run: _Setup, ckpt_root: Path, config: TrainConfig, seed: int, data_hash: str) -> tuple[int, list[StepLog]]:
    """(step to start at, loss curve so far) from the newest checkpoint made by this same run, if any."""
    last = checkpoint.latest(ckpt_root)
    if last is None:
        return 0, []
    state = checkpoint.read_state(last)
    if (state["config_digest"], state["data_hash"], state["seed"]) != (config.digest(), data_hash, seed):
        raise ValueError(f"{last} was made with another config, dataset or seed; use a fresh --out")
    checkpoint.load(last, accelerator=run.accelerator, model=run.model, optimizer=run.optimizer,
                    scheduler=run.scheduler, sharded=run.sharded)
    log.info("resuming %s from step %d", ckpt_root.parent, state["step"])
    return state["step"], [StepLog.model_validate(s) for s in state["loss_curve"]]


def _optimizer_step(run: _Setup, batch: Sequence[Example], config: TrainConfig) -> float:
    """Forward/backward this process's share of one effective batch, clip, step; the batch's mean token loss."""
    acc, model, world = run.accelerator, run.model, run.world
    batch_trained = sum(e.n_trained for e in batch)
    mine = list(batch)[acc.process_index::world]
    micro = [mine[i: i + config.micro_batch] for i in range(0, len(mine), config.micro_batch)]
    loss_sum = torch.zeros((), device=acc.device)
    for j, mb in enumerate(micro):
        last_micro = j == len(micro) - 1
        _set_sync(acc, last_micro)
        with acc.no_sync(model) if not last_micro else contextlib.nullcontext():
            s = token_loss_sum(model, _micro_batch(mb, acc.device))
            # Scaled so the gradient averaged over processes is that of the batch's mean token loss.
            acc.backward(s * world / batch_trained)
        loss_sum += s.detach()
    # All parameters (frozen ones have no grad): accelerate uses FSDP's sharded clipping only for those.
    acc.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return acc.reduce(loss_sum, reduction="sum").item() / batch_trained


def _notify(on_step: Callable[[StepLog], None] | None, entry: StepLog) -> None:
    if on_step is None:
        return
    try:
        on_step(entry)
    except Exception as e:  # an observer must not kill training
        log.warning("on_step callback failed: %s: %s", type(e).__name__, e)


def _write_summary(run: _Setup, out: Path, summary: TrainSummary) -> None:
    """Adapter files, then training_summary.json (atomic; its presence means the seed is finished)."""
    _save_adapter(run.accelerator, run.model, out, run.sharded)
    if run.accelerator.is_main_process:
        tmp = out / (SUMMARY_FILE + ".tmp")
        tmp.write_text(summary.model_dump_json(indent=2))
        os.replace(tmp, out / SUMMARY_FILE)
        shutil.rmtree(out / CHECKPOINT_DIR, ignore_errors=True)  # the adapter is the product; checkpoints only serve resume
    run.accelerator.wait_for_everyone()
    run.accelerator.free_memory()


def train_adapter(
    examples: Sequence[Example],
    out: str | Path,
    *,
    base: str | Path,
    config: TrainConfig,
    seed: int,
    data_ref: str = "",
    data_hash: str = "",
    resume: bool = True,
    on_step: Callable[[StepLog], None] | None = None,
    progress: Any = None,
    accelerator: Any = None,
) -> TrainSummary:
    """Train one adapter into `out` (adapter files + training_summary.json); resumes from `out/checkpoints`."""
    out, base = Path(out), Path(base)
    run = _setup(len(examples), base, config, seed, accelerator)
    ckpt_root = out / CHECKPOINT_DIR
    start, curve = _resume(run, ckpt_root, config, seed, data_hash) if resume else (0, [])
    task = progress.add_task(f"seed {seed}", total=len(run.plan), completed=start, loss=float("nan"), tps=0.0) if progress else None
    run.model.train()
    t0, tokens_run, trained_run = time.perf_counter(), 0, 0
    for step in range(start, len(run.plan)):
        epoch, indices = run.plan[step]
        batch = [examples[i] for i in indices]
        lr = run.scheduler.get_last_lr()[0]
        loss = _optimizer_step(run, batch, config)
        entry = StepLog(step=step + 1, epoch=epoch, loss=loss, lr=lr, trained_tokens=sum(e.n_trained for e in batch),
                        tokens=sum(e.n_tokens for e in batch))
        curve.append(entry)
        tokens_run, trained_run = tokens_run + entry.tokens, trained_run + entry.trained_tokens
        if progress:
            progress.update(task, advance=1, loss=loss, tps=trained_run / max(time.perf_counter() - t0, 1e-9))
        _notify(on_step, entry)
        if (step + 1) % config.checkpoint_every == 0 and step + 1 < len(run.plan):
            checkpoint.save(ckpt_root, step + 1, accelerator=run.accelerator, model=run.model, optimizer=run.optimizer,
                            scheduler=run.scheduler, sharded=run.sharded, keep=config.keep_checkpoints,
                            trainer_state={"step": step + 1, "seed": seed, "config_digest": config.digest(),
                                           "data_hash": data_hash, "loss_curve": [c.model_dump() for c in curve]})
    wall = time.perf_counter() - t0
    summary = TrainSummary(
        seed=seed, config=config, config_digest=config.digest(), base_model=str(base), data=data_ref,
        data_manifest_sha256=data_hash, examples=len(examples), steps=len(run.plan), loss_curve=curve,
        tokens_per_s=tokens_run / wall if wall > 0 else 0.0, trained_tokens_per_s=trained_run / wall if wall > 0 else 0.0,
        wall_s=wall, resumed_from_step=start, precision=run.precision, device=str(run.accelerator.device),
        world_size=run.world, peak_rss_mib=_peak_rss_mib(),
        peak_gpu_mib=torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0,
        adapter_dir=str(out), adapted=run.adapted,
    )
    _write_summary(run, out, summary)
    return summary


def _save_adapter(accelerator: Any, model: Any, out: Path, sharded: bool) -> None:
    """PEFT adapter dir for vLLM: adapter_config.json + adapter_model.safetensors, LoRA weights only.

    No `modules_to_save` and no embedding layers (the vocabulary is never resized), which vLLM's LoRA
    loader needs.
    """
    state = accelerator.get_state_dict(model) if sharded else None  # gathers shards to rank 0
    unwrapped = accelerator.unwrap_model(model)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        unwrapped.save_pretrained(str(out), state_dict=state, safe_serialization=True, save_embedding_layers=False)
    accelerator.wait_for_everyone()


def finished(out: Path, config: TrainConfig, seed: int, data_hash: str) -> TrainSummary | None:
    """The summary of an already finished identical run in `out`, if any (a retried stage skips it)."""
    path = Path(out) / SUMMARY_FILE
    if not path.exists():
        return None
    summary = TrainSummary.model_validate_json(path.read_text())
    same = (summary.config_digest, summary.seed, summary.data_manifest_sha256) == (config.digest(), seed, data_hash)
    return summary if same else None


def train_seeds(
    data: str | Path,
    base: str | Path,
    out: str | Path,
    config: TrainConfig,
    seeds: Sequence[int] | None = None,
    *,
    show_progress: bool = True,
    on_step: Callable[[StepLog], None] | None = None,
) -> list[TrainSummary]:
    """One adapter per seed in `out/seed-<s>/` (seeds 0..config.seeds-1 unless given); finished seeds are
    skipped, interrupted ones resume."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    seeds = range(config.seeds) if seeds is None else seeds
    examples, _ = load_dataset(data)
    data_hash = manifest_sha256(data)
    precision = _precision(config)
    accelerator = make_accelerator(precision)
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"), TextColumn("{task.fields[tps]:.0f} trained tok/s"),
        TimeRemainingColumn(), disable=not (show_progress and accelerator.is_main_process),
    )
    summaries = []
    with progress:
        for seed in seeds:
            target = Path(out) / f"seed-{seed}"
            done = finished(target, config, seed, data_hash)
            if done is None:
                done = train_adapter(examples, target, base=base, config=config, seed=seed, data_ref=str(data),
                                     data_hash=data_hash, progress=progress, accelerator=accelerator, on_step=on_step)
            summaries.append(done)
    if accelerator.is_main_process:
        (Path(out) / "seeds.json").write_text(json.dumps(
            {str(s.seed): {"adapter": s.adapter_dir, "final_loss": s.loss_curve[-1].loss if s.loss_curve else None}
             for s in summaries}, indent=2))
    return summaries
