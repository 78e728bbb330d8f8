"""The `imitation_data` stage's work: rollouts on the training split -> the imitation set the adapter trains on.

    chunks = data_chunks(config, repo_root)           # the expert's (and the student's) rollouts to run or find
    record = build_imitation_data(config, store, repo_root)   # flows/evaluation/flow.py wraps both in a Prefect task

1. Rollouts (run by flows/evaluation/flow.py's chunk runner, resumable per chunk): the source pair's model and harness
   on the first `training.data_instances` of `training.data_split` (train by default; val and test are never
   trained on), `training.data_seeds` seeds; with `training.self_success_role`, that role under the same harness.
   Stored under `trajectories/imitation_data/<expert|self>/`.
2. The set (correction/imitation.py): score-1.0 expert rows in the student's format under h, own successes mixed
   in, the leakage guard on every row; stored as `trajectories/imitation_data/<key>.parquet` with its card beside
   it. The key hashes the chunk keys and the mix, so a resumed run finds the set and builds nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from correction.imitation import DATA_FILTER, ImitationCard, build_imitation_set
from correction.mix import MixConfig
from flows.config import RunConfig
from flows.plan import Chunk, RolloutSpec, harness_for, plan
from flows.store import RunStore, content_key

log = logging.getLogger(__name__)

STAGE = "imitation_data"
TAG = "imitation_data"


class ImitationDataRecord(BaseModel):
    """What `imitation_data` made (JSON-able: a `state.json` entry)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="Content key: the set is trajectories/imitation_data/<key>.parquet.")
    built: bool = Field(description="False when the set was found in the store (resume).")
    rows: int
    expert_read: int = Field(description="Source-pair rollouts on the data split read from the store.")
    card: ImitationCard


def _mix(config: RunConfig) -> MixConfig:
    t = config.training
    assert t is not None
    return MixConfig(corrections=0, self_successes=t.self_successes, imitation=None)


def _spec(config: RunConfig, name: str, role: str) -> RolloutSpec:
    t = config.training
    assert t is not None
    pair = next(p for p in config.evaluation.pairs if p.name == t.source_pair)
    ev = config.evaluation
    return RolloutSpec(name=name, model=config.role_template(role, pair.adapter if role == pair.model else None),
                       harness=pair.harness, families=config.family_names(), split=t.data_split,
                       n_instances=t.data_instances or ev.n_instances, seeds=t.data_seeds or ev.seeds,
                       limits=config.limits, tag=TAG, tool_choice=pair.tool_choice, stage=f"{STAGE}/{name}")


def data_chunks(config: RunConfig, repo_root: Path) -> dict[str, list[Chunk]]:
    """{'expert': chunks, 'self': chunks (empty without `self_success_role`)} of the data-split rollouts."""
    t = config.training
    assert t is not None
    pair = next(p for p in config.evaluation.pairs if p.name == t.source_pair)
    out = {"expert": plan(_spec(config, "expert", pair.model), repo_root), "self": []}
    if t.self_success_role is not None:
        out["self"] = plan(_spec(config, "self", t.self_success_role), repo_root)
    return out


def data_key(config: RunConfig, chunks: dict[str, list[Chunk]]) -> str:
    return content_key(STAGE, {k: sorted(c.key for c in v) for k, v in chunks.items()}, DATA_FILTER,
                       _mix(config).model_dump())


def _seed(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def build_imitation_data(config: RunConfig, store: RunStore, repo_root: Path) -> ImitationDataRecord:
    """Build (or find) the imitation set from the stored data-split rollouts (they must all be stored)."""
    t = config.training
    assert t is not None
    chunks = data_chunks(config, repo_root)
    key = data_key(config, chunks)
    card_path = store.trajectory_path(STAGE, key).with_suffix(".card.json")
    missing = [c.key for v in chunks.values() for c in v if not store.has(c.stage, c.key)]
    if missing:
        raise RuntimeError(f"{STAGE}: {len(missing)} rollout chunk(s) are not stored yet (e.g. {missing[0]})")
    expert = store.read_chunks(f"{STAGE}/expert", [c.key for c in chunks["expert"]])
    if store.has(STAGE, key) and card_path.exists():
        card = ImitationCard.model_validate_json(card_path.read_text())
        return ImitationDataRecord(key=key, built=False, rows=len(card.sources), expert_read=len(expert), card=card)
    own = store.read_chunks(f"{STAGE}/self", [c.key for c in chunks["self"]])
    if not any(x.passed for x in expert):
        raise ValueError(f"training.source_pair: none of the {len(expert)} rollouts of '{t.source_pair}' on the "
                         f"{t.data_split} split passed; there is nothing to imitate")
    harness = next(p for p in config.evaluation.pairs if p.name == t.source_pair).harness
    built = build_imitation_set(expert, own, lambda fam: harness_for(harness, fam, repo_root), _mix(config),
                                random.Random(_seed(key)))
    store.write_trajectories(STAGE, key, built.trajectories, harnesses=[])  # rows keep their rollouts' harness ids
    tmp = card_path.with_name(card_path.name + ".tmp")
    tmp.write_text(json.dumps(built.card.model_dump(mode="json"), indent=2))
    tmp.replace(card_path)
    log.info("%s %s: %d rows (%s)", STAGE, key, len(built.trajectories), built.card.mix.taken)
    return ImitationDataRecord(key=key, built=True, rows=len(built.trajectories), expert_read=len(expert),
                               card=built.card)
