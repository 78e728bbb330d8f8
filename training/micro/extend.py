"""Extend a built micro student: more training on new show-your-work demonstrations from its own weights.

A from-scratch build (training/micro/build.py) costs ~85 min on 2 cores; a new program for one family (a
refactoring kind, say) can be taught to a built student in a fraction of that, the harness reading it already
has kept by the reading blocks that follow:
1. demonstrations of the families in `demos` (the recipe's generated harnesses and miss draws,
   training/micro/reading.py) with the programs in `programs`;
2. a demonstration phase: `demo_steps` steps over them (shuffled, repeated when fewer), at `lr`;
3. reading blocks (`blocks`, as in the recipe): one family's minimal pairs densely, then every family's;
4. the harness-dependence probe before and after, written with the figures to `micro_build.json`.

    coevo model extend --base deploy/micro1 --out .cache/micro1-kinds --programs code_refactor=kinds

The base's tokenizer and chat template are kept, its spec with the programs the extension taught
(`micro_model_spec.json`); the output is served and trained like any build.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from training.micro.build import (BUILD_RECORD, MicroSpec, covered_indices, probe_record, reading_blocks,
                                  resumable_phase, weights_digest)
from training.micro.reading import ReadingSpec
from training.pretrain import PretrainConfig, PretrainReport

BASE_FILES = ("chat_template.jinja",)


class ExtendSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    demos: dict[str, int] = Field(default_factory=lambda: {"code_refactor": 320, "anomaly_detection": 80,
                                                          "payroll_audit": 80},
                                  description="family -> demonstrations (the first covered pretrain instances)")
    programs: dict[str, str] = Field(default_factory=lambda: {"anomaly_detection": "flag", "code_refactor": "kinds"},
                                     description="family -> show-your-work program")
    first_index: int = Field(default=1000, ge=0, description="first pretrain instance index demonstrated")
    fresh_copies: int = Field(default=2, ge=0, description="fresh-value copies of each code_refactor demonstration "
                                                           "(its copied names replaced by fresh ones)")
    demo_steps: int = Field(default=600, ge=0, description="steps of the demonstration phase")
    lr: float = Field(default=1e-3, gt=0, description="peak learning rate of the demonstration phase")
    blocks: tuple[str, ...] = Field(default=("code_refactor:300", "mixed:300"),
                                    description="reading blocks after it ('FAMILY:STEPS' or 'mixed:STEPS')")
    seed: int = 0

    @field_validator("blocks")
    @classmethod
    def _blocks(cls, blocks: tuple[str, ...]) -> tuple[str, ...]:
        return ReadingSpec(blocks=blocks).blocks  # the recipe's check, with the offending block named


def _demo_phase(model: Any, examples: list[Any], spec: ExtendSpec, threads: int, work: Path,
                progress: bool) -> PretrainReport | None:
    from training.pretrain import pretrain

    if not spec.demo_steps or not examples:
        return None

    def run() -> PretrainReport:
        rng, plan = random.Random(f"extend-demos:{spec.seed}"), []
        while len(plan) < spec.demo_steps:
            plan += rng.sample(examples, len(examples))
        cfg = PretrainConfig(steps=spec.demo_steps, lr=spec.lr, min_lr_ratio=0.5, warmup_steps=20, seed=spec.seed,
                             threads=threads, checkpoint_every=100)
        return pretrain(model, plan[:spec.demo_steps], cfg, work, progress=progress)

    return resumable_phase(model, work, "demos", run)


def extend_micro_model(base: Path, out: Path, spec: ExtendSpec = ExtendSpec(), *, work_dir: Path | None = None,
                       progress: bool = True) -> Path:
    """Train the student in `base` further (module docstring) and save it to `out`; `work_dir` holds the
    phases' checkpoints (resumable)."""
    import hashlib

    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    from training.config import LengthRule
    from training.dataset import build_dataset
    from training.micro.mixture import write_named_harnesses
    from training.micro.reading import decision_pool, demonstrations, probe_points

    base, out = Path(base), Path(out)
    base_spec = MicroSpec.model_validate_json((base / "micro_model_spec.json").read_text())
    if base_spec.reading is None:
        raise ValueError(f"{base}: not a harness-reading build (its spec has no `reading`)")
    t0 = time.perf_counter()
    programs = {**base_spec.programs(), **spec.programs}
    reading = base_spec.reading.model_copy(update={"blocks": spec.blocks})
    bspec = base_spec.model_copy(update={"reading": reading, "seed": spec.seed})  # the blocks' seeds
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = Qwen3ForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    indices = {f: covered_indices(f, n, programs.get(f, ""), spec.first_index, f in reading.easy_only)
               for f, n in spec.demos.items()}
    demos = demonstrations(list(spec.demos), indices, reading, spec.seed + 101, programs, spec.fresh_copies, progress)
    built = build_dataset([t for _, t, _ in demos], tokenizer, length=LengthRule(max_len=base_spec.max_len,
                                                                                raise_above=1.0))
    examples = [(e.input_ids, e.labels) for e in built.examples]
    pool = decision_pool(demos, reading, programs)
    families = tuple(dict.fromkeys([*base_spec.families, *spec.demos]))  # the base's, and any it learns here
    points = probe_points(families, reading, programs, progress)
    before = probe_record(model, tokenizer, points)
    key = hashlib.sha256((spec.model_dump_json() + str(base.resolve())).encode()).hexdigest()[:16]
    work = Path(work_dir or out / ".work") / key
    phase = _demo_phase(model, examples, spec, base_spec.train.threads, work / "demos", progress)
    blocks = reading_blocks(model, tokenizer, bspec, pool, examples, points, work, progress)
    after = probe_record(model, tokenizer, points)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for name in BASE_FILES:
        if (base / name).exists():
            shutil.copy(base / name, out / name)
    # the base's spec with the programs it acts in now (a further extension starts from them)
    acts = base_spec.model_copy(update={"refactor_program": programs.get("code_refactor", base_spec.refactor_program),
                                        "anomaly_program": programs.get("anomaly_detection", base_spec.anomaly_program)})
    (out / "micro_model_spec.json").write_text(acts.model_dump_json(indent=2))
    write_named_harnesses(out / "harness_hK", families)
    record = {"extends": str(base), "base_weights_sha256": weights_digest(base), "spec": spec.model_dump(mode="json"),
              "weights_sha256": weights_digest(out), "demonstrations": len(demos), "examples": len(examples),
              "success": {f: round(sum(t.verdict.score >= 1.0 for _, t, _ in demos if t.instance.family == f)
                                   / max(1, sum(t.instance.family == f for _, t, _ in demos)), 3) for f in spec.demos},
              "decision_points": len(pool), "probe_before": before,
              "demo_phase": phase.model_dump(exclude={"losses"}) if phase else None, "reading_blocks": blocks,
              "probe": after, "build_seconds": round(time.perf_counter() - t0, 1)}
    (out / BUILD_RECORD).write_text(json.dumps(record, indent=1))
    return out
