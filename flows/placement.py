"""GPU placement of a run: which GPUs each vLLM server and the train stage use, checked before anything starts.

    report = check_placement(config, repo_root, gpu_count=8)   # --dry-run and `coevo doctor` print report.lines
    require_placement(config, repo_root)                       # the run's start: ConfigError naming the key

Every GPU server lists its GPUs (`servers[i].gpus`, its CUDA_VISIBLE_DEVICES, one per tensor-parallel rank); the
train stage lists its own (`round.placement.train_gpus`, the CUDA_VISIBLE_DEVICES of `accelerate launch`, one
per process). A GPU is oversubscribed when the servers on it ask for more than all of its memory together
(`gpu_memory_utilization`, vLLM's default 0.9 when unset), or when training runs on it while a server keeps its
share there. During the train stage the student's server can give its GPUs back
(`round.placement.student_during_train`): `sleep` (vLLM sleep mode level 1: weights to CPU RAM, KV cache
freed; the server needs `sleep_mode: true`; GPU only) or `stop` (stopped, restarted after training with its
adapters reloaded; CPU or GPU); `keep` leaves it serving, which is refused when it shares a GPU with training.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from flows.errors import ConfigError

if TYPE_CHECKING:
    from flows.config import RunConfig

VLLM_DEFAULT_GPU_SHARE = 0.9  # vLLM's --gpu-memory-utilization default
During = Literal["keep", "sleep", "stop"]
DURING_TEXT = {"keep": "keeps serving", "sleep": "sleeps (vLLM sleep mode level 1), woken after",
               "stop": "is stopped, restarted after (adapters reloaded)"}


class PlacementSettings(BaseModel):
    """`round.placement`: the train stage's GPUs and what the student's server does while LoRA trains."""

    model_config = ConfigDict(extra="forbid")

    train_gpus: list[int] | None = Field(default=None, description="GPU ids the train stage runs on (the "
                                         "CUDA_VISIBLE_DEVICES of `accelerate launch`), one per process of "
                                         "round.accelerate_config; null = training on CPU (or no GPU servers).")
    student_during_train: During = Field(default="keep", description="The student's server during the train "
                                         "stage: keep (serving), sleep (vLLM sleep mode: frees its GPU memory, "
                                         "needs the server's sleep_mode; GPU only) or stop (stopped, restarted "
                                         "after training with its adapters reloaded).")
    node_gpus: int | None = Field(default=None, ge=1, description="GPUs on the node, if known here; ids past it "
                                  "are refused (`coevo doctor` checks against the GPUs it finds).")

    @field_validator("train_gpus")
    @classmethod
    def _distinct(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or len(set(v)) != len(v) or any(g < 0 for g in v)):
            raise ValueError(f"{v}: give distinct GPU ids >= 0, one per training process")
        return v


class PlacementReport(BaseModel):
    """What the placement check found: lines to print, errors (refused) and warnings."""

    model_config = ConfigDict(extra="forbid")

    gpus: dict[int, list[str]] = Field(description="GPU id -> what runs there (servers with their share, train ranks).")
    lines: list[str]
    errors: list[str]
    warnings: list[str]


def _accelerate_processes(config: RunConfig, root: Path) -> int | None:
    r = config.round
    if not r.accelerate_config or not (root / r.accelerate_config).is_file():
        return None
    try:
        acc = yaml.safe_load((root / r.accelerate_config).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # the dry-run's accelerate check reports an unreadable file
    return int(acc.get("num_processes", 1))


def _servers(config: RunConfig, gpus: dict[int, list[str]], share: dict[int, float], errors: list[str]) -> None:
    for i, s in enumerate(config.servers):
        if s.device != "gpu":
            continue
        if s.gpus is None:
            errors.append(f"servers.{i}.gpus: GPU server '{s.name}' has no GPUs assigned; list "
                          f"{s.tensor_parallel_size} GPU id(s), one per tensor-parallel rank (e.g. "
                          f"{list(range(s.tensor_parallel_size))})")
            continue
        frac = s.gpu_memory_utilization or VLLM_DEFAULT_GPU_SHARE
        for rank, g in enumerate(s.gpus):
            gpus[g].append(f"server {s.name} TP rank {rank} ({frac:.2f} of memory)")
            share[g] += frac


def _student_server(config: RunConfig) -> tuple[int, str] | None:
    """(index, name) of the run-managed server M_t is served by, if any."""
    if not config.round.uses_roles:
        return None
    spec = config.server_for(config.models[config.round.student])
    return None if spec is None else (config.servers.index(spec), spec.name)


def _during_train(config: RunConfig, errors: list[str], warnings: list[str]) -> tuple[str | None, During]:
    """The student's server name and what it does while training; checks the mode against the server."""
    r = config.round
    mode: During = r.placement.student_during_train
    student = _student_server(config)
    if student is None:
        if mode != "keep":
            warnings.append(f"round.placement.student_during_train {mode}: the student's server is not one of "
                            "`servers` (not managed by the run), so it keeps running")
        return None, "keep"
    i, name = student
    spec = config.servers[i]
    if mode == "sleep" and spec.device != "gpu":
        errors.append(f"round.placement.student_during_train: sleep needs a GPU server ('{name}' runs on CPU, and "
                      "vLLM CPU has no sleep mode); use stop")
    elif mode == "sleep" and not spec.sleep_mode:
        errors.append(f"round.placement.student_during_train: sleep needs servers.{i}.sleep_mode: true (server "
                      f"'{name}' starts without --enable-sleep-mode)")
    return name, mode


