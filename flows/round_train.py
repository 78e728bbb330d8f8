"""The round's `train` stage: each arm's set -> a dataset (tokenized with M_t's tokenizer) -> one LoRA adapter
per training seed, under `<round>/adapters/<arm>/seed-<s>`; finished seeds (same data and settings) are skipped.
In the flow's own process by default; with `round.accelerate_config` under `accelerate launch` (`launch_seeds`).
Then `serve_adapters` hot-loads them as `student@r{t+1}-imit-h0-s{seed}`, `...-imit-s{seed}`, `...-corr-s{seed}`.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from flows import servers as server_mod
from flows.cli_options import record_args
from flows.progress import Progress, run_emitter
from flows.round_config import adapter_name
from flows.round_context import RoundContext
from flows.round_data import ArmDataRecord, ArmSet, read_set
from flows.store import content_key
from training.dataset import (build_dataset, is_dataset, load_tokenizer, manifest_sha256, read_manifest,
                              tokenizer_fingerprint, write_dataset)
from training.config import TrainConfig
from training.lora import StepLog, TrainSummary, batch_plan, finished, train_seeds
from training.targets import model_layout

log = logging.getLogger(__name__)
MASK = "turns"  # every set marks its trained turns (flows/round_data.py)


class ArmTraining(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arm: str
    harness: str
    dataset_dir: str = ""
    examples: int = 0
    adapters: dict[int, str] = Field(default_factory=dict, description="Training seed -> adapter directory.")
    final_loss: dict[int, float] = Field(default_factory=dict)
    seeds_reused: list[int] = Field(default_factory=list)
    reason: str = Field(default="", description="Why the arm has no adapter, when it has none.")


class TrainRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arms: dict[str, ArmTraining]


def _step_progress(arm: str, examples: int, lora: TrainConfig, seeds: int) -> Callable[[StepLog], None]:
    """Optimizer steps of the arm's unfinished seeds as `flows.progress` lines (done/total, ETA), and each
    seed's final loss."""
    per_seed = len(batch_plan(examples, lora.effective_batch, lora.epochs, 0))
    ticker = Progress(f"train {arm}: optimizer steps", per_seed * max(seeds, 1), emit=run_emitter(log))
    done = 0

    def on_step(entry: StepLog) -> None:
        nonlocal done
        done += 1
        ticker.update(min(done, ticker.total))
        if entry.step == per_seed:
            ticker.emit(f"train {arm}: a seed finished at loss {entry.loss:.4f}")

    return on_step


def launch_command(accelerate_config: Path, data: Path, weights: Path, root: Path, lora: TrainConfig) -> list[str]:
    """`accelerate launch ... -m flows.cli train ...`; an FSDP config wraps the student's own decoder layer class
    (from its config.json), so one config serves dense and MoE students."""
    acc = yaml.safe_load(accelerate_config.read_text()) or {}
    wrap = []
    if acc.get("distributed_type") == "FSDP" and not (acc.get("fsdp_config") or {}).get("fsdp_transformer_layer_cls_to_wrap"):
        layer = model_layout(weights).decoder_layer
        wrap = ["--fsdp_transformer_layer_cls_to_wrap", layer] if layer else []
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config), *wrap,
            "-m", "flows.cli", "train", "--data", str(data), "--base", str(weights), "--out", str(root),
            *record_args(lora), "--no-progress"]


def launch_seeds(accelerate_config: Path, data: Path, data_hash: str, weights: Path, root: Path, lora: TrainConfig,
                 repo: Path, arm: str, gpus: list[int] | None = None) -> list[TrainSummary]:
    """`round.accelerate_config` set: the arm's seeds trained by `accelerate launch --config_file CONFIG -m
    flows.cli train` (several processes or GPUs: DDP, FSDP, ZeRO-3) on `gpus` (its CUDA_VISIBLE_DEVICES, from
    round.placement.train_gpus), its output lines logged as they come; the summaries are read back from the
    adapters it wrote (finished seeds are skipped by `coevo train`)."""
    cmd = launch_command(accelerate_config, data, weights, root, lora)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false"}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    emit = run_emitter(log)
    emit(f"train {arm}: accelerate launch --config_file {accelerate_config.name} ({lora.seeds} seeds)")
    tail: collections.deque[str] = collections.deque(maxlen=20)
    errors: list[str] = []  # `coevo: error: ...` lines of the ranks (the launcher's own traceback follows them)
    with subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout or ():
            tail.append(line.rstrip())
            if "error:" in line and len(errors) < 5:
                errors.append(line.strip())
            if line.strip():
                emit(f"train {arm} | {line.rstrip()}")
    if proc.returncode:
        raise RuntimeError(f"train {arm}: accelerate launch exited with {proc.returncode}: "
                           f"{' | '.join(dict.fromkeys(errors)) or 'no error line'}; its last lines:\n" + "\n".join(tail))
    summaries = [finished(root / f"seed-{k}", lora, k, data_hash) for k in range(lora.seeds)]
    missing = [k for k, x in enumerate(summaries) if x is None]
    if missing:
        raise RuntimeError(f"train {arm}: accelerate launch finished but seeds {missing} have no adapter in {root}")
    return [x for x in summaries if x is not None]


