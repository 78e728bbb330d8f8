"""The `train_adapter` stage's work: stored trajectories -> dataset -> LoRA adapter(s), to be served under a name.

    record = train(config, store, repo_root)      # flows/evaluation/flow.py wraps it as a Prefect task
    servers.serve_adapter(...)                    # the run's ModelServers scope loads seed 0 (flows/servers.py)

1. Data: the imitation set the `imitation_data` stage stored (flows/evaluation/imitation.py: the source pair's
   score-1.0 rollouts on the training split plus own successes, built by correction/imitation.py), checked
   again by the leakage guard, masked `assistant`, rendered with the base model's tokenizer.
2. `<run>/datasets/<key>`: the key hashes the imitation set's key, the filter, the mask, the tokenizer and the
   length rule, so a resumed run finds the dataset and does not rebuild it.
3. `<run>/adapters/<adapter_name>/seed-<s>`: `training.fit` (one call: dataset key, build, seeds) skips seeds
   already finished with the same config and data. A name is one adapter: a finished adapter made from other
   data or settings is an error (bump the version, e.g. student@r2), because evaluation chunks of that name
   would be reused.
4. The flow then has the run's server scope hot-load seed 0 into the role's vLLM server under `adapter_name`
   (idempotent on a resumed run; reloaded if that server is restarted later in the run).

The settings are the run config's `lora:` (`training.config.TrainConfig`) and `length:` (`LengthRule`), used as
they are: no default is restated here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from correction.imitation import DATA_FILTER, MASK
from correction.leakage import check_no_leakage
from flows import servers
from flows.config import AdapterConfig, RunConfig
from flows.evaluation.imitation import STAGE as IMITATION_STAGE
from flows.evaluation.imitation import data_chunks, data_key
from flows.store import RunStore
from training.dataset import DatasetStats
from training.fit import FitResult, fit

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


def _fit(config: RunConfig, store: RunStore, repo_root: Path, seeds: list[int] | None = None,
         show_progress: bool = False) -> tuple[FitResult, int]:
    """`training.fit` on the imitation set `imitation_data` stored; (its result, the source pair's rollouts)."""
    t = config.training
    if t is None:
        raise ValueError("the run config has no `training` section")
    key = data_key(config, data_chunks(config, repo_root))
    done = store.done(IMITATION_STAGE).get(key)
    if done is None:
        raise ValueError(f"training: the imitation set of '{t.source_pair}' on the {t.data_split} split ({key}) is "
                         f"not in run {store.run_id}; the imitation_data stage must run before training")
    chat_template, fixed = servers.training_template(config, t.role, repo_root)

    def rows() -> list[Trajectory]:  # read only when the dataset is built
        return check_no_leakage(store.read_chunks(IMITATION_STAGE, [key]), f"training set of {t.adapter_name}")

    result = fit(rows, (repo_root / t.base_model).resolve(), store.root / "adapters" / t.adapter_name, config.lora,
                 config.length,
                 key=(IMITATION_STAGE, key, DATA_FILTER), datasets=store.root / "datasets", mask=MASK,
                 chat_template=chat_template, template_kwargs=fixed, seeds=seeds, label=t.adapter_name,
                 show_progress=show_progress, conflict_hint="give `training.adapter_name` a new version (names are "
                 "served and cached by name)")
    if not result.stats.examples:
        raise ValueError(f"training: all {result.rows} rows of the imitation set of '{t.source_pair}' were dropped "
                         f"({result.stats.dropped}); see the dataset manifest's `dropped`")
    return result, done["expert_read"]


def prepare_dataset(config: RunConfig, store: RunStore, repo_root: Path) -> tuple[Path, bool, int]:
    """Build (or find) the dataset of the imitation set `imitation_data` stored; (dir, built now, source rollouts)."""
    result, n_source = _fit(config, store, repo_root, seeds=[])
    return Path(result.dataset_dir), result.dataset_built, n_source


def train(config: RunConfig, store: RunStore, repo_root: Path, show_progress: bool = False) -> TrainingRecord:
    """Dataset (built or found), then one adapter per training seed (finished seeds are skipped)."""
    r, n_source = _fit(config, store, repo_root, show_progress=show_progress)
    t = config.training
    assert t is not None
    root = store.root / "adapters" / t.adapter_name
    return TrainingRecord(
        adapter_name=t.adapter_name, served_at=config.models[t.role].api_base or "", adapter_dir=str(root / "seed-0"),
        adapters_root=str(root), dataset_dir=r.dataset_dir, dataset_built=r.dataset_built, dataset=r.stats,
        source_pair=t.source_pair, source_trajectories=n_source, seeds_trained=r.seeds_trained,
        seeds_reused=r.seeds_reused, final_loss=r.final_loss,
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
