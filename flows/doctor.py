"""`coevo doctor`: the preflight that reads the student's model and the machine before anything expensive starts.

    report = diagnose(config, repo_root, gpus=parse_gpus("8x141GB"), pass_rate=0.78)
    print("\\n".join(report.lines()))            # ok / finding / REFUSED, one line each, the key and the fix
    require_ready(config, repo_root)             # the run's start and --dry-run: ConfigError on a refusal

Checks (each names the config key; a refusal also says how to fix it):
- window: every server's max_model_len, and the training length raised 2x, against the model's window as vLLM
  derives it from config.json (max_position_embeddings, the tokenizer's model_max_length, rope scaling);
- chat template: training renders a multi-turn tool-calling trajectory prefix-stably with the server's template
  and the tokenizer on disk; our templates' markers are single tokens; the tool-call and reasoning parsers fit;
- LoRA: the targets exist in this architecture (meta device, no weights read), with the share they cover;
- API roles: every paid role has its key variable set and a price, the run a budget; hosted_vllm roles an
  api_base; the judge's and locator's max_tokens leave room for a thinking model;
- corrections: how many the config can yield at a stated pass rate against the number it asks (a finding);
- GPUs (found with nvidia-smi, or assumed): weights and one full-length sequence's KV cache per GPU, and the
  placement check (flows/placement.py).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.records import ModelRole
from flows.config import ConfigError, RunConfig

Level = Literal["ok", "finding", "refused"]
OWN = ("oracle", "flawed", "showwork")  # providers of this project: no key, no price
PAPER_PASS_RATE = 0.78  # the student's h* pass rate the paper reports (78.0%)
THINKING_ROOM = 2048  # max_tokens below this cuts a thinking judge's or locator's answer


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    level: Level
    key: str = Field(description="The config key it is about, e.g. servers.0.max_model_len.")
    text: str
    fix: str = Field(default="", description="How to fix a refusal.")

    def line(self) -> str:
        tag = {"ok": "ok      ", "finding": "finding ", "refused": "REFUSED "}[self.level]
        return f"{tag}{self.key}: {self.text}" + (f"; fix: {self.fix}" if self.fix else "")


class DoctorReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    findings: list[Finding]

    @property
    def refused(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "refused"]

    def lines(self) -> list[str]:
        return [f.line() for f in self.findings]


class GpuSpec(BaseModel):
    """The GPUs a run gets: found here or assumed (`--assume-gpus 8x141GB`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=1)
    memory_gib: float = Field(gt=0, description="Memory per GPU.")
    source: Literal["found", "assumed"]


def parse_gpus(text: str) -> GpuSpec:
    """'8x141GB' (or 8x141, 8x141GiB) -> 8 GPUs of 141 GiB."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+(?:\.\d+)?)\s*(?:gi?b)?\s*", text, re.I)
    if not m or int(m.group(1)) < 1:
        raise ConfigError(f"--assume-gpus: '{text}' is not COUNTxMEMORY, e.g. 8x141GB")
    return GpuSpec(count=int(m.group(1)), memory_gib=float(m.group(2)), source="assumed")


def detect_gpus() -> GpuSpec | None:
    """The GPUs of this machine (nvidia-smi), None when there are none."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    mib = [float(x) for x in out if x.replace(".", "").isdigit()]
    return GpuSpec(count=len(mib), memory_gib=min(mib) / 1024, source="found") if mib else None


def _model_dir(config: RunConfig, root: Path) -> tuple[str, Path] | None:
    """(key, directory) of the student's weights: the round's, the training section's, else the first server's."""
    if config.round is not None:
        return "round.student_weights", (root / config.round.student_weights).resolve()
    if config.training is not None:
        return "training.base_model", (root / config.training.base_model).resolve()
    return ("servers.0.model", (root / config.servers[0].model).resolve()) if config.servers else None


