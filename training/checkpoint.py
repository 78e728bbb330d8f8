"""Resumable training checkpoints: `<out>/checkpoints/step-0000040/`, written atomically, newest wins.

What a checkpoint holds is exactly what the rest of the run depends on: the LoRA weights, the optimizer
moments, the scheduler position, torch's RNG state (LoRA dropout draws from it) and the trainer state
(step, loss curve). The data order is a function of (seed, epoch), so it needs no saving. Resuming from
step n therefore replays steps n+1.. bit-for-bit on CPU.

Single process (and DDP, where every rank holds full weights): safetensors + JSON, no pickle, small (LoRA
weights and their Adam moments only). FSDP / DeepSpeed shard weights and optimizer state across ranks, so
there the sharded state goes through `accelerator.save_state` / `load_state` instead.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

STATE_FILE = "trainer_state.json"
_PREFIX = "step-"


def _step_dir(root: Path, step: int) -> Path:
    return root / f"{_PREFIX}{step:07d}"


def latest(root: Path) -> Path | None:
    """The newest complete checkpoint (a directory is complete once its trainer_state.json exists)."""
    if not root.exists():
        return None
    done = sorted(p for p in root.iterdir() if p.name.startswith(_PREFIX) and (p / STATE_FILE).exists())
    return done[-1] if done else None


def _optimizer_tensors(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    plain: dict[str, Any] = {"param_groups": state["param_groups"], "state": {}}
    for idx, slots in state["state"].items():
        for name, value in slots.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{idx}.{name}"] = value.detach().contiguous().cpu()
            else:
                plain["state"].setdefault(str(idx), {})[name] = value
    return tensors, plain


def _optimizer_state(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for idx, slots in plain["state"].items():
        state.setdefault(int(idx), {}).update(slots)
    return {"state": state, "param_groups": plain["param_groups"]}


def save(root: Path, step: int, *, accelerator: Any, model: Any, optimizer: Any, scheduler: Any,
         trainer_state: dict[str, Any], sharded: bool, keep: int) -> Path:
    """Write step `step` into a temp dir, then rename it into place; prune to the newest `keep`."""
    final = _step_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    if sharded:
        accelerator.save_state(str(tmp / "accelerate"))
    elif accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        weights = {n: p.detach().contiguous().cpu() for n, p in unwrapped.named_parameters() if p.requires_grad}
        save_file(weights, str(tmp / "trainable.safetensors"))
        opt_tensors, opt_plain = _optimizer_tensors(optimizer.state_dict())
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "optimizer.json").write_text(json.dumps(opt_plain))
        (tmp / "scheduler.json").write_text(json.dumps(scheduler.state_dict()))
        rng = {"torch_cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng.update({f"cuda_{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
        save_file(rng, str(tmp / "rng.safetensors"))
    if accelerator.is_main_process:
        (tmp / STATE_FILE).write_text(json.dumps(trainer_state))  # last: its presence marks completeness
        os.replace(tmp, final)
        for old in sorted(p for p in root.iterdir() if p.name.startswith(_PREFIX))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def read_state(path: Path) -> dict[str, Any]:
    """The trainer state alone (step, seed, digests): checked before any tensor is loaded."""
    return json.loads((path / STATE_FILE).read_text())


def load(path: Path, *, accelerator: Any, model: Any, optimizer: Any, scheduler: Any, sharded: bool) -> dict[str, Any]:
    """Restore everything `save` wrote into the live objects; returns the trainer state."""
    if sharded:
        accelerator.load_state(str(path / "accelerate"))
    else:
        unwrapped = accelerator.unwrap_model(model)
        weights = load_file(str(path / "trainable.safetensors"))
        params = dict(unwrapped.named_parameters())
        missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
        if missing:
            raise ValueError(f"checkpoint {path} lacks trainable weights {missing[:3]}...; it is from another model")
        with torch.no_grad():
            for name, tensor in weights.items():
                params[name].copy_(tensor)
        optimizer.load_state_dict(_optimizer_state(load_file(str(path / "optimizer.safetensors")),
                                                   json.loads((path / "optimizer.json").read_text())))
        scheduler.load_state_dict(json.loads((path / "scheduler.json").read_text()))
        rng = load_file(str(path / "rng.safetensors"))
        torch.set_rng_state(rng["torch_cpu"])
        cuda = [rng[k] for k in sorted(rng) if k.startswith("cuda_")]
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)
    return read_state(path)
