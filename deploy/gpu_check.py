"""The device check behind deploy/gpu_check.sh: LoRA on the micro student and the tiny MoE under `accelerate launch`.

    python -m deploy.gpu_check run --out DIR [--cpu]      # prepare, launch the training, check, print the table

What a lent single-GPU machine with no network and no vLLM can check on its own torch and transformers in a few
minutes: three LoRA jobs (the micro student M0, dense; the tiny Qwen3-MoE with attention targets only; the tiny MoE
with its fused experts too), trained in one `accelerate launch` process (bf16 on the GPU; fp32 on CPU with `--cpu`),
then, per job: the adapter is written and loads back in peft, the loss falls, the adapted share is as asked (the
experts only when asked), and the merged model gives the adapted model's logits. On the GPU a fourth job trains the
tiny MoE with experts under FSDP (one process, the model's own decoder layer as the wrap class). One table of what
passed, written to DIR/gpu_check.md and DIR/gpu_check.json; exit 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPO = Path(__file__).resolve().parent.parent
MICRO = REPO / "deploy" / "micro"


class Job(BaseModel):
    """One LoRA run of the check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Column of the table.")
    model: str = Field(description="'micro' (deploy/micro) or 'tiny-moe' (built into the check's directory).")
    target_experts: bool = False
    fsdp: int = Field(default=0, ge=0, le=2, description="0, or the FSDP version of its own launch (GPU only).")


JOBS = [Job(name="micro (dense)", model="micro"), Job(name="tiny MoE", model="tiny-moe"),
        Job(name="tiny MoE + experts", model="tiny-moe", target_experts=True)]
# FSDP2 shards each parameter (DTensor), which is what deploy/accelerate/fsdp.yaml uses. FSDP1 flattens a wrapped
# layer's parameters into one buffer, and LoRA on fused experts (peft's target_parameters) failed under it on an
# H200 (docs/gpu.md; peft issue 3080): `--fsdp1` adds that job, to see whether a newer peft or torch fixes it.
FSDP_JOBS = [Job(name=f"tiny MoE + experts, FSDP{v}", model="tiny-moe", target_experts=True, fsdp=v) for v in (1, 2)]


def _model_dir(out: Path, model: str) -> Path:
    return MICRO if model == "micro" else out / "tiny-moe"


def _trajectories(n: int) -> list:
    """Short chats with a fixed answer pattern: a LoRA learns them in a few steps, so the loss must fall."""
    from agents.records import Trajectory
    from tasks.records import TaskInstance, Verdict

    out = []
    for i in range(n):
        ask = f"Check stock for store {i} and report low items."
        msgs = [{"role": "user", "content": ask}, {"role": "assistant", "content": f"Store {i}: low items are SKU-{100 + i}."}]
        inst = TaskInstance(id=f"stock_alert/{i}", family="stock_alert", index=i, split="train", instruction=ask,
                            difficulty="easy", seed=i)
        out.append(Trajectory(instance=inst, harness_id="h0", model_id="check", seed=0, messages=msgs, tools=[],
                              stop_reason="submitted", verdict=Verdict(score=1.0), tag="check").with_id())
    return out


def prepare(out: Path) -> None:
    """The tiny MoE and one dataset per model (each model's own tokenizer), under `out`."""
    from deploy.tiny_model import build_tiny_moe, is_built
    from training.dataset import build_dataset, load_tokenizer, write_dataset

    if not is_built(out / "tiny-moe"):
        build_tiny_moe(out / "tiny-moe")
    for model in ("micro", "tiny-moe"):
        if not (out / "data" / model / "manifest.json").exists():
            tok = load_tokenizer(_model_dir(out, model))
            write_dataset(build_dataset(_trajectories(8), tok, mask="assistant"), out / "data" / model)


def train_config(job: Job, cpu: bool) -> object:
    from training.config import TrainConfig

    return TrainConfig(rank=8, dropout=0.0, target_experts=job.target_experts, lr=5e-3, epochs=8, effective_batch=8,
                       micro_batch=8, warmup_ratio=0.1, gradient_checkpointing=False, seeds=1,
                       precision="fp32" if cpu else "bf16")