def diagnose(config: RunConfig, root: Path, gpus: GpuSpec | None = None, pass_rate: float = PAPER_PASS_RATE,
             keys: bool = True) -> DoctorReport:
    """Every check (module docstring); `keys=False` reports unset key variables as findings (a dry run away from
    the machine that will run it)."""
    from flows.doctor_checks import check_gpus, check_lora, check_roles, check_servers, check_yield

    found: list[Finding] = []
    facts = None
    where = _model_dir(config, root)
    if where is not None and not (where[1] / "config.json").is_file():
        found.append(Finding(level="finding", key=where[0], text=f"{where[1]} has no config.json here: the model "
                             "checks (window, template, LoRA, GPU memory) are skipped; run `coevo doctor` where the "
                             "weights are"))
    elif where is not None:
        from flows.doctor_model import model_facts

        facts, meta = model_facts(where[1])
        found += check_servers(config, root, facts)
        found += check_lora(config, where[0], meta)
    found += check_roles(config, keys)
    found += check_yield(config, pass_rate)
    found += check_gpus(config, root, gpus, facts)
    return DoctorReport(findings=found)


def require_ready(config: RunConfig, root: Path, keys: bool = True) -> DoctorReport:
    """`diagnose` with the GPUs found here; ConfigError with every refusal, one line each (the run's start)."""
    report = diagnose(config, root, detect_gpus() if any(s.device == "gpu" for s in config.servers) else None,
                      keys=keys)
    if report.refused:
        raise ConfigError("\n".join(f.line().removeprefix("REFUSED ") for f in report.refused))
    return report


def used_roles(config: RunConfig) -> dict[str, ModelRole]:
    """Config key -> role of every model the run will call (bare model strings in specs become roles)."""
    used = {f"models.{p.model}": config.models[p.model] for p in config.evaluation.pairs} if config.round is None else {}
    r = config.round
    if r is not None:
        from flows.round_context import correction_expert

        used |= {f"models.{r.student}": config.models[r.student], f"models.{r.expert}": config.models[r.expert],
                 "round.correction.expert": correction_expert(config)}
        spec = r.correction.locator_expert
        used[f"models.{spec}" if spec in config.models else "round.correction.locator_expert"] = \
            config.models.get(spec) or ModelRole(model=spec)
        for key, spec, role in (("reflector", r.search.reflector, "llm"), ("locator", r.correction.locator, "mle_agent"),
                                ("judge", r.correction.selector, "judge")):
            name, _, model = spec.partition(":")
            if name == role and model:
                used[f"models.{key}"] = (config.models[key].model_copy(update={"model": model})
                                         if key in config.models else ModelRole(model=model))
    if config.attribution is not None and config.attribution.enabled and config.attribution.attributor != "heuristic":
        model = config.attribution.attributor.partition(":")[2]
        base = config.models.get("judge")
        used["models.judge"] = base.model_copy(update={"model": model}) if base and model else \
            (base or ModelRole(model=model))
    return used


def role_needs(key: str, role: ModelRole) -> str:
    """'own' (our providers), 'served' (a vLLM server) or 'paid' (an API that takes a key and costs money)."""
    provider = role.model.split("/", 1)[0]
    return "own" if provider in OWN else "served" if provider == "hosted_vllm" else "paid"


def yield_estimate(config: RunConfig, pass_rate: float) -> tuple[int, int, int]:
    """(student rollouts on the train split, the failures expected at `pass_rate`, corrections asked)."""
    r = config.round
    assert r is not None
    rollouts = len(config.family_names()) * (r.data.instances or 20) * r.data.student_samples
    return rollouts, round(rollouts * (1 - pass_rate)), r.data.corrections


def samples_for(config: RunConfig, pass_rate: float) -> int:
    """Student samples per train instance that yield the corrections asked at this pass rate."""
    r = config.round
    assert r is not None
    per = len(config.family_names()) * (r.data.instances or 20) * (1 - pass_rate)
    return math.ceil(r.data.corrections / per) if per > 0 else 0


def key_set(var: str | None) -> bool:
    return bool(var and os.environ.get(var))
