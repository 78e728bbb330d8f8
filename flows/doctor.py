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

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from flows.doctor_checks import (PAPER_PASS_RATE, Finding, GpuSpec, check_gpus, check_lora, check_roles,
                                 check_servers, check_yield)
from flows.errors import ConfigError

if TYPE_CHECKING:  # flows/config.py calls require_ready: this module never imports it back
    from flows.config import RunConfig

class DoctorReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    findings: list[Finding] = Field(description="Every check's result, in the order the checks ran.")

    @property
    def refused(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "refused"]

    def lines(self) -> list[str]:
        return [f.line() for f in self.findings]


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
    """(key, directory) of the student's weights: the round's, else the first server's."""
    if config.round.student_weights:
        return "round.student_weights", (root / config.round.student_weights).resolve()
    return ("servers.0.model", (root / config.servers[0].model).resolve()) if config.servers else None


def diagnose(config: RunConfig, root: Path, gpus: GpuSpec | None = None, pass_rate: float = PAPER_PASS_RATE,
             keys: bool = True, keep_rate: float = 1.0) -> DoctorReport:
    """Every check (module docstring); `keys=False` reports unset key variables as findings (a dry run away from
    the machine that will run it)."""
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
    found += check_yield(config, pass_rate, keep_rate)
    found += check_gpus(config, root, gpus, facts)
    return DoctorReport(findings=found)


def require_ready(config: RunConfig, root: Path, keys: bool = True) -> DoctorReport:
    """`diagnose` with the GPUs found here; ConfigError with every refusal, one line each (the run's start)."""
    report = diagnose(config, root, detect_gpus() if any(s.device == "gpu" for s in config.servers) else None,
                      keys=keys)
    if report.refused:
        raise ConfigError("\n".join(f.line().removeprefix("REFUSED ") for f in report.refused))
    return report