def _training(config: RunConfig, root: Path, gpus: dict[int, list[str]], errors: list[str],
              freed: set[str]) -> list[str]:
    """Place the train ranks; refuse a GPU a server keeps during training. Returns the train line."""
    r = config.round
    if not config.trains:
        return []
    train, n = r.placement.train_gpus, _accelerate_processes(config, root)
    gpu_servers = [s for s in config.servers if s.device == "gpu"]
    if train is None:
        if gpu_servers:
            errors.append("round.placement.train_gpus: the run has GPU servers; say which GPUs the train stage uses "
                          "(one per process of round.accelerate_config), or training lands on whatever GPU it sees")
        where = "no GPUs listed" if gpu_servers else "on CPU"
        return [f"  train: {where}" + (f" ({n} process(es), accelerate launch)" if n else " (in the flow's process)")]
    if n is None:
        errors.append("round.placement.train_gpus: needs round.accelerate_config (training runs under `accelerate "
                      "launch` with CUDA_VISIBLE_DEVICES set; the flow's own process cannot choose its GPUs)")
        return []
    if n != len(train):
        errors.append(f"round.placement.train_gpus: {len(train)} GPU(s) {train} for num_processes {n} of "
                      f"{r.accelerate_config} (one process per GPU)")
    student = _name(_student_server(config))
    for rank, g in enumerate(train):
        for k in (k for k in gpu_servers if k.gpus and g in k.gpus and k.name not in freed):
            fix = ("set round.placement.student_during_train to sleep or stop" if k.name == student
                   else "it is not the student's server, so it keeps serving: move round.placement.train_gpus")
            errors.append(f"GPU {g}: oversubscribed during the train stage: server '{k.name}' keeps "
                          f"{k.gpu_memory_utilization or VLLM_DEFAULT_GPU_SHARE:.2f} of its memory while training "
                          f"rank {rank} runs there; {fix}")
        gpus[g].append(f"train rank {rank}")
    return [f"  train: accelerate launch, {n} process(es) on GPU(s) {','.join(map(str, train))} "
            f"(CUDA_VISIBLE_DEVICES={','.join(map(str, train))})"]


def _name(student: tuple[int, str] | None) -> str:
    return student[1] if student else ""


def check_placement(config: RunConfig, root: Path, gpu_count: int | None = None) -> PlacementReport:
    """The run's GPU placement: what runs on each GPU, and every oversubscription or missing assignment."""
    gpus: dict[int, list[str]] = defaultdict(list)
    share: dict[int, float] = defaultdict(float)
    errors: list[str] = []
    warnings: list[str] = []
    _servers(config, gpus, share, errors)
    for g, total in sorted(share.items()):
        if total > 1.0 + 1e-9:
            errors.append(f"GPU {g}: oversubscribed: {' + '.join(gpus[g])} ask for {total:.2f} of its memory (> 1); "
                          "lower gpu_memory_utilization or move a server")
    student, mode = _during_train(config, errors, warnings)
    freed = {student} if student and mode != "keep" else set()
    train_line = _training(config, root, gpus, errors, freed)
    count = gpu_count if gpu_count is not None else config.round.placement.node_gpus
    if count is not None:
        for g in sorted(gpus):
            if g >= count:
                errors.append(f"GPU {g}: the node has {count} GPU(s) (ids 0-{count - 1}); "
                              f"{gpus[g][0]} is placed on it")
    lines = ["placement (GPU id: what runs there; each process gets its CUDA_VISIBLE_DEVICES):"]
    lines += [f"  GPU {g}: {'; '.join(gpus[g])}" for g in sorted(gpus)] or ["  no GPU placed"]
    if student and config.trains:
        lines.append(f"  during train: server {student} {DURING_TEXT[mode]}")
    lines += train_line if config.trains else []
    return PlacementReport(gpus=dict(gpus), lines=lines, errors=errors, warnings=warnings)


def require_placement(config: RunConfig, root: Path, gpu_count: int | None = None) -> PlacementReport:
    """`check_placement`, raising ConfigError with every problem when there is one (the run's start)."""
    report = check_placement(config, root, gpu_count)
    if report.errors:
        raise ConfigError("placement refused:\n" + "\n".join(f"  {e}" for e in report.errors))
    return report


def check_lora_serving(config: RunConfig, root: Path) -> tuple[list[str], list[str]]:
    """(errors, warnings): can the server that hot-loads the run's adapters serve what LoRA will train on this
    model (deploy/vllm_support.py)? Read from the weights' config.json; checked before any training."""
    from deploy.vllm_support import lora_serving_problems
    from training.targets import model_layout

    jobs = []
    r = config.round
    if config.trains and r.student_weights:
        jobs.append(("round", config.server_for(config.models[r.student]), r.student_weights,
                     config.lora.target_experts))
    errors: list[str] = []
    warnings: list[str] = []
    for key, spec, weights, experts in jobs:
        if spec is None:
            continue
        path = (root / weights).resolve()
        if not (path / "config.json").is_file():
            if Path(weights).is_absolute():
                warnings.append(f"{key}: {weights} is not on this machine; LoRA serving not checked against its "
                                "config.json (run the dry run on the GPU host)")
            continue
        errors += [f"lora: {p}" for p in lora_serving_problems(spec, model_layout(path), experts)]
    return errors, warnings
