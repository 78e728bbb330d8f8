"""Run config validation, preflight and the evaluation plan of a round's pairs (no Prefect, no server)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.config import ConfigError, RunConfig, load_config, parse_config, preflight, read_config_data, resolved
from flows.plan import Chunk, api_bases
from flows.store import RunStore
from training.config import LengthRule, TrainConfig

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
        ({"families": ["payroll_audit", "code_refactor"],
          "round": {"stages": ["evaluate_h0"], "correction": {"expert": "showwork/{family}@values"}}},
         "round.correction.expert: showwork/code_refactor@values: code_refactor's policy has no program 'values'"),
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


SHIPPED = sorted((REPO / "deploy" / "configs").glob("*.yaml"))
OFFLINE_PROVIDERS = {"hosted_vllm", "oracle", "flawed", "showwork"}  # ours: no key, no network


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_parses_and_passes_dry_run(path: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """What CI runs for each file in deploy/configs: parse (extends merged), plan and check, start nothing. The GPU
    configs pass here too: weights and keys missing on this machine are warnings of the dry run, not errors."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["run", "--config", str(path), "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "config OK (dry run: nothing started)" in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("path", [p for p in SHIPPED if not p.name.startswith("gpu_")], ids=lambda p: p.name)
def test_local_configs_run_offline_on_this_machine(path: Path) -> None:
    """The CPU configs need no GPU, no API key and no network: every role is one of our own models, every
    hosted_vllm role is served by a CPU server on loopback that the run starts itself."""
    cfg = load_config(path)
    assert all(s.device == "cpu" and s.host == "127.0.0.1" and not s.api_key_env for s in cfg.servers)
    models = [m.model for m in cfg.models.values()]
    if cfg.round is not None:
        c = cfg.round.correction
        models += [m for m in (c.expert, c.locator_expert) if m and m not in cfg.models]
    assert {m.split("/", 1)[0] for m in models} <= OFFLINE_PROVIDERS, models
    for name, role in cfg.models.items():
        assert not (role.api_key_env or role.api_key_secret), name
        assert role.provider != "hosted_vllm" or cfg.server_for(role) is not None, f"{name}: no managed server"


@pytest.mark.parametrize("path", [p for p in SHIPPED if load_config(p).round is not None], ids=lambda p: p.name)
def test_a_round_serves_its_student_weights_from_one_key(path: Path) -> None:
    """`round.student_weights` is the student key: the student's server serves those weights (and the merged
    student replaces both); make run's are committed, so it never builds a model."""
    cfg = load_config(path)
    assert cfg.round is not None
    server = cfg.server_for(cfg.models[cfg.round.student])
    assert server is not None and server.model == cfg.round.student_weights
    if not path.name.startswith("gpu_"):
        assert (REPO / cfg.round.student_weights / "model.safetensors").exists()


def _yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_extends_overlays_the_base_by_deep_merge(tmp_path: Path) -> None:
    base = _base(tmp_path)
    base["limits"] = {"max_turns": 12, "wall_s": 60}
    _yaml(tmp_path / "base.yaml", base)
    _yaml(tmp_path / "mid.yaml", {"extends": "base.yaml", "name": "mid", "evaluation": {"seeds": 5}})
    top = _yaml(tmp_path / "over" / "top.yaml", {  # a chain, each path relative to the file that names it
        "extends": "../mid.yaml", "limits": {"wall_s": 30},  # a mapping merges key by key
        "families": ["anomaly_detection"],  # a list replaces
        "evaluation": {"n_instances": None}})  # null replaces too
    cfg = load_config(top)
    assert cfg.name == "mid" and cfg.families == ["anomaly_detection"]
    assert (cfg.limits.max_turns, cfg.limits.wall_s) == (12, 30)
    assert (cfg.evaluation.seeds, cfg.evaluation.n_instances) == (5, None)
    assert cfg.models["expert"].model == "oracle/{family}"  # untouched keys come from the root of the chain
    assert "extends" not in read_config_data(top)
    assert parse_config(read_config_data(tmp_path / "mid.yaml")).limits.wall_s == 60  # the base file is unchanged