def train_jobs(out: Path, cpu: bool, fsdp: int) -> None:
    """Inside `accelerate launch`: train the check's jobs (or the FSDP job of that version) with our LoRA code."""
    from training.lora import train_seeds

    for job in [j for j in FSDP_JOBS if j.fsdp == fsdp] if fsdp else JOBS:
        train_seeds(out / "data" / job.model, _model_dir(out, job.model), out / "adapters" / job.name.replace(" ", "_"),
                    train_config(job, cpu), show_progress=False)


def _accelerate_config(out: Path, cpu: bool, fsdp: int) -> Path:
    if fsdp == 1:
        cfg = {"distributed_type": "FSDP", "num_processes": 1, "mixed_precision": "bf16",
               "fsdp_config": {"fsdp_version": 1, "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_use_orig_params": True,
                               "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                               "fsdp_sync_module_states": True, "fsdp_cpu_ram_efficient_loading": False}}
    elif fsdp == 2:
        cfg = {"distributed_type": "FSDP", "num_processes": 1, "mixed_precision": "bf16",
               "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True,
                               "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                               "fsdp_cpu_ram_efficient_loading": False}}
    else:
        cfg = {"distributed_type": "NO", "num_processes": 1, "use_cpu": cpu, "mixed_precision": "no" if cpu else "bf16"}
    path = out / (f"accelerate_fsdp{fsdp}.json" if fsdp else "accelerate.json")
    path.write_text(json.dumps({"compute_environment": "LOCAL_MACHINE", "num_machines": 1, "machine_rank": 0, **cfg}))
    return path


def launch(out: Path, cpu: bool, fsdp: int = 0) -> tuple[int, float, str]:
    """`accelerate launch --config_file ... -m deploy.gpu_check train`: (exit code, seconds, output tail)."""
    from training.targets import model_layout

    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(_accelerate_config(out, cpu, fsdp))]
    if fsdp:
        cmd += ["--fsdp_transformer_layer_cls_to_wrap", model_layout(out / "tiny-moe").decoder_layer or ""]
    cmd += ["-m", "deploy.gpu_check", "train", "--out", str(out)] + (["--cpu"] if cpu else [])
    cmd += ["--fsdp", str(fsdp)] if fsdp else []
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    return proc.returncode, time.monotonic() - t0, (proc.stdout + proc.stderr)[-3000:]


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")

    check: str
    results: dict[str, str] = Field(default_factory=dict, description="Job name -> 'PASS ...' or 'FAIL ...'.")


def _probe_logits(model: object, tok: object) -> object:
    import torch

    ids = tok("Check stock for store 3 and report low items.", return_tensors="pt").input_ids.to(model.device)
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def check_job(out: Path, job: Job, cpu: bool) -> dict[str, tuple[bool, str]]:
    """Adapter written, loads back, moves the logits; loss falls; share as asked; merge equals the adapted model."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.lora import SUMMARY_FILE, TrainSummary
    from training.merge import merge_adapter

    base_dir, adapter = _model_dir(out, job.model), out / "adapters" / job.name.replace(" ", "_") / "seed-0"
    res: dict[str, tuple[bool, str]] = {}
    if not (adapter / SUMMARY_FILE).exists():
        return {"trained": (False, "no adapter written")}
    s = TrainSummary.model_validate_json((adapter / SUMMARY_FILE).read_text())
    want = "fp32" if cpu else "bf16"
    res["trained"] = (s.precision == want and (cpu or "cuda" in s.device), f"{s.steps} steps, {s.precision} on {s.device}")
    curve = [c.loss for c in s.loss_curve]
    first, last = sum(curve[:2]) / 2, sum(curve[-2:]) / 2
    res["loss falls"] = (last < first - 0.1, f"{first:.2f} -> {last:.2f}")
    a = s.adapted
    experts = any(t.startswith("experts.") for t in (a.targets if a else []))
    res["adapted share"] = (a is not None and experts == job.target_experts,
                            f"{100 * a.covered:.1f}% of weights, {a.trainable_params:,} LoRA params"
                            + (" (experts)" if experts else "") if a else "not recorded")
    tok = AutoTokenizer.from_pretrained(base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    plain = _probe_logits(base, tok)
    tuned = PeftModel.from_pretrained(base, adapter)
    adapted = _probe_logits(tuned, tok)
    moved = (adapted - plain).abs().max().item()
    res["save/load"] = (moved > 1e-4, f"loaded; logits moved {moved:.3g}")
    merged_dir = merge_adapter(base_dir, adapter, out / "merged" / adapter.parent.name)
    merged = _probe_logits(AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32), tok)
    gap = (merged - adapted).abs().max().item()
    res["merge"] = (gap < 1e-3 * max(1.0, adapted.abs().max().item()), f"max abs(merged - adapted) {gap:.2g}")
    return res


def table(rows: list[Row], jobs: list[Job]) -> str:
    head = "| check | " + " | ".join(j.name for j in jobs) + " |"
    lines = [head, "|" + "---|" * (len(jobs) + 1)]
    lines += ["| " + r.check + " | " + " | ".join(r.results.get(j.name, "-") for j in jobs) + " |" for r in rows]
    return "\n".join(lines)


def run(out: Path, cpu: bool, fsdp1: bool = False) -> int:
    """Prepare, launch, check every job; print and write the table. 0 when everything passed."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch (use --cpu for the CPU twin)", file=sys.stderr)
        return 2
    prepare(out)
    jobs = JOBS + ([] if cpu else [j for j in FSDP_JOBS if j.fsdp == 2 or fsdp1])
    launches = {0: launch(out, cpu)} | {j.fsdp: launch(out, cpu, fsdp=j.fsdp) for j in jobs if j.fsdp}
    rows = [Row(check="accelerate launch")]
    for job in jobs:
        code, secs, tail = launches[job.fsdp]
        rows[0].results[job.name] = f"{'PASS' if code == 0 else 'FAIL'} exit {code}, {secs:.0f} s"
        if code:
            print(f"--- {job.name}: accelerate launch failed:\n{tail}", file=sys.stderr)
        for check, (ok, detail) in check_job(out, job, cpu).items():
            row = next((r for r in rows if r.check == check), None) or Row(check=check)
            if row not in rows:
                rows.append(row)
            row.results[job.name] = f"{'PASS' if ok else 'FAIL'} {detail}"
    text = table(rows, jobs)
    device = "cpu (fp32)" if cpu else f"{torch.cuda.get_device_name(0)} (bf16)"
    header = (f"gpu_check on {device}: torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')}, "
              f"{time.monotonic() - t0:.0f} s")
    print(header + "\n\n" + text)
    (out / "gpu_check.md").write_text(header + "\n\n" + text + "\n")
    (out / "gpu_check.json").write_text(json.dumps([r.model_dump() for r in rows], indent=2))
    return 0 if all(v.startswith("PASS") for r in rows for v in r.results.values()) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["run", "train"], help="run: the whole check; train: inside accelerate launch")
    ap.add_argument("--out", type=Path, required=True, help="Work directory (models, data, adapters, the table).")
    ap.add_argument("--cpu", action="store_true", help="The CPU twin: fp32 on CPU, no FSDP job (CI runs it).")
    ap.add_argument("--fsdp", type=int, choices=[1, 2], default=0, help="(train) the FSDP job of this version only.")
    ap.add_argument("--fsdp1", action="store_true", help="(run) also the expert job under FSDP1 (known to fail).")
    args = ap.parse_args()
    if args.step == "train":
        train_jobs(args.out, args.cpu, args.fsdp)
        return
    sys.exit(run(args.out, args.cpu, args.fsdp1))


if __name__ == "__main__":
    main()
