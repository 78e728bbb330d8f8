"""The round's `train` stage: each arm's set -> a dataset (tokenized with M_t's tokenizer) -> one LoRA adapter
per training seed, under `<round>/adapters/<arm>/seed-<s>`; finished seeds (same data and settings) are skipped.
In the flow's own process by default; with `round.accelerate_config` under `accelerate launch` (`training.launch`).
One call per arm, `training.fit`, owns the dataset's key, its build, the seeds and the launch.
Then `serve_adapters` hot-loads them as `student@r{t+1}-imit-h0-s{seed}`, `...-imit-s{seed}`, `...-corr-s{seed}`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from flows import servers as server_mod
from flows.progress import Progress, run_emitter
from flows.round.config import adapter_name
from flows.round.context import RoundContext
from flows.round.data import ArmDataRecord, ArmSet, read_set
from training.fit import fit
from training.launch import Launch
from training.lora import StepLog

log = logging.getLogger(__name__)
MASK = "turns"  # every set marks its trained turns (flows/round/data.py)


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


def _step_progress(arm: str, steps_per_seed: int, seeds: int) -> Callable[[StepLog], None]:
    """Optimizer steps of the arm's unfinished seeds as `flows.progress` lines (done/total, ETA), and each
    seed's final loss."""
    ticker = Progress(f"train {arm}: optimizer steps", steps_per_seed * max(seeds, 1), emit=run_emitter(log))
    done = 0

    def on_step(entry: StepLog) -> None:
        nonlocal done
        done += 1
        ticker.update(min(done, ticker.total))
        if entry.step == steps_per_seed:
            ticker.emit(f"train {arm}: a seed finished at loss {entry.loss:.4f}")

    return on_step


def train_arm(ctx: RoundContext, s: ArmSet, template: tuple[Path | None, dict[str, bool]]) -> ArmTraining:
    """The arm's set -> `datasets/<arm>-<key>` -> `adapters/<arm>/seed-<s>` (training.fit)."""
    if not s.rows:
        return ArmTraining(arm=s.arm, harness=s.harness, reason=s.reason or "empty set")
    launch = Launch(accelerate_config=ctx.base / ctx.r.accelerate_config, cwd=ctx.base,
                    gpus=ctx.r.placement.train_gpus) if ctx.r.accelerate_config else None
    r = fit(lambda: read_set(ctx, s), Path(ctx.state.student_weights), ctx.store.root / "adapters" / s.arm,
            ctx.config.lora, ctx.config.length, key=(s.arm, s.key), datasets=ctx.store.root / "datasets",
            prefix=f"{s.arm}-", mask=MASK,
            chat_template=template[0], template_kwargs=template[1], launch=launch, label=s.arm,
            progress=functools.partial(_step_progress, s.arm), emit=run_emitter(log))
    return ArmTraining(arm=s.arm, harness=s.harness, dataset_dir=r.dataset_dir if r.stats.examples else "",
                       examples=r.stats.examples, adapters=r.adapters, final_loss=r.final_loss,
                       seeds_reused=r.seeds_reused, reason=r.reason)


def train_arms(ctx: RoundContext, data: ArmDataRecord) -> TrainRecord:
    template = server_mod.training_template(ctx.config, ctx.r.student, ctx.base)
    released = ctx.servers.released(ctx.student_server(), ctx.r.placement.student_during_train) \
        if ctx.servers is not None else contextlib.nullcontext()
    with released:  # the student's server sleeps or stops while LoRA trains on its GPUs (round.placement)
        return TrainRecord(arms={arm: train_arm(ctx, s, template) for arm, s in data.sets.items()})


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
