"""The `train_adapter` stage's work: stored trajectories -> dataset -> LoRA adapter(s), to be served under a name.

    record = train(config, store, repo_root)      # flows/evaluation.py wraps it as a Prefect task
    servers.serve_adapter(...)                    # the run's ModelServers scope loads seed 0 (flows/servers.py)

1. Data: the imitation set the `imitation_data` stage stored (flows/imitation_stage.py: the source pair's
   score-1.0 rollouts on the training split plus own successes, built by correction/imitation.py), checked
   again by the leakage guard, masked `assistant`, rendered with the base model's tokenizer.
2. `<run>/datasets/<key>`: the key hashes the imitation set's key, the filter, the mask, the tokenizer and the
   length rule, so a resumed run finds the dataset and does not rebuild it.
3. `<run>/adapters/<adapter_name>/seed-<s>`: `training.lora.train_seeds` skips seeds already finished with
   the same config and data. A name is one adapter: a finished adapter made from other data or settings is
   an error (bump the version, e.g. student@r2), because evaluation chunks of that name would be reused.
4. The flow then has the run's server scope hot-load seed 0 into the role's vLLM server under `adapter_name`
   (idempotent on a resumed run; reloaded if that server is restarted later in the run).

The settings are `training.lora` (`training.config.TrainConfig`) and `training.length` (`LengthRule`), used as
they are: no default is restated here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from correction.imitation import DATA_FILTER, MASK
from correction.leakage import check_no_leakage
from flows import servers
from flows.config import AdapterConfig, RunConfig
from flows.imitation_stage import STAGE as IMITATION_STAGE
from flows.imitation_stage import data_chunks, data_key
from flows.store import RunStore, content_key
from training.config import TrainConfig
from training.dataset import (
    DatasetStats,
    build_dataset,
    is_dataset,
    load_tokenizer,
    manifest_sha256,
    read_manifest,
    tokenizer_fingerprint,
    write_dataset,
)
from training.lora import SUMMARY_FILE, TrainSummary, finished, train_seeds

log = logging.getLogger(__name__)

STAGE = "train_adapter"


class TrainingRecord(BaseModel):
    """What `train_adapter` made: JSON-able (a Prefect result and a `state.json` entry), no handles."""

    model_config = ConfigDict(extra="forbid")

    adapter_name: str = Field(description="Served name, e.g. student@r1.")
    served_at: str = Field(description="api_base of the server that loaded seed 0.")
    adapter_dir: str = Field(description="Seed-0 adapter directory (the one served).")
    adapters_root: str = Field(description="<run>/adapters/<adapter_name>, one seed-<s>/ per training seed.")
    dataset_dir: str
    dataset_built: bool = Field(description="False when the dataset was found in the store (resume).")
    dataset: DatasetStats
    source_pair: str
    source_trajectories: int = Field(description="Rollouts of the source pair on the training split (imitation_data).")
    seeds_trained: list[int] = Field(description="Seeds trained by this call.")
    seeds_reused: list[int] = Field(description="Seeds already finished with the same config and data (skipped).")
    final_loss: dict[int, float] = Field(description="Seed -> loss of the last optimizer step.")


def _chat_template(config: RunConfig, repo_root: Path) -> tuple[Path | None, dict[str, bool]]:
    """The template (and fixed template variables) the role's server renders with: training renders the same way."""
    return servers.training_template(config.server_for(config.models[config.training.role]), repo_root)  # type: ignore[union-attr]


