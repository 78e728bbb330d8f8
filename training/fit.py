"""One call from rows to LoRA adapters: the dataset (keyed, built once), then one adapter per training seed.

    result = fit(rows, base, out, TrainConfig(), LengthRule(), key=("corr", set_key), datasets=run / "datasets")
    result.adapters      # {seed: "<out>/seed-<s>"}: trained now or found finished
    result.seeds_reused  # the seeds found finished (same settings, same data): not trained again

1. Tokenizer: the base model's, with the template (and the fixed template variables) its server renders
   with, so the trained tokens are the served ones (`training.dataset.load_tokenizer`).
2. Dataset: `datasets/<prefix><key>`, the key hashing the caller's `key` (which rows: the set, its filter),
   the mask, the tokenizer's fingerprint and the length rule. A dataset found there is used as it is and
   `rows` is not read: pass a callable to read the rows only when the dataset is built.
3. Seeds: `out/seed-<s>` for s in `seeds` (0..config.seeds-1 by default); a seed finished with the same
   settings and data is skipped, an interrupted one resumes from its checkpoint. Trained in this process, or
   with `launch` under `accelerate launch` (training/launch.py; its output lines go to `emit`). `seeds=()`
   only builds (or finds) the dataset. `progress` is told the optimizer steps per seed and the seeds to train,
   and returns the callback of every step (in this process only).

No adapter is not an error: `reason` says why (every row dropped; no full batch for the launch's processes).
A seed directory holding an adapter made from other data or settings is trained over, unless `conflict_hint`
is given: then it is an error ending with that hint.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from training.config import LengthRule, TrainConfig
from training.dataset import (DatasetStats, build_dataset, is_dataset, load_tokenizer, manifest_sha256,
                              read_manifest, tokenizer_fingerprint, write_dataset)
from training.launch import Launch, launch_seeds
from training.lora import SUMMARY_FILE, StepLog, TrainSummary, batch_plan, finished, train_seeds
from training.render import MaskMode

log = logging.getLogger(__name__)

Rows = Sequence[Trajectory] | Callable[[], Sequence[Trajectory]]
# (optimizer steps per seed, seeds to train) -> called after every optimizer step of this call
StepProgress = Callable[[int, int], Callable[[StepLog], None]]


class FitResult(BaseModel):
    """What one `fit` made or found: JSON-able, no handles."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset_dir: str = Field(description="datasets/<prefix><key>.")
    dataset_built: bool = Field(description="False when the dataset was found (a resumed run).")
    manifest_sha256: str = Field(default="", description="Hash of the dataset's manifest; '' when none was written.")
    stats: DatasetStats = Field(description="The dataset's counts (also when every row was dropped).")
    rows: int = Field(default=0, description="Rows read to build the dataset (0 when it was found).")
    adapters: dict[int, str] = Field(default_factory=dict, description="Training seed -> adapter directory.")
    seeds_trained: list[int] = Field(default_factory=list, description="Seeds trained by this call.")
    seeds_reused: list[int] = Field(default_factory=list, description="Seeds found finished (skipped).")
    final_loss: dict[int, float] = Field(default_factory=dict, description="Seed -> loss of its last optimizer step.")
    reason: str = Field(default="", description="Why there is no adapter, when there is none.")


def _key(*parts: Any) -> str:
    # flows.store.content_key's hash, so the datasets of runs made before this module are found again
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=2)
def _tokenizer(base: Path, template: Path | None, fixed: tuple[tuple[str, Any], ...]) -> Any:
    return load_tokenizer(base, template, dict(fixed))


def _dataset(rows: Rows, base: Path, tokenizer: Any, mask: MaskMode, length: LengthRule,
             out: Path) -> tuple[bool, DatasetStats, int]:
    """(built now, its stats, rows read); nothing is written when every row is dropped."""
    if is_dataset(out):
        return False, read_manifest(out).stats, 0
    trajectories = list(rows() if callable(rows) else rows)
    built = build_dataset(trajectories, tokenizer, mask=mask, length=length, tokenizer_name=str(base))
    stats = built.manifest.stats
    if built.examples:
        write_dataset(built, out)
        log.info("dataset %s: %d examples, %d trained tokens, dropped %s", out, stats.examples,
                 stats.trained_tokens, stats.dropped)
    return True, stats, len(trajectories)


