"""Continue a finished build's copy phase for more steps and report whether its loss leaves the plateau.

A build whose copy phase did not form the copying circuit (`copy_phase_formed: false` in micro_build.json) ends
it near loss 1.1; a formed one ends near 0.03 (docs/students.md). This loads the weights saved after the phase
(`<work-dir>/<spec key>/copy_phase/model_after_copy_phase.pt`) with the build's tokenizer, and trains more copy
batches from the same generator under another seed, with a fresh AdamW at the phase's learning rate, stopping
once the 100-step mean loss is below --stop-loss. It writes nothing but the probe's own work folder.

    PYTHONPATH=$PWD .venv/bin/python deploy/micro/copy_phase_probe.py BUILD_DIR WORK_DIR [--steps 1500]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main() -> None:
    import torch
    from transformers import AutoTokenizer

    from training.micro.curriculum import copy_batches
    from training.micro.build import MicroSpec, init_model
    from training.pretrain import PretrainConfig, pretrain

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", type=Path, help="the build's --out (tokenizer, micro_model_spec.json)")
    ap.add_argument("work_dir", type=Path, help="the build's --work-dir (holds the copy phase's weights)")
    ap.add_argument("--steps", type=int, default=1500, help="most extra steps")
    ap.add_argument("--stop-loss", type=float, default=0.1, help="stop once the 100-step mean loss is below this")
    ap.add_argument("--seed", type=int, default=1, help="seed of the extra batches (the build used its own)")
    args = ap.parse_args()
    spec = MicroSpec.model_validate_json((args.build_dir / "micro_model_spec.json").read_text())
    weights = sorted(args.work_dir.glob("*/copy_phase/model_after_copy_phase.pt"))
    if len(weights) != 1:
        raise SystemExit(f"{args.work_dir}: expected one */copy_phase/model_after_copy_phase.pt, found {len(weights)}")
    tokenizer = AutoTokenizer.from_pretrained(args.build_dir)
    model = init_model(spec, tokenizer)
    model.load_state_dict(torch.load(weights[0]))
    cfg = PretrainConfig(steps=args.steps, lr=spec.copy_phase_lr, min_lr_ratio=1.0, warmup_steps=50, seed=args.seed,
                         threads=spec.train.threads, checkpoint_every=10_000, stop_below=args.stop_loss)
    batches = copy_batches(tokenizer, args.steps, spec.copy_phase_batch, spec.copy_phase_len, args.seed)
    report = pretrain(model, batches, cfg, Path(tempfile.mkdtemp(prefix="copy-probe-")))
    losses = report.losses
    print(json.dumps({"steps": report.steps, "stopped_early": report.stopped_early, "wall_s": report.wall_s,
                      "mean_loss_per_100_steps": [round(sum(losses[i:i + 100]) / len(losses[i:i + 100]), 3)
                                                  for i in range(0, len(losses), 100)]}))


if __name__ == "__main__":
    main()