def prepare_dataset(config: RunConfig, store: RunStore, repo_root: Path) -> tuple[Path, bool, int]:
    """Build (or find) the dataset of the imitation set `imitation_data` stored; (dir, built now, source rollouts)."""
    t = config.training
    assert t is not None
    key = data_key(config, data_chunks(config, repo_root))
    done = store.done(IMITATION_STAGE).get(key)
    if done is None:
        raise ValueError(f"training: the imitation set of '{t.source_pair}' on the {t.data_split} split ({key}) is "
                         f"not in run {store.run_id}; the imitation_data stage must run before training")
    base = (repo_root / t.base_model).resolve()
    tokenizer = load_tokenizer(base, *_chat_template(config, repo_root))
    rule = t.length
    dkey = content_key("dataset", IMITATION_STAGE, key, DATA_FILTER, MASK, tokenizer_fingerprint(tokenizer),
                       rule.model_dump())
    out = store.root / "datasets" / dkey
    if is_dataset(out):
        return out, False, done["expert_read"]
    rows = check_no_leakage(store.read_chunks(IMITATION_STAGE, [key]), f"training set of {t.adapter_name}")
    built = build_dataset(rows, tokenizer, mask=MASK, length=rule, tokenizer_name=str(base))
    if not built.examples:
        raise ValueError(f"training: all {len(rows)} rows of the imitation set of '{t.source_pair}' were dropped "
                         f"({built.manifest.stats.dropped}); see the dataset manifest's `dropped`")
    write_dataset(built, out)
    log.info("dataset %s: %d examples, %d trained tokens, dropped %s", out, built.manifest.stats.examples,
             built.manifest.stats.trained_tokens, built.manifest.stats.dropped)
    return out, True, done["expert_read"]


def _check_same_adapter(root: Path, config: TrainConfig, data_hash: str, seeds: range) -> None:
    for seed in seeds:
        path = root / f"seed-{seed}" / SUMMARY_FILE
        if path.exists() and finished(path.parent, config, seed, data_hash) is None:
            raise ValueError(f"{path.parent} already holds an adapter trained on other data or settings; "
                             f"give `training.adapter_name` a new version (names are served and cached by name)")


def train(config: RunConfig, store: RunStore, repo_root: Path, show_progress: bool = False) -> TrainingRecord:
    """Dataset (built or found), then one adapter per training seed (finished seeds are skipped)."""
    t = config.training
    if t is None:
        raise ValueError("the run config has no `training` section")
    data_dir, built, n_source = prepare_dataset(config, store, repo_root)
    manifest = read_manifest(data_dir)  # train_seeds reads the rows
    data_hash = manifest_sha256(data_dir)
    root = store.root / "adapters" / t.adapter_name
    seeds = range(t.lora.seeds)
    _check_same_adapter(root, t.lora, data_hash, seeds)
    reused = [s for s in seeds if finished(root / f"seed-{s}", t.lora, s, data_hash) is not None]
    summaries: list[TrainSummary] = train_seeds(data_dir, (repo_root / t.base_model).resolve(), root, t.lora, seeds,
                                                show_progress=show_progress)
    return TrainingRecord(
        adapter_name=t.adapter_name, served_at=config.models[t.role].api_base or "", adapter_dir=str(root / "seed-0"),
        adapters_root=str(root), dataset_dir=str(data_dir), dataset_built=built, dataset=manifest.stats,
        source_pair=t.source_pair, source_trajectories=n_source, seeds_trained=[s for s in seeds if s not in reused],
        seeds_reused=reused, final_loss={s.seed: s.loss_curve[-1].loss for s in summaries if s.loss_curve},
    )


def with_trained_adapter(config: RunConfig, record: TrainingRecord) -> RunConfig:
    """The config to evaluate the adapter pair with: the trained adapter under `adapters` (when its server is one
    the run manages), so a server restarted while the pair is evaluated reloads it and the pool routes to it."""
    t = config.training
    assert t is not None
    spec = config.server_for(config.models[t.role])
    if spec is None:
        return config  # a server given by api_base: the adapter pair's calls go to the role's api_base
    # As a plain `adapters` entry the pair validates without `training` (Prefect re-validates subflow parameters,
    # and `training.adapter_name` may not also be listed under `adapters`).
    data = config.model_dump(mode="json")
    data["adapters"].append(AdapterConfig(name=record.adapter_name, path=record.adapter_dir, server=spec.name)
                            .model_dump(mode="json"))
    data["training"] = None
    return RunConfig.model_validate(data)


def adapter_pairs(config: RunConfig) -> list[str]:
    """Names of the pairs that evaluate the trained adapter (run after `train_adapter`)."""
    return [p.name for p in config.evaluation.pairs if config.is_trained_pair(p)]
