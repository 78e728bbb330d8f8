"""The `imitation_data` stage without Ray or a server: its planned rollouts (the oracle expert and the flawed
student, SIMULATED, on the train split, run here through the real rollout runtime in place of the pool), the set
built once and found by content key on resume, and the dataset `train_adapter` renders from it.

The whole stage inside `coevo run` (pool, Prefect retries, training, serving) runs against the real vLLM server
in tests/test_flows_evaluation.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tasks
from agents.rollout import run_episode
from flows.config import ConfigError, parse_config
from flows.evaluation.imitation import STAGE, build_imitation_data, data_chunks, data_key
from flows.store import RunStore
from flows.evaluation.training import prepare_dataset


def _raw(tmp_path: Path, tiny: Path) -> dict:
    return {
        "runs_dir": str(tmp_path / "runs"),
        "servers": [{"model": str(tiny), "name": "tiny", "port": 18977, "max_lora_rank": 16}],
        "models": {"student": {"model": "hosted_vllm/tiny", "api_base": "http://127.0.0.1:18977/v1"},
                   "expert": {"model": "oracle/{family}"}, "flawed": {"model": "flawed/{family}@native"}},
        "families": ["stock_alert"],
        "evaluation": {"n_instances": 2, "seeds": 1, "pairs": [{"model": "expert"}]},
        "limits": {"max_turns": 40},
        "training": {"source_pair": "expert", "base_model": str(tiny),
                     "data_instances": 3, "data_seeds": 2, "self_success_role": "flawed", "self_successes": 1},
        "lora": {"rank": 8},
        "length": {"max_len": 8192},
    }


def _run_jobs(store: RunStore, chunks: list) -> int:
    """Stand-in for the pool: every job of every chunk through run_episode, each chunk stored as the pool does."""
    async def one(job):  # noqa: ANN001, ANN202
        env = tasks.make_env(job.instance)
        try:
            return await run_episode(job.model, job.harness, env, job.seed, job.limits, tag=job.tag)
        finally:
            env.close()

    for c in chunks:
        trajs = [asyncio.run(one(j)) for j in c.jobs]
        store.write_trajectories(c.stage, c.key, trajs, harnesses=[c.jobs[0].harness])
    return sum(len(c.jobs) for c in chunks)


def test_imitation_data_runs_on_train_builds_once_and_feeds_training(tmp_path: Path, tiny_model_dir: Path) -> None:
    config = parse_config(_raw(tmp_path, tiny_model_dir))
    store = RunStore(tmp_path / "runs", "r1")
    chunks = data_chunks(config, tmp_path)
    jobs = [j for v in chunks.values() for c in v for j in c.jobs]
    assert {j.instance.split for j in jobs} == {"train"} and len(jobs) == 2 * 3 * 2
    assert {j.model.model for j in jobs} == {"oracle/stock_alert", "flawed/stock_alert@native"}
    with pytest.raises(RuntimeError, match="rollout chunk"):
        build_imitation_data(config, store, tmp_path)  # the rollouts must be stored first
    for v in chunks.values():
        _run_jobs(store, v)

    rec = build_imitation_data(config, store, tmp_path)
    assert rec.built and rec.expert_read == 6 and rec.key == data_key(config, chunks)
    assert rec.card.mix.taken == {"correction": 0, "self_success": 1, "imitation": 6} and rec.rows == 7
    rows = store.read_chunks(STAGE, [rec.key])
    assert {r.tag for r in rows} == {"imitation", "self_success"} and all(r.passed for r in rows)
    again = build_imitation_data(config, store, tmp_path)  # resume: found, not rebuilt
    assert not again.built and again.card == rec.card
    store.mark_done(STAGE, rec.key, rec.model_dump(mode="json", exclude={"card"}))

    # train_adapter's dataset: the imitation rows (a subset keeps rendering short on 2 cores), then found
    raw = _raw(tmp_path, tiny_model_dir)
    raw["training"].update(data_instances=1, data_seeds=1, self_success_role=None)
    small = parse_config(raw)
    _run_jobs(store, data_chunks(small, tmp_path)["expert"])
    srec = build_imitation_data(small, store, tmp_path)
    with pytest.raises(ValueError, match="the imitation_data stage must run before training"):
        prepare_dataset(small, store, tmp_path)
    store.mark_done(STAGE, srec.key, srec.model_dump(mode="json", exclude={"card"}))
    out, built, n = prepare_dataset(small, store, tmp_path)
    assert built and n == 1
    out2, built2, _ = prepare_dataset(small, store, tmp_path)
    assert out2 == out and not built2


def test_training_never_runs_on_val_or_test(tmp_path: Path, tiny_model_dir: Path) -> None:
    raw = _raw(tmp_path, tiny_model_dir)
    raw["training"]["data_split"] = "test"
    with pytest.raises(ConfigError, match=r"training.data_split: Input should be 'train' or 'pretrain'"):
        parse_config(raw)
    raw = _raw(tmp_path, tiny_model_dir)
    raw["training"].update(data_split="pretrain", data_instances=None)
    raw["evaluation"]["n_instances"] = None
    with pytest.raises(ConfigError, match=r"training.data_instances: the pretrain split is unbounded"):
        parse_config(raw)
    raw = _raw(tmp_path, tiny_model_dir)
    raw["training"]["self_success_role"] = "nobody"
    with pytest.raises(ConfigError, match=r"training.self_success_role: role 'nobody' is not defined"):
        parse_config(raw)