def train_arm(ctx: RoundContext, s: ArmSet, tokenizer: object) -> ArmTraining:
    if not s.rows:
        return ArmTraining(arm=s.arm, harness=s.harness, reason=s.reason or "empty set")
    weights = Path(ctx.state.student_weights)
    dkey = content_key("dataset", s.arm, s.key, MASK, tokenizer_fingerprint(tokenizer), ctx.r.length.model_dump())
    out = ctx.store.root / "datasets" / f"{s.arm}-{dkey}"
    if not is_dataset(out):
        built = build_dataset(read_set(ctx, s), tokenizer, mask=MASK, length=ctx.r.length, tokenizer_name=str(weights))
        if not built.examples:
            return ArmTraining(arm=s.arm, harness=s.harness, reason=f"all {s.rows} rows dropped by the length rule "
                               f"({built.manifest.stats.dropped})")
        write_dataset(built, out)
    lora = ctx.r.lora
    root = ctx.store.root / "adapters" / s.arm
    data_hash = manifest_sha256(out)
    reused = [k for k in range(lora.seeds) if finished(root / f"seed-{k}", lora, k, data_hash) is not None]
    examples = read_manifest(out).stats.examples
    if ctx.r.accelerate_config:
        config = ctx.base / ctx.r.accelerate_config
        processes = int((yaml.safe_load(config.read_text()) or {}).get("num_processes", 1))
        if processes > 1 and examples < lora.effective_batch:  # several processes train on full batches only
            return ArmTraining(arm=s.arm, harness=s.harness, dataset_dir=str(out), examples=examples,
                               reason=f"{examples} examples make no full batch of {lora.effective_batch} for "
                                      f"{processes} processes ({config.name})")
        summaries = launch_seeds(config, out, data_hash, weights, root, lora, ctx.base, s.arm,
                                 ctx.r.placement.train_gpus)
    else:
        summaries = train_seeds(out, weights, root, lora, range(lora.seeds), show_progress=False,
                                on_step=_step_progress(s.arm, examples, lora, lora.seeds - len(reused)))
    return ArmTraining(arm=s.arm, harness=s.harness, dataset_dir=str(out), examples=examples,
                       adapters={x.seed: str(root / f"seed-{x.seed}") for x in summaries},
                       final_loss={x.seed: x.loss_curve[-1].loss for x in summaries if x.loss_curve},
                       seeds_reused=reused)


def train_arms(ctx: RoundContext, data: ArmDataRecord) -> TrainRecord:
    tokenizer = load_tokenizer(Path(ctx.state.student_weights),
                               *server_mod.training_template(ctx.config.server_for(ctx.config.models[ctx.r.student]), ctx.base))
    released = ctx.servers.released(ctx.student_server(), ctx.r.placement.student_during_train) \
        if ctx.servers is not None else contextlib.nullcontext()
    with released:  # the student's server sleeps or stops while LoRA trains on its GPUs (round.placement)
        return TrainRecord(arms={arm: train_arm(ctx, s, tokenizer) for arm, s in data.sets.items()})


def serve_adapters(ctx: RoundContext, rec: TrainRecord, reload: bool = False) -> dict[str, str]:
    """Hot-load every trained adapter into M_t's server (idempotent); served name -> adapter directory.
    `reload`: the adapters were (re)trained now, so a name the server already holds is unloaded first."""
    from deploy.vllm_server import unload_adapter

    role = ctx.config.models[ctx.r.student]
    served = {}
    for arm in rec.arms.values():
        for seed, path in sorted(arm.adapters.items()):
            name = adapter_name(ctx.t, arm.arm, seed)
            if reload and role.api_base:
                try:
                    unload_adapter(role.api_base, name)
                except Exception:  # noqa: BLE001 - not loaded there: nothing to unload
                    pass
            if ctx.servers is not None:
                ctx.servers.serve_adapter(ctx.student_server(), role.api_base or "", name, Path(path))
            served[name] = path
    return served
