"""The training settings of a run config (`lora:`, `length:`) and the round that trains: validation naming the key,
the removed `training:` section, the shipped imitation config (no server).

The train stage itself (build the set, train, serve, evaluate the adapter, resume) is exercised against the real
vLLM server in tests/test_flows_round.py.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from flows.config import ConfigError, load_config, parse_config, preflight
from training.config import LengthRule, TrainConfig

REPO = Path(__file__).resolve().parent.parent


def _base(tmp_path: Path) -> dict:
    return {
        "runs_dir": str(tmp_path / "runs"),
        "servers": [{"model": str(tmp_path), "name": "tiny", "port": 18977, "max_lora_rank": 16}],
        "models": {"student": {"model": "hosted_vllm/tiny", "api_base": "http://127.0.0.1:18977/v1"},
                   "expert": {"model": "oracle/{family}"}},
        "families": ["stock_alert"],
        "evaluation": {"n_instances": 2, "seeds": 1},
        "round": {"stages": ["evaluate_h0", "arm_data", "train", "evaluate_arms", "report"], "arms": ["imit_h0"],
                  "student_weights": str(tmp_path)},
        "lora": {"rank": 8},
    }


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"lora": {"rank": 32}}, "lora.rank: 32 > max_lora_rank 16 of server 'tiny'"),
        ({"lora": {"epochs": 0}}, "lora.epochs: Input should be greater than or equal to 1"),
        ({"lora": {"seeds": 0}}, "lora.seeds: Input should be greater than or equal to 1"),
        ({"lora": {"effective_batch": 6, "micro_batch": 4}}, "lora: effective_batch 6 must be a multiple"),
        ({"length": {"max_len": 0}}, "length.max_len: Input should be greater than 0"),
        ({"length": {"raised_max_len": 99}}, "length.raised_max_len: unknown key"),
        ({"training": {"source_pair": "expert"}}, "training: removed; an imitation adapter is a round with "
                                                  "`arms: [imit_h0]`"),
        ({"round": {"student_weights": None}}, "round.student_weights: the train stage trains on M_t's "
                                               "weights"),
        ({"models": {"student": {"model": "oracle/{family}"}}}, "round.student: 'student' is 'oracle/{family}'; "
                                                                "the round trains and hot-loads adapters"),
    ],
)
def test_bad_training_settings_name_the_key(tmp_path: Path, patch: dict, message: str) -> None:
    raw = copy.deepcopy(_base(tmp_path))
    for section, value in patch.items():
        raw[section] = {**raw[section], **value} if isinstance(raw.get(section), dict) else value
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert message in str(e.value), str(e.value)


def test_training_settings_are_the_trainers_records_with_the_recipe_defaults(tmp_path: Path) -> None:
    t = parse_config(_base(tmp_path))
    # the run config embeds the trainer's own records: what is not set is TrainConfig's / LengthRule's default
    assert type(t.lora) is TrainConfig and type(t.length) is LengthRule
    assert t.lora == TrainConfig(rank=8) and t.length == LengthRule()
    assert (t.lora.rank, t.lora.lora_alpha, t.lora.epochs, t.lora.lr, t.lora.seeds) == (8, 16, 2, 1e-4, 3)
    assert (t.length.max_len, t.length.raised_max_len, t.length.raise_above) == (49152, 98304, 0.05)
    raw = _base(tmp_path)
    raw["length"] = {"max_len": 16384}
    assert parse_config(raw).length.raised_max_len == 32768


def test_lora_settings_under_the_round_are_refused_with_their_one_home(tmp_path: Path) -> None:
    raw = _base(tmp_path)
    raw["round"]["lora"] = raw.pop("lora")
    with pytest.raises(ConfigError, match=r"round\.lora: the training settings have one home, the top-level `lora:`"):
        parse_config(raw)


def test_the_shipped_imitation_config_is_a_round_of_one_arm_without_a_search() -> None:
    config = load_config(REPO / "deploy/configs/local_train.yaml")
    assert config.round.arms == ["imit_h0"] and "evolve" not in config.round.stages and config.trains
    assert "gate" not in config.round.stages  # a round without a gate is the run's only round
    # the small config sets its small values explicitly (the defaults are the paper's)
    assert config.lora != TrainConfig() and config.length != LengthRule()
    preflight(config, REPO, model_checks=False)
