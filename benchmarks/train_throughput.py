"""Training throughput: our LoRA trainer (training/lora.py) vs TRL's SFTTrainer + peft, same everything.

    .venv/bin/pip install -e '.[bench]'          # TRL is a benchmark extra, not a dependency
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_throughput.py --repeats 2

Dataset: real oracle trajectories (`--examples`, default 200) of four non-browser families on the `pretrain`
split (indices >= 1000), run through the real rollout runtime under each family's baseline harness and
tokenized with the tiny model's tokenizer (mask `assistant`). `--synthetic` uses the test helpers' short
synthetic conversations instead (the earlier benchmark).

Steady state: both workers record the wall time at the end of every optimizer step; steady trained tokens/s =
trained tokens of steps 2..N / (end of step N - end of step 1), with the per-step trained tokens taken as the
run's mean for both trainers (TRL does not expose its batches); set-up (imports, model load, TRL's dataset
preparation, first step) is reported separately as the time to the end of step 1.

Same tiny model, same tokenized dataset and loss masks (our `labels` column is passed to TRL as is), LoRA
rank 16 / alpha 32 / dropout 0.05 on q,k,v,o,gate,up,down, AdamW lr 1e-4, warmup + cosine, 2 epochs,
micro-batch 1 x accumulation 8, fp32, no gradient checkpointing for either. Each run is its own subprocess
(a clean peak RSS from getrusage), measured end to end: model load, training, adapter save. Runs alternate
(ours, TRL, ours, TRL, ...) so machine load hits both alike; the best run of each is reported, plus
trained tokens per CPU-second, which is steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_io import save_results  # benchmarks/ is sys.path[0] when this script runs

REPO = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, resource, sys, time
from pathlib import Path
import torch
which, data, base, out = sys.argv[1:5]
from training.config import TrainConfig
from training.dataset import load_dataset
examples, manifest = load_dataset(data)
EPOCHS = int(sys.argv[5])
trained = sum(e.n_trained for e in examples) * EPOCHS
t0, c0 = time.perf_counter(), time.process_time()
ends = []
if which == "ours":
    from training.lora import train_adapter
    config = TrainConfig(rank=16, epochs=EPOCHS, lr=1e-4, effective_batch=8, micro_batch=1, precision="fp32",
                         gradient_checkpointing=False, checkpoint_every=10**9)
    s = train_adapter(examples, out, base=base, config=config, seed=0, on_step=lambda _: ends.append(time.perf_counter()))
    final_loss = s.loss_curve[-1].loss
else:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Ends(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())
    ds = Dataset.from_list([{"input_ids": e.input_ids, "labels": e.labels} for e in examples])
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    args = SFTConfig(output_dir=out, num_train_epochs=EPOCHS, learning_rate=1e-4, lr_scheduler_type="cosine",
                     warmup_steps=0.05, per_device_train_batch_size=1, gradient_accumulation_steps=8,
                     bf16=False, fp16=False, gradient_checkpointing=False, max_length=None,
                     logging_steps=1, save_strategy="no", report_to="none", seed=0, use_cpu=True,
                     dataloader_num_workers=0, disable_tqdm=True)
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, bias="none", task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=AutoTokenizer.from_pretrained(base),
                         peft_config=peft_config, callbacks=[Ends()])
    trainer.train()
    trainer.save_model(out)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    final_loss = losses[-1] if losses else float("nan")
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ru = resource.getrusage(resource.RUSAGE_SELF)
n = len(ends)
steady = trained * (n - 1) / n / (ends[-1] - ends[0]) if n > 1 else float("nan")
print("RESULT " + json.dumps({"which": which, "wall_s": wall, "cpu_s": cpu, "steps": n, "steady_tokens_per_s": steady,
                              "setup_s": ends[0] - t0 if ends else float("nan"),
                              "trained_tokens": trained, "peak_rss_mib": ru.ru_maxrss / 1024, "final_loss": final_loss}))
"""


ORACLE_FAMILIES = ("stock_alert", "payroll_audit", "budget_approval", "anomaly_detection")