def test_extends_refuses_a_cycle_and_a_missing_base(tmp_path: Path) -> None:
    a = _yaml(tmp_path / "a.yaml", {"extends": "b.yaml", "name": "a"})
    _yaml(tmp_path / "b.yaml", {"extends": "a.yaml", "name": "b"})
    with pytest.raises(ConfigError, match=r"a\.yaml: extends: cycle .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        load_config(a)
    me = _yaml(tmp_path / "me.yaml", {"extends": "me.yaml"})
    with pytest.raises(ConfigError, match="extends: cycle"):
        load_config(me)
    lost = _yaml(tmp_path / "lost.yaml", {"extends": "nowhere.yaml"})
    with pytest.raises(ConfigError, match=r"lost\.yaml: extends: base config .*nowhere\.yaml not found"):
        load_config(lost)
    result = CliRunner().invoke(app, ["run", "--config", str(a), "--dry-run"])
    assert result.exit_code == 2 and "extends: cycle" in result.output


def test_the_merged_config_is_validated_and_a_bad_key_named(tmp_path: Path) -> None:
    _yaml(tmp_path / "base.yaml", _base(tmp_path))
    typo = _yaml(tmp_path / "typo.yaml", {"extends": "base.yaml", "evaluation": {"seedz": 2}})
    with pytest.raises(ConfigError, match=r"typo\.yaml \(extends .*base\.yaml\): evaluation\.seedz: unknown key"):
        load_config(typo)
    # the overlay's pairs are checked against the roles of its base, after the merge
    judge = _yaml(tmp_path / "judge.yaml", {"extends": "base.yaml", "evaluation": {"pairs": [
        {"model": "student"}, {"model": "judge"}]}})
    with pytest.raises(ConfigError, match="evaluation.pairs.1.model: role 'judge' is not defined under `models`"):
        load_config(judge)


def test_the_run_directory_keeps_the_resolved_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run_rounds` writes runs/<id>/config.yaml before any stage: the merged config with every default, which
    a resumed run reads without the files it extended."""
    import flows.round.flow as round_flow

    monkeypatch.setattr(round_flow, "preflight", lambda *a, **k: None)  # checked by the dry-run test above
    monkeypatch.setattr(round_flow, "_refuse_placement", lambda *a, **k: None)
    monkeypatch.setattr(round_flow, "_rounds_locked", lambda *a, **k: "stages would start here")
    over = _yaml(tmp_path / "over.yaml", {"extends": str(REPO / "deploy" / "configs" / "local.yaml"),
                                          "name": "over", "runs_dir": str(tmp_path / "runs")})
    cfg = load_config(over)
    assert round_flow.run_rounds(cfg, run_id="r-1", base=REPO) == "stages would start here"
    stored = RunStore.open_existing(tmp_path / "runs", "r-1").load_config_dict()
    assert stored == resolved(cfg) and "extends" not in stored
    assert stored["round"]["correction"]["locator"] == "counterfactual"  # a default, filled in
    assert parse_config(stored) == cfg
    from flows.provenance import code_version, read_starts

    starts = read_starts(tmp_path / "runs" / "r-1")  # and runs/<id>/code.json: the commit this start ran
    assert len(starts) == 1 and starts[0].commit == code_version(REPO).commit


def test_config_show_prints_the_merged_file_and_resolved_every_default(tmp_path: Path) -> None:
    path = REPO / "deploy" / "configs" / "micro_study.yaml"
    merged = CliRunner().invoke(app, ["config", "show", str(path)])
    assert merged.exit_code == 0, merged.output
    data = yaml.safe_load(merged.output)
    assert data == read_config_data(path) and "extends" not in data
    assert data["servers"][0]["name"] == "micro" and "locator" not in data["round"]["correction"]  # base's; no defaults
    full = CliRunner().invoke(app, ["config", "show", "--resolved", str(path)])
    assert full.exit_code == 0, full.output
    assert yaml.safe_load(full.output) == resolved(load_config(path))
    bad = _yaml(tmp_path / "bad.yaml", {"extends": str(path), "round": {"gate": {"rul": "gain"}}})
    refused = CliRunner().invoke(app, ["config", "show", str(bad)])
    assert refused.exit_code == 2 and "round.gate.rul: unknown key" in refused.output


def test_config_schema_lists_every_field_with_type_default_and_description() -> None:
    from flows.cli.config import rows

    by_path = {r.path: r for r in rows()}
    budget = by_path["round.search.budget_rollouts"]
    assert (budget.type, budget.default) == ("int, >= 1", "60") and "GEPA" in budget.description
    assert by_path["models.<name>.model"].default == "required"
    assert by_path["servers[].tool_call_parser"].default == '"hermes"'
    assert by_path["lora.rank"].default == "16"  # the records nested from other rooms are walked too
    assert all(r.description for r in rows()), [r.path for r in rows() if not r.description]
    result = CliRunner().invoke(app, ["config", "schema"])
    assert result.exit_code == 0 and "| `round.gate.rule` |" in result.output


def test_docs_configuration_md_is_what_the_code_generates() -> None:
    from flows.cli.config import REGENERATE, schema_markdown

    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == schema_markdown(), f"docs/configuration.md is stale: regenerate it with `{REGENERATE}`"


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


def _pair_chunks(cfg: RunConfig, i: int, store_dir: Path) -> list[Chunk]:
    """The chunks the round's `evaluate_pairs` stage plans for `evaluation.pairs[i]` (one per rollout)."""
    from flows.round.context import RoundContext, RoundState
    from flows.round.eval import pair_chunks
    from flows.round.stages import config_pair

    ctx = RoundContext(config=cfg, store=RunStore(store_dir, "r0"), base=REPO,
                       state=RoundState(t=0, student_model="-", student_weights="", start_harness="baseline"))
    ev = cfg.evaluation
    return pair_chunks(ctx, config_pair(ctx, ev.pairs[i]), ev.split, ev.n_instances, ev.seeds, "eval")


def test_plan_chunks_keys_and_family_placeholder(tmp_path: Path) -> None:
    cfg = parse_config({**_base(tmp_path), "families": ["payroll_audit", "anomaly_detection"]})
    expert = _pair_chunks(cfg, 1, tmp_path)
    assert [(c.family, c.seed, c.jobs[0].instance.id) for c in expert] == [
        (f, s, f"{f}/{i}") for f in ("payroll_audit", "anomaly_detection") for s in (0, 1) for i in (40, 41)]
    assert {j.model.model for c in expert for j in c.jobs} == {"oracle/payroll_audit", "oracle/anomaly_detection"}
    assert all(len(c.jobs) == 1 and c.stage == "eval/pairs.expert" for c in expert)
    assert len({c.key for c in expert}) == 8
    # the key ignores where the model is served, and follows what changes the rollouts
    student = _pair_chunks(cfg, 0, tmp_path)
    moved = parse_config({**_base(tmp_path, port=18932), "families": ["payroll_audit", "anomaly_detection"]})
    assert [c.key for c in _pair_chunks(moved, 0, tmp_path)] == [c.key for c in student]
    hotter = parse_config({**_base(tmp_path), "families": ["payroll_audit", "anomaly_detection"],
                           "models": {**_base(tmp_path)["models"], "student": {
                               "model": "hosted_vllm/tiny", "api_base": "http://127.0.0.1:18931/v1", "temperature": 0.7}}})
    assert not {c.key for c in _pair_chunks(hotter, 0, tmp_path)} & {c.key for c in student}
    assert api_bases(cfg) == {"hosted_vllm/tiny": ["http://127.0.0.1:18931/v1"]}


def test_deployment_overrides_make_a_valid_config(tmp_path: Path) -> None:
    from flows.ops.deployments import apply_overrides

    raw = load_config(REPO / "deploy" / "configs" / "local.yaml").model_dump(mode="json")
    data = apply_overrides(raw, model="hosted_vllm/tiny", api_base="http://10.0.0.5:8000/v1", adapter="student@r1",
                           adapter_path="runs/x/adapters/r1", harness="runs/x/h_star.yaml", full=True)
    cfg = parse_config(data)
    assert cfg.models["student"].api_base == "http://10.0.0.5:8000/v1"
    assert [p.name for p in cfg.evaluation.pairs] == ["student+h_star", "student@r1+h_star", "expert+h_star"]
    assert cfg.adapters[0].server == cfg.servers[0].name and cfg.evaluation.n_instances is None
    assert cfg.round.stages == ["evaluate_pairs", "attribute", "report"]  # the round that evaluates the pairs
    assert raw["evaluation"]["pairs"][0]["harness"] == "baseline"  # the input is not mutated
    with pytest.raises(ConfigError, match="adapters.0.path"):
        preflight(cfg, REPO)


def test_a_pair_and_the_rollout_command_plan_through_one_spec(tmp_path: Path) -> None:
    from agents.records import ModelRole
    from flows.plan import RolloutSpec, plan

    cfg = parse_config({**_base(tmp_path), "families": ["payroll_audit", "anomaly_detection"]})
    # what `coevo rollout --model 'oracle/{family}' --split test --n 2 --seeds 2 --tag eval` builds from its options
    by_hand = RolloutSpec(name="expert", model=ModelRole(model="oracle/{family}"), families=["payroll_audit", "anomaly_detection"],
                          split="test", n_instances=2, seeds=2, limits=cfg.limits, tag="eval")
    chunks = plan(by_hand, REPO)
    # the same jobs as the round's evaluation of the configured pair: one rollout is one job key wherever it runs
    assert [j.key for c in chunks for j in c.jobs] == [j.key for c in _pair_chunks(cfg, 1, tmp_path) for j in c.jobs]
    # another tag (the rollout command's default) is another set of trajectories
    other = plan(by_hand.model_copy(update={"tag": "rollout"}), REPO)
    assert not {c.key for c in other} & {c.key for c in chunks}
    assert {j.tag for c in other for j in c.jobs} == {"rollout"}
    # the adapter pair's spec calls the role under the adapter's served name
    with_adapter = parse_config({**_base(tmp_path), "adapters": [{"name": "student@r1", "path": "x", "server": "tiny"}],
                                 "evaluation": {"pairs": [{"model": "student", "adapter": "student@r1"}]}})
    assert {j.model.model for c in _pair_chunks(with_adapter, 0, tmp_path) for j in c.jobs} == {"hosted_vllm/student@r1"}


def test_a_run_stored_before_the_lora_move_still_loads_with_its_settings(tmp_path: Path) -> None:
    """`round.lora` / `round.length` in a run's stored config (written before they moved to the top level) are read
    there, so the run resumes with the settings it trained with; a user's config in the old layout is refused."""
    config = load_config(REPO / "deploy/configs/local.yaml")
    old = config.model_dump(mode="json")
    old["round"]["lora"], old["round"]["length"] = old.pop("lora"), old.pop("length")
    with pytest.raises(ConfigError, match=r"round\.lora: the training settings have one home"):
        parse_config(old)
    store = RunStore(tmp_path, "old-run")
    store.save_config(old)
    again = parse_config(store.load_config_dict(), str(store.root / "config.yaml"))
    assert again.lora == config.lora and again.length == config.length
    assert config.lora != TrainConfig() and config.length != LengthRule()  # local.yaml's own, not the defaults


def test_the_gate_judges_on_val_instances_the_search_did_not_use(tmp_path: Path) -> None:
    """The gate's val instances come after the search's: an overlap (or a search on all 20) is refused naming the
    key; the round's plan skips the search's instances; a round that trains is refused on a split other than test."""
    assert load_config(REPO / "deploy/configs/local.yaml").round.gate_instances() == (5, 5)  # val 20-24 | 25-29
    config = load_config(REPO / "deploy/configs/micro_study.yaml")
    raw = config.model_dump(mode="json")
    assert config.round.gate_instances() == (10, 10)
    raw["round"]["gate"]["val_instances"] = 11
    with pytest.raises(ConfigError, match=r"gate\.val_instances: 11 \+ search\.val_instances 10 > the 20 val"):
        parse_config(raw)
    raw["round"]["gate"]["val_instances"], raw["round"]["search"]["val_instances"] = None, None
    with pytest.raises(ConfigError, match=r"search\.val_instances: null \(all 20\) leaves no val instance"):
        parse_config(raw)
    raw["round"]["search"]["val_instances"] = 12
    assert parse_config(raw).round.gate_instances() == (12, 8)  # null: every val instance the search does not use
    raw["evaluation"]["split"] = "val"
    with pytest.raises(ConfigError, match="evaluation.split: 'val' in a round that trains"):
        parse_config(raw)
    raw["round"]["stages"] = ["evaluate_h0", "attribute", "report"]  # an evaluation-only round may read val
    assert parse_config(raw).evaluation.split == "val"
    raw = config.model_dump(mode="json")
    raw["round"]["arms"] = ["imit", "self"]
    with pytest.raises(ConfigError, match="'self' trains on exactly the own successes the correction arm adds"):
        parse_config(raw)


def test_a_run_stored_before_the_evidence_gate_still_loads_with_the_gate_apart_from_the_search(
        tmp_path: Path) -> None:
    """A stored round without `gate.seed_choice` (the gate on the first N val instances, overlapping the search's):
    it reads forward onto the val instances the search does not use; a search on all 20 onto the first 10."""
    config = load_config(REPO / "deploy/configs/micro_study.yaml")
    old = config.model_dump(mode="json")
    del old["round"]["gate"]["seed_choice"]
    old["round"]["search"]["val_instances"], old["round"]["gate"]["val_instances"] = 20, 20  # the old defaults
    with pytest.raises(ConfigError, match="leaves no val instance for the gate"):
        parse_config(old)
    store = RunStore(tmp_path, "old-run")
    store.save_config(old)
    again = parse_config(store.load_config_dict(), str(store.root / "config.yaml"))
    assert again.round.gate_instances() == (10, 10) and again.round.gate.seed_choice == "average"
    old["round"]["search"]["val_instances"], old["round"]["gate"]["val_instances"] = 10, 10  # the study's
    store.save_config(old)
    kept = parse_config(store.load_config_dict(), str(store.root / "config.yaml"))
    assert kept.round.gate_instances() == (10, 10) and kept.round.search == config.round.search


def test_dry_run_prints_the_newest_finished_round_of_a_run_of_this_name(tmp_path: Path) -> None:
    """A round stopped after its search (its arm stages not run) is no measurement of a round."""
    from flows.round.plan import measured_rounds

    config = load_config(REPO / "deploy/configs/local.yaml").model_copy(update={"runs_dir": "runs"})
    runs = tmp_path / "runs"
    assert measured_rounds(config, tmp_path) == []  # no runs: nothing claimed, nothing created
    assert not runs.exists()

    def run(run_id: str, name: str, rounds: dict[str, list[float]], stopped: str = "") -> None:
        store = RunStore(runs, run_id)
        store.save_config({"name": name})
        for t, walls in rounds.items():
            store.mark_done("rounds", t, {"stages": [{"stage": f"s{i}", "wall_s": w} for i, w in enumerate(walls)],
                                          "stopped": stopped if t == max(rounds) else ""})

    run("20261201-000000-local", config.name, {"r0": [60.0, 120.0]})
    run("20261202-000000-local", config.name, {"r0": [600.0, 60.0], "r1": [1200.0, 600.0, 180.0, 60.0],
                                               "r2": [30.0, 40.0]}, stopped="r2's search accepted no edit")
    run("20261203-000000-other", "other", {"r0": [6000.0]})  # newer, another config's name
    run("20261204-000000-local", config.name, {})  # newest of this name, no round finished yet
    assert measured_rounds(config, tmp_path) == [
        "measured: run 20261202-000000-local, round r1: 34 min of stage time (s0 20, s1 10, s2 3 min; on the "
        "machine and load that ran it)"]
