"""Run config validation, preflight and the evaluation plan (no Prefect, no server)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.config import ConfigError, load_config, parse_config, preflight
from flows.plan import api_bases, plan_pair

REPO = Path(__file__).resolve().parent.parent


def _base(tmp_path: Path, port: int = 18931) -> dict:
    return {
        "name": "t",
        "runs_dir": str(tmp_path / "runs"),
        "servers": [{"model": str(tmp_path / "no-model-here"), "name": "tiny", "port": port}],
        "models": {"student": {"model": "hosted_vllm/tiny", "api_base": f"http://127.0.0.1:{port}/v1"},
                   "expert": {"model": "oracle/{family}"}},
        "families": ["payroll_audit"],
        "evaluation": {"n_instances": 2, "seeds": 2},
    }


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"families": ["payroll_audit", "no_such_family"]}, "families: unknown task family 'no_such_family'"),
        ({"evaluation": {"seeds": -3}}, "evaluation.seeds"),
        ({"evaluation": {"pairs": [{"model": "student"}, {"model": "judge"}]}}, "evaluation.pairs.1.model"),
        ({"models": {"expert": {"model": "oracle/{family}"}}}, "evaluation.pairs.0.model: role 'student'"),
        (None, "servers.0.model: model directory"),  # the server's model directory is missing
    ],
)
def test_bad_config_fails_before_any_server_starts(tmp_path: Path, patch: dict | None, key: str) -> None:
    cfg = _base(tmp_path)
    cfg.update(patch or {})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(app, ["run", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert key in " ".join(result.output.split()), result.output
    assert not _port_open(18931)  # no vLLM was started
    assert not (tmp_path / "runs").exists()  # and no run directory either


def test_local_config_is_valid_and_small(tmp_path: Path) -> None:
    cfg = load_config(REPO / "deploy" / "configs" / "local_eval.yaml")  # the evaluation-only job (old make run)
    preflight(cfg, REPO)  # the tiny model may be missing: `tiny_model.out` says the run builds it
    assert [p.name for p in cfg.evaluation.pairs] == ["student", "expert"] and cfg.round is None
    assert cfg.evaluation.seeds == 3 and cfg.evaluation.split == "test" and cfg.families == ["all"]
    assert cfg.models["expert"].model == "oracle/{family}"
    assert cfg.evaluation.n_instances is not None and cfg.evaluation.n_instances <= 5
    # make run: one co-evolution round on the committed micro student, its weights behind one key (servers follow it)
    rnd = load_config(REPO / "deploy" / "configs" / "local.yaml")
    preflight(rnd, REPO)
    assert rnd.round is not None and rnd.models["expert"].model == "flawed/{family}@expert"
    assert rnd.servers[0].model == rnd.round.student_weights == "deploy/micro" and rnd.tiny_model is None
    assert (REPO / rnd.round.student_weights / "model.safetensors").exists()  # committed: make run never builds it


def test_gpu_paper_config_parses() -> None:
    cfg = load_config(REPO / "deploy" / "configs" / "gpu_paper.yaml")
    (server,) = cfg.servers
    assert server.device == "gpu" and server.tensor_parallel_size == 2 and server.tool_call_parser == "qwen3_coder"
    assert cfg.evaluation.n_instances is None and cfg.evaluation.seeds == 3


def test_placeholders_and_adapters_are_checked(tmp_path: Path) -> None:
    cfg = _base(tmp_path)
    with pytest.raises(ConfigError, match="models.student.model: .*only contain the placeholder"):
        parse_config({**cfg, "models": {**cfg["models"], "student": {"model": "hosted_vllm/{name}"}}})
    with pytest.raises(ConfigError, match="evaluation.pairs.0.adapter"):
        parse_config({**cfg, "evaluation": {"pairs": [{"model": "student", "adapter": "student@r1"}]}})
    with pytest.raises(ConfigError, match="adapters.0.server"):
        parse_config({**cfg, "adapters": [{"name": "student@r1", "path": "x", "server": "other"}]})
    with pytest.raises(ConfigError, match="evaluation.pairs: .*repeat"):
        parse_config({**cfg, "evaluation": {"pairs": [{"model": "student"}, {"model": "student"}]}})


def test_preflight_names_missing_files_and_api_base(tmp_path: Path) -> None:
    cfg = _base(tmp_path)
    cfg["servers"] = []
    ok = parse_config(cfg)
    preflight(ok, tmp_path)
    no_base = parse_config({**cfg, "models": {**cfg["models"], "student": {"model": "hosted_vllm/tiny"}}})
    with pytest.raises(ConfigError, match="models.student.api_base"):
        preflight(no_base, tmp_path)
    bad_h = parse_config({**cfg, "evaluation": {"pairs": [{"model": "expert", "harness": "nope.yaml"}]}})
    with pytest.raises(ConfigError, match="evaluation.pairs.0.harness"):
        preflight(bad_h, tmp_path)
    too_many = parse_config({**cfg, "evaluation": {"n_instances": 61}})
    with pytest.raises(ConfigError, match="evaluation.n_instances"):
        preflight(too_many, tmp_path)


def test_plan_chunks_keys_and_family_placeholder(tmp_path: Path) -> None:
    cfg = parse_config({**_base(tmp_path), "families": ["payroll_audit", "anomaly_detection"]})
    expert = plan_pair(cfg, cfg.evaluation.pairs[1], REPO)
    assert [(c.family, c.seed) for c in expert] == [("payroll_audit", 0), ("payroll_audit", 1),
                                                     ("anomaly_detection", 0), ("anomaly_detection", 1)]
    assert {j.model.model for c in expert for j in c.jobs} == {"oracle/payroll_audit", "oracle/anomaly_detection"}
    assert all(len(c.jobs) == 2 and c.stage == "evaluate/expert" for c in expert)
    assert [j.instance.id for j in expert[0].jobs] == ["payroll_audit/40", "payroll_audit/41"]
    assert len({c.key for c in expert}) == 4
    # the key ignores where the model is served, and follows what changes the rollouts
    student = plan_pair(cfg, cfg.evaluation.pairs[0], REPO)
    moved = parse_config({**_base(tmp_path, port=18932), "families": ["payroll_audit", "anomaly_detection"]})
    assert [c.key for c in plan_pair(moved, moved.evaluation.pairs[0], REPO)] == [c.key for c in student]
    hotter = parse_config({**_base(tmp_path), "families": ["payroll_audit", "anomaly_detection"],
                           "models": {**_base(tmp_path)["models"], "student": {
                               "model": "hosted_vllm/tiny", "api_base": "http://127.0.0.1:18931/v1", "temperature": 0.7}}})
    assert not {c.key for c in plan_pair(hotter, hotter.evaluation.pairs[0], REPO)} & {c.key for c in student}
    assert api_bases(cfg) == {"hosted_vllm/tiny": ["http://127.0.0.1:18931/v1"]}


def test_deployment_overrides_make_a_valid_config(tmp_path: Path) -> None:
    from flows.deployments import apply_overrides

    raw = load_config(REPO / "deploy" / "configs" / "local.yaml").model_dump(mode="json")
    data = apply_overrides(raw, model="hosted_vllm/tiny", api_base="http://10.0.0.5:8000/v1", adapter="student@r1",
                           adapter_path="runs/x/adapters/r1", harness="runs/x/h_star.yaml", full=True)
    cfg = parse_config(data)
    assert cfg.models["student"].api_base == "http://10.0.0.5:8000/v1"
    assert [p.name for p in cfg.evaluation.pairs] == ["student+h_star", "student@r1+h_star", "expert+h_star"]
    assert cfg.adapters[0].server == cfg.servers[0].name and cfg.evaluation.n_instances is None
    assert cfg.attribution is not None and cfg.attribution.base_pair == "student+h_star"  # follows the rename
    assert cfg.attribution.shifts == [("student+h_star", "expert+h_star")]
    assert raw["evaluation"]["pairs"][0]["harness"] == "baseline"  # the input is not mutated
    with pytest.raises(ConfigError, match="adapters.0.path"):
        preflight(cfg, REPO)


def test_a_pair_and_the_rollout_command_plan_through_one_spec(tmp_path: Path) -> None:
    from agents.records import ModelRole
    from flows.plan import RolloutSpec, pair_spec, plan

    cfg = parse_config({**_base(tmp_path), "families": ["payroll_audit", "anomaly_detection"]})
    expert = cfg.evaluation.pairs[1]
    spec = pair_spec(cfg, expert)
    # what `coevo rollout --model 'oracle/{family}' --split test --n 2 --seeds 2 --tag eval` builds from its options
    by_hand = RolloutSpec(name="expert", model=ModelRole(model="oracle/{family}"), families=["payroll_audit", "anomaly_detection"],
                          split="test", n_instances=2, seeds=2, limits=cfg.limits, tag="eval")
    assert by_hand == spec
    chunks = plan(by_hand, REPO)
    assert [(c.key, [j.key for j in c.jobs]) for c in chunks] == \
        [(c.key, [j.key for j in c.jobs]) for c in plan_pair(cfg, expert, REPO)]
    # another tag (the rollout command's default) is another set of trajectories
    other = plan(by_hand.model_copy(update={"tag": "rollout"}), REPO)
    assert not {c.key for c in other} & {c.key for c in chunks}
    assert {j.tag for c in other for j in c.jobs} == {"rollout"}
    # the adapter pair's spec calls the role under the adapter's served name
    with_adapter = parse_config({**_base(tmp_path), "adapters": [{"name": "student@r1", "path": "x", "server": "tiny"}],
                                 "evaluation": {"pairs": [{"model": "student", "adapter": "student@r1"}]}})
    assert pair_spec(with_adapter, with_adapter.evaluation.pairs[0]).model.model == "hosted_vllm/student@r1"
