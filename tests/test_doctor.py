"""`coevo doctor` (the preflight that reads the model and the machine) on stand-in directories that carry the real
students' config.json fields and a tokenizer with Qwen's special tokens (tests/doctor_standins.py): both GPU
configs pass with 8x141GB assumed, and each failure a first real run would have hit is refused before it starts,
naming the key and the fix (or, for the correction yield, reported as a finding)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from doctor_standins import build_standin
from typer.testing import CliRunner

import trl
from flows.cli import app
from flows.cli.doctor import with_weights
from flows.config import ConfigError, parse_config, preflight
from flows.doctor import diagnose, parse_gpus

REPO = Path(__file__).resolve().parent.parent
GPUS = parse_gpus("8x141GB")


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("standins")
    return {"paper": build_standin(root / "coder", "Qwen3-Coder-30B-A3B-Instruct"),
            "dense": build_standin(root / "dense", "Qwen3-8B")}


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")  # the configs' paid roles name it


def config(name: str, weights: Path, **edits: object):
    raw = yaml.safe_load((REPO / "deploy" / "configs" / f"gpu_{name}.yaml").read_text())
    for dotted, value in edits.items():
        *path, last = dotted.split("__")
        node = raw
        for p in path:
            node = node[int(p)] if p.isdigit() else node[p]
        node[last] = value
    return with_weights(parse_config(raw), weights)


def refused(cfg, **kw) -> dict[str, str]:
    report = diagnose(cfg, REPO, GPUS, **kw)
    return {f.key: f.line() for f in report.refused}


@pytest.mark.parametrize("name", ["paper", "dense"])
def test_both_gpu_configs_pass_with_the_real_architectures(name: str, standins: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["doctor", "--config", f"deploy/configs/gpu_{name}.yaml", "--assume-gpus",
                                      "8x141GB", "--weights", str(standins[name])])
    assert result.exit_code == 0, result.output
    assert "doctor: 0 refused, 0 finding(s)" in result.output
    assert "ok      round.data.corrections" in result.output and "ok      placement" in result.output


def test_failure_1_a_hybrid_thinking_template_is_refused_and_ours_passes(standins: dict[str, Path]) -> None:
    """Qwen3's own template writes the empty think block on the last assistant turn only."""
    own = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"  # Qwen3's hybrid-thinking template
    cfg = config("dense", standins["dense"], servers__0__chat_template=str(own))
    line = refused(cfg)["servers.0.chat_template"]
    assert "not prefix-stable" in line and "fix: set servers.0.chat_template: qwen3" in line
    no_parser = refused(config("dense", standins["dense"], servers__0__reasoning_parser=None,
                               servers__0__enable_thinking=None))
    assert "fix: set reasoning_parser: qwen3, or enable_thinking: false" in no_parser["servers.0.reasoning_parser"]
    assert not refused(config("dense", standins["dense"]))


def test_failure_2_a_window_past_the_dense_model_is_refused_at_the_start(standins: dict[str, Path]) -> None:
    cfg = config("dense", standins["dense"], servers__0__max_model_len=98304, length__max_len=49152)
    found = refused(cfg)
    assert "98304 > the model's window 40960" in found["servers.0.max_model_len"]
    assert "rope_type: yarn" in found["servers.0.max_model_len"]
    assert "raised 2x to 98304" in found["length.max_len"]
    with pytest.raises(ConfigError, match=r"servers\.0\.max_model_len: 98304 > the model's window 40960"):
        preflight(cfg, REPO)  # the same check at every run's start


def test_failures_3_and_4_a_judge_without_a_server_url_or_room_to_think(standins: dict[str, Path]) -> None:
    cfg = config("dense", standins["dense"], round__correction__selector="judge:hosted_vllm/judge",
                 round__correction__locator="mle_agent:gemini/gemini-3.1-pro-preview")
    found = refused(cfg)
    assert "hosted_vllm/judge has no server URL" in found["models.judge.api_base"]
    raw = yaml.safe_load((REPO / "deploy/configs/gpu_dense.yaml").read_text())
    raw["models"]["judge"] = {"model": "hosted_vllm/judge", "api_base": "http://127.0.0.1:8001/v1", "max_tokens": 512}
    raw["round"]["correction"]["selector"] = "judge:hosted_vllm/judge"
    report = diagnose(with_weights(parse_config(raw), standins["dense"]), REPO, GPUS)
    assert not report.refused
    assert any(f.key == "models.judge.max_tokens" and "would be cut" in f.text for f in report.findings)


def test_failure_5_the_correction_yield_is_a_finding(standins: dict[str, Path]) -> None:
    report = diagnose(config("paper", standins["paper"], round__data__student_samples=8), REPO, GPUS)
    (finding,) = [f for f in report.findings if f.key == "round.data.corrections"]
    assert finding.level == "finding" and "1120 rollouts" in finding.text and "~246 < the 400 asked" in finding.text
    # the keep rule drops most corrections: at a 26% keep rate the 13 samples that give ~400 failures keep ~104
    paper = config("paper", standins["paper"])
    (enough,) = [f for f in diagnose(paper, REPO, GPUS).findings if f.key == "round.data.corrections"]
    (kept,) = [f for f in diagnose(paper, REPO, GPUS, keep_rate=0.26).findings if f.key == "round.data.corrections"]
    assert enough.level == "ok" and "~400 fail, at most one correction each" in enough.text
    assert kept.level == "finding" and "~400 fail, at a 26% keep rate ~104 corrections kept" in kept.text
    assert "~104 < the 400 asked; 50 samples per instance" in kept.text


def test_keys_budget_and_gpus_are_refused_by_name(standins: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    cfg = config("paper", standins["paper"], round__budget_usd=None, servers__0__gpu_memory_utilization=0.22)
    found = refused(cfg)
    assert "GEMINI_API_KEY is not set" in found["models.expert.api_key_env"]
    assert "fix: set round.budget_usd" in found["round.budget_usd"]
    assert "GiB of KV cache" in found["servers.0.max_model_len"]
    assert "models.expert.api_key_env" not in refused(cfg, keys=False)  # --dry-run away from the run's machine


def test_expert_lora_under_fsdp1_is_refused_and_the_shipped_fsdp2_config_passes(standins: dict[str, Path],
                                                                                   tmp_path: Path) -> None:
    """FSDP1 failed to train LoRA on fused experts on an H200 (deploy/gpu_check.sh); FSDP2 trained it."""
    from flows.round.plan import check_round

    shipped = REPO / "deploy/accelerate/fsdp.yaml"
    v1 = yaml.safe_load(shipped.read_text())
    v1["fsdp_config"] = {**v1["fsdp_config"], "fsdp_version": 1, "fsdp_use_orig_params": True}
    (tmp_path / "fsdp1.yaml").write_text(yaml.safe_dump(v1))
    cfg = config("paper", standins["paper"], round__accelerate_config=str(tmp_path / "fsdp1.yaml"))
    assert cfg.lora.target_experts
    errors = check_round(cfg, REPO)[1]
    assert any(e.startswith("round.accelerate_config: fsdp1.yaml uses FSDP1") and "fsdp_version: 2" in e
               for e in errors), errors
    assert not [e for e in check_round(config("paper", standins["paper"]), REPO)[1] if "FSDP" in e]
