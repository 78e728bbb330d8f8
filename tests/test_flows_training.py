"""The `training:` section of a run config: validation naming the key, the adapter pair, preflight (no server).

The stage itself (train on the expert's successes, serve, evaluate the adapter, resume) is exercised
against the real vLLM server in tests/test_flows_evaluation.py.
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
        "evaluation": {"n_instances": 2, "seeds": 1, "pairs": [{"model": "expert"}]},
        "training": {"source_pair": "expert", "base_model": str(tmp_path)},
        "lora": {"rank": 8},
    }


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"source_pair": "student"}, "training.source_pair: 'student' is not an evaluation pair (pairs: expert)"),
        ({"source_pair": "student@r1"}, "training.source_pair: 'student@r1' is not an evaluation pair"),
        ({"role": "judge"}, "training.role: role 'judge' is not defined under `models`"),
        ({"role": "expert"}, "training.role: 'expert' is 'oracle/{family}'; only a hosted_vllm model"),
        ({"lora": {"rank": 32}}, "lora.rank: 32 > max_lora_rank 16 of server 'tiny'"),
        ({"adapter_name": "student/r1"}, "training.adapter_name: String should match pattern"),
        ({"lora": {"epochs": 0}}, "lora.epochs: Input should be greater than or equal to 1"),
        ({"lora": {"seeds": 0}}, "lora.seeds: Input should be greater than or equal to 1"),
        ({"lora": {"effective_batch": 6, "micro_batch": 4}}, "lora: effective_batch 6 must be a multiple"),
        ({"length": {"max_len": 0}}, "length.max_len: Input should be greater than 0"),
        ({"length": {"raised_max_len": 99}}, "length.raised_max_len: unknown key"),
        ({"learning_rate": 1e-3}, "training.learning_rate: unknown key"),
        ({"rank": 16}, "training.rank: unknown key"),  # the settings live under `lora`, declared once
    ],
)
def test_bad_training_section_names_the_key(tmp_path: Path, patch: dict, message: str) -> None:
    raw = _base(tmp_path)
    for key, value in patch.items():  # the training settings live at the top level (`lora:`, `length:`)
        (raw if key in ("lora", "length") else raw["training"])[key] = value
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert message in str(e.value)


def test_missing_source_pair_and_base_model_are_errors(tmp_path: Path) -> None:
    raw = _base(tmp_path)
    del raw["training"]["source_pair"]
    with pytest.raises(ConfigError, match=r"training.source_pair: Field required"):
        parse_config(raw)
    raw = _base(tmp_path)
    raw["training"]["base_model"] = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"training.base_model: model directory .*nowhere' does not exist"):
        preflight(parse_config(raw), tmp_path)


def test_adapter_pair_is_appended_once_and_runs_on_the_role(tmp_path: Path) -> None:
    config = parse_config(_base(tmp_path)).with_adapter_pair()
    assert [p.name for p in config.evaluation.pairs] == ["expert", "student@r1"]
    pair = config.evaluation.pairs[-1]
    assert config.is_trained_pair(pair) and not config.is_trained_pair(config.evaluation.pairs[0])
    assert config.role(pair.model, "stock_alert", pair.adapter).model == "hosted_vllm/student@r1"
    # idempotent, and a stored config that already lists the pair parses (resume)
    assert config.with_adapter_pair() is config
    again = parse_config(config.model_dump(mode="json"))
    assert [p.name for p in again.with_adapter_pair().evaluation.pairs] == ["expert", "student@r1"]
    # without evaluate_adapter no pair is added; an adapter pair is an error when nothing trains it
    raw = _base(tmp_path)
    raw["training"]["evaluate_adapter"] = False
    assert [p.name for p in parse_config(raw).with_adapter_pair().evaluation.pairs] == ["expert"]
    raw = copy.deepcopy(config.model_dump(mode="json"))
    raw["training"] = None
    with pytest.raises(ConfigError, match=r"evaluation.pairs.1.adapter: 'student@r1' is not listed under `adapters`"):
        parse_config(raw)


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


@pytest.mark.parametrize("section", ["training", "round"])
def test_lora_settings_under_a_section_are_refused_with_their_one_home(tmp_path: Path, section: str) -> None:
    raw = _base(tmp_path)
    raw.setdefault(section, {})["lora"] = raw.pop("lora")
    with pytest.raises(ConfigError, match=rf"{section}\.lora: the training settings have one home, the top-level "
                                          r"`lora:`"):
        parse_config(raw)


def test_shipped_configs(tmp_path: Path) -> None:
    assert load_config(REPO / "deploy/configs/local.yaml").training is None  # make run stays evaluation-only
    config = load_config(REPO / "deploy/configs/local_train.yaml").with_adapter_pair()
    assert config.training is not None and config.training.source_pair == "expert"
    # the small config sets its small values explicitly (the defaults are the paper's)
    assert config.lora != TrainConfig() and config.length != LengthRule()
    assert [p.name for p in config.evaluation.pairs] == ["student", "expert", "student@r1"]
    preflight(config, REPO)


def test_adapter_pair_config_survives_prefect_revalidation_and_routes_to_the_server(tmp_path: Path) -> None:
    from flows.plan import api_bases
    from flows.evaluation.training import TrainingRecord, with_trained_adapter
    from training.dataset import DatasetStats

    config = parse_config(_base(tmp_path)).with_adapter_pair()
    stats = DatasetStats(trajectories=2, examples=2, tokens=10, trained_tokens=4, dropped={}, max_len=49152,
                         max_len_raised=False, over_default_fraction=0.0, longest=5)
    record = TrainingRecord(adapter_name="student@r1", served_at="http://127.0.0.1:18977/v1",
                            adapter_dir=str(tmp_path / "a" / "seed-0"), adapters_root=str(tmp_path / "a"),
                            dataset_dir=str(tmp_path / "d"), dataset_built=True, dataset=stats, source_pair="expert",
                            source_trajectories=2, seeds_trained=[0], seeds_reused=[], final_loss={0: 1.0})
    derived = with_trained_adapter(config, record)
    # Prefect validates subflow parameters again from the model's fields: that must not fail
    again = type(derived).model_validate(derived.model_dump())
    assert [a.name for a in again.adapters] == ["student@r1"] and again.adapters[0].server == "tiny"
    assert api_bases(again)["hosted_vllm/student@r1"] == ["http://127.0.0.1:18977/v1"]
    assert [p.name for p in again.evaluation.pairs] == ["expert", "student@r1"]