def _reused(out: Path, config: TrainConfig, seeds: Sequence[int], data_hash: str,
            conflict_hint: str | None) -> list[int]:
    """The seeds finished with these settings and data; another adapter in a seed's place is refused when
    `conflict_hint` is given."""
    reused = []
    for seed in seeds:
        target = out / f"seed-{seed}"
        if finished(target, config, seed, data_hash) is not None:
            reused.append(seed)
        elif conflict_hint is not None and (target / SUMMARY_FILE).exists():
            raise ValueError(f"{target} already holds an adapter trained on other data or settings; {conflict_hint}")
    return reused


def _train(data: Path, data_hash: str, base: Path, out: Path, config: TrainConfig, seeds: Sequence[int],
           todo: int, launch: Launch | None, label: str, progress: StepProgress | None, show_progress: bool,
           emit: Callable[[str], object]) -> list[TrainSummary] | str:
    """The seeds' summaries, or why none could be trained."""
    examples = read_manifest(data).stats.examples
    if launch is not None:
        processes = launch.processes()
        if processes > 1 and examples < config.effective_batch:  # several processes train on full batches only
            return (f"{examples} examples make no full batch of {config.effective_batch} for {processes} "
                    f"processes ({launch.accelerate_config.name})")
        if not todo:  # every seed finished: nothing to launch
            return [x for x in (finished(out / f"seed-{k}", config, k, data_hash) for k in seeds) if x is not None]
        return launch_seeds(launch, data, data_hash, base, out, config, seeds, label, emit)
    per_seed = len(batch_plan(examples, config.effective_batch, config.epochs, 0))
    on_step = progress(per_seed, todo) if progress is not None else None
    return train_seeds(data, base, out, config, seeds, show_progress=show_progress, on_step=on_step)


def fit(rows: Rows, base: Path, out: Path, config: TrainConfig, length: LengthRule, *, key: Sequence[Any],
        datasets: Path, prefix: str = "", mask: MaskMode = "assistant", chat_template: Path | None = None,
        template_kwargs: Mapping[str, Any] | None = None, seeds: Sequence[int] | None = None,
        launch: Launch | None = None, label: str = "", progress: StepProgress | None = None,
        show_progress: bool = False, emit: Callable[[str], object] | None = None,
        conflict_hint: str | None = None) -> FitResult:
    """Rows -> dataset -> one adapter per seed under `out`; see the module docstring."""
    seeds = list(range(config.seeds) if seeds is None else seeds)
    tokenizer = _tokenizer(base, chat_template, tuple(sorted((template_kwargs or {}).items())))
    data = datasets / f"{prefix}{_key('dataset', *key, mask, tokenizer_fingerprint(tokenizer), length.model_dump())}"
    built, stats, n_rows = _dataset(rows, base, tokenizer, mask, length, data)
    if not stats.examples:
        return FitResult(dataset_dir=str(data), dataset_built=built, stats=stats, rows=n_rows,
                         reason=f"all {n_rows} rows dropped ({stats.dropped})")
    data_hash = manifest_sha256(data)
    reused = _reused(out, config, seeds, data_hash, conflict_hint)
    result = FitResult(dataset_dir=str(data), dataset_built=built, manifest_sha256=data_hash, stats=stats,
                       rows=n_rows, seeds_reused=reused)
    if not seeds:
        return result
    trained = _train(data, data_hash, base, out, config, seeds, len(seeds) - len(reused), launch,
                     label, progress, show_progress, emit or log.info)
    if isinstance(trained, str):
        return result.model_copy(update={"reason": trained, "seeds_reused": []})
    return result.model_copy(update={
        "adapters": {s.seed: str(out / f"seed-{s.seed}") for s in trained},
        "seeds_trained": [s for s in seeds if s not in reused],
        "final_loss": {s.seed: s.loss_curve[-1].loss for s in trained if s.loss_curve}})