def oracle_trajectories(n: int) -> list:
    """n oracle rollouts, round-robin over ORACLE_FAMILIES, on pretrain instances (indices >= 1000)."""
    import asyncio

    import harness
    import tasks
    from agents.records import ModelRole
    from agents.rollout import Limits, run_episode

    async def one(i: int):
        family = ORACLE_FAMILIES[i % len(ORACLE_FAMILIES)]
        env = tasks.make_env(tasks.get(family).generate(1000 + i // len(ORACLE_FAMILIES)))
        try:
            return await run_episode(ModelRole(model=f"oracle/{family}"), harness.baseline(family), env, seed=0,
                                     limits=Limits(max_turns=40))
        finally:
            env.close()

    async def all_() -> list:
        return [await one(i) for i in range(n)]

    return asyncio.run(all_())


def build_data(base: Path, out: Path, n: int, synthetic: bool) -> Path:
    from training.dataset import build_dataset, load_tokenizer, write_dataset

    if synthetic:
        sys.path.insert(0, str(REPO / "tests"))
        from training_helpers import make_trajectory  # the same synthetic agent conversations the tests use

        trajs = [make_trajectory(i, n_tool_turns=1 + i % 4) for i in range(n)]
    else:
        trajs = [t for t in oracle_trajectories(n) if t.passed]
    return write_dataset(build_dataset(trajs, load_tokenizer(base), mask="assistant"), out)


def run_one(which: str, data: Path, base: Path, tmp: Path, epochs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    out = tmp / f"{which}-{time.time_ns()}"
    proc = subprocess.run([sys.executable, "-c", WORKER, which, str(data), str(base), str(out), str(epochs)], env=env,
                          capture_output=True, text=True, cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{which} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    r = json.loads(lines[-1][len("RESULT "):])
    r["tokens_per_s"] = r["trained_tokens"] / r["wall_s"]
    r["tokens_per_cpu_s"] = r["trained_tokens"] / r["cpu_s"]
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=REPO / ".cache" / "tiny-model")
    ap.add_argument("--examples", type=int, default=200, help="Trajectories in the dataset.")
    ap.add_argument("--synthetic", action="store_true", help="Short synthetic conversations, not oracle rollouts.")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="Runs per trainer (alternating).")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        data = build_data(args.base, tmp / "data", args.examples, args.synthetic)
        stats = json.loads((data / "manifest.json").read_text())["stats"]
        runs: dict[str, list[dict]] = {"ours": [], "trl": []}
        for _ in range(args.repeats):
            for which in ("ours", "trl"):
                runs[which].append(run_one(which, data, args.base, tmp, args.epochs))
                print(f"  {which:4s} wall {runs[which][-1]['wall_s']:.1f} s, cpu {runs[which][-1]['cpu_s']:.1f} s", flush=True)
    import trl

    best = {k: max(v, key=lambda r: r["tokens_per_s"]) for k, v in runs.items()}
    print(f"\ndataset: {stats['examples']} examples, {stats['tokens']} tokens, {stats['trained_tokens']} trained tokens "
          f"(x{args.epochs} epochs); tiny model; torch threads={os.environ.get('OMP_NUM_THREADS', 'default')}; "
          f"TRL {trl.__version__}; load avg {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"| trainer | steady trained tok/s (best of {args.repeats}) | set-up s (to end of step 1) | end-to-end tok/s | "
          "trained tok/CPU-s | peak RSS MiB | final loss |")
    print("|---|---|---|---|---|---|---|")
    for k in ("ours", "trl"):
        b = max(runs[k], key=lambda r: r["steady_tokens_per_s"])
        cpu = max(r["tokens_per_cpu_s"] for r in runs[k])
        rss = min(r["peak_rss_mib"] for r in runs[k])
        print(f"| {k} | {b['steady_tokens_per_s']:.0f} | {min(r['setup_s'] for r in runs[k]):.1f} | "
              f"{best[k]['tokens_per_s']:.0f} | {cpu:.0f} | {rss:.0f} | {b['final_loss']:.4f} |")
    steady = (max(r["steady_tokens_per_s"] for r in runs["ours"]) / max(r["steady_tokens_per_s"] for r in runs["trl"]))
    print(f"\nsteady-state ratio ours/TRL: {steady:.2f}x")
    out = save_results("train_throughput", {"dataset": stats, "epochs": args.epochs, "runs": runs}, args)
    print(f"raw results: {out.relative_to(REPO)}")
    ratio = best["ours"]["tokens_per_s"] / best["trl"]["tokens_per_s"]
    cpu_ratio = max(r["tokens_per_cpu_s"] for r in runs["ours"]) / max(r["tokens_per_cpu_s"] for r in runs["trl"])
    mem = min(r["peak_rss_mib"] for r in runs["ours"]) / min(r["peak_rss_mib"] for r in runs["trl"])
    print(f"\nratio ours/TRL: {ratio:.2f}x wall tok/s (target >= 1.0), {cpu_ratio:.2f}x tok/CPU-s; "
          f"peak RSS ours/TRL {mem:.2f} (target <= 1.0)")


if __name__ == "__main__":
    main()
