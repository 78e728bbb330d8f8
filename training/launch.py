"""The training seeds under `accelerate launch`: several processes or GPUs (DDP, FSDP, DeepSpeed ZeRO-3).

    summaries = launch_seeds(Launch(accelerate_config=Path("deploy/accelerate/fsdp.yaml"), cwd=repo), data,
                             data_hash, base, out, TrainConfig(), label="corr")   # training.fit calls it

runs, with the launcher's output lines given to `emit` as they come:

    python -m accelerate.commands.launch --config_file CONFIG [--fsdp_transformer_layer_cls_to_wrap LAYER] \\
        -m training.launch --data D --base M --out O --config '<TrainConfig JSON>' --seeds 0 1 2

Each process runs `train_seeds` (finished seeds are skipped there too); the summaries are read back from the
adapters rank 0 wrote. An FSDP config without a wrap class gets the student's own decoder layer class (from
its config.json), so one config serves dense and MoE students.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from training.config import TrainConfig
from training.lora import TrainSummary, finished, train_seeds
from training.targets import model_layout

log = logging.getLogger(__name__)


class Launch(BaseModel):
    """Where the seeds train when not in the calling process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerate_config: Path = Field(description="accelerate config file (`accelerate launch --config_file`).")
    cwd: Path = Field(description="Working directory of the launched processes, put first on their PYTHONPATH "
                      "(the repository root).")
    gpus: list[int] | None = Field(default=None, description="CUDA_VISIBLE_DEVICES of the launched processes; "
                                   "None leaves the variable as it is.")

    def processes(self) -> int:
        """num_processes of the accelerate config (1 when it names none)."""
        return int((yaml.safe_load(self.accelerate_config.read_text()) or {}).get("num_processes", 1))


def launch_command(accelerate_config: Path, data: Path, weights: Path, root: Path, lora: TrainConfig,
                   seeds: Sequence[int] | None = None) -> list[str]:
    """The `accelerate launch` command line of one set of seeds (see the module docstring)."""
    acc = yaml.safe_load(accelerate_config.read_text()) or {}
    wrap = []
    if acc.get("distributed_type") == "FSDP" and not (acc.get("fsdp_config") or {}).get("fsdp_transformer_layer_cls_to_wrap"):
        layer = model_layout(weights).decoder_layer
        wrap = ["--fsdp_transformer_layer_cls_to_wrap", layer] if layer else []
    seeds = range(lora.seeds) if seeds is None else seeds
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config), *wrap,
            "-m", "training.launch", "--data", str(data), "--base", str(weights), "--out", str(root),
            "--config", lora.model_dump_json(), "--seeds", *(str(k) for k in seeds)]


def launch_seeds(launch: Launch, data: Path, data_hash: str, weights: Path, root: Path, lora: TrainConfig,
                 seeds: Sequence[int], label: str, emit: Callable[[str], object] = log.info) -> list[TrainSummary]:
    """`seeds` trained under `accelerate launch` into `root/seed-<s>`; their summaries."""
    cmd = launch_command(launch.accelerate_config, data, weights, root, lora, seeds)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(launch.cwd), os.environ.get("PYTHONPATH")]))}
    if launch.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in launch.gpus)
    emit(f"train {label}: accelerate launch --config_file {launch.accelerate_config.name} ({len(seeds)} seeds)")
    tail: collections.deque[str] = collections.deque(maxlen=20)
    errors: list[str] = []  # `... error: ...` lines of the ranks (the launcher's own traceback follows them)
    with subprocess.Popen(cmd, cwd=launch.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        for line in proc.stdout or ():
            tail.append(line.rstrip())
            if "error:" in line and len(errors) < 5:
                errors.append(line.strip())
            if line.strip():
                emit(f"train {label} | {line.rstrip()}")
    if proc.returncode:
        raise RuntimeError(f"train {label}: accelerate launch exited with {proc.returncode}: "
                           f"{' | '.join(dict.fromkeys(errors)) or 'no error line'}; its last lines:\n" + "\n".join(tail))
    summaries = [finished(root / f"seed-{k}", lora, k, data_hash) for k in seeds]
    missing = [k for k, x in zip(seeds, summaries) if x is None]
    if missing:
        raise RuntimeError(f"train {label}: accelerate launch finished but seeds {missing} have no adapter in {root}")
    return [x for x in summaries if x is not None]


def main(argv: list[str] | None = None) -> int:
    """One launched process: train the seeds of a built dataset (every rank runs this; rank 0 writes)."""
    parser = argparse.ArgumentParser(prog="python -m training.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="A built dataset (training.dataset.write_dataset).")
    parser.add_argument("--base", type=Path, required=True, help="Base (student) model directory.")
    parser.add_argument("--out", type=Path, required=True, help="Output directory: seed-<s>/ adapter per seed.")
    parser.add_argument("--config", required=True, help="The TrainConfig as JSON.")
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="Training seeds (default 0..seeds-1).")
    args = parser.parse_args(argv)
    try:
        train_seeds(args.data, args.base, args.out, TrainConfig.model_validate_json(args.config), args.seeds,
                    show_progress=False)
    except (ValueError, FileNotFoundError) as e:  # bad settings or data: one line the parent collects
        print(f"training.launch: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
