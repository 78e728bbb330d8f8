"""The micro student's decode speed against its limit: the cores' FLOP bound, a batched transformers peer, vLLM.

    .venv/bin/python benchmarks/decode_limit.py                       # M0 (deploy/micro), every part
    .venv/bin/python benchmarks/decode_limit.py --batch 8 --new-tokens 64 --server-args "--max-num-seqs 16"

One run, one workload: `--batch` prompts (the first user turn of `--batch` test instances of M0's families,
rendered with the baseline harness's system prompt and tools through M0's chat template, so each prompt is as
long as a round's first turn), each continued by exactly `--new-tokens` greedy tokens (EOS ignored, so every side
does the same work). Three figures, in generated tokens per second over the whole batch:
(a) the bound: a matmul microbenchmark of these cores (torch, fp32 and bf16, `--threads`) over the model's FLOPs
    per generated token (2 x the weights a token passes through + the attention over the context);
(b) the peer: `transformers` `generate` on the same weights, the whole batch at once (left padding, KV cache);
(c) the server: the vLLM CPU server on the same weights, the batch in flight at once through /v1/completions with
    the prompts as token ids (the server's own settings plus `--server-args`);
(d) with `--lora ADAPTER`: the same server decoding through that LoRA adapter, once per `--max-lora-rank` (vLLM
    pads every adapter to the server's max_lora_rank, so the setting is part of the cost).
vLLM's engine and the peer run on the same cores; prints a table and writes the raw JSON to benchmarks/results/.
Nothing here is a timed assertion: the machine's load average is recorded with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from results_io import save_results  # noqa: E402

MICRO = REPO / "deploy" / "micro"
FAMILIES = ("code_refactor", "payroll_audit", "anomaly_detection")


def prompts(model_dir: Path, batch: int) -> list[list[int]]:
    """Token ids of `batch` first-turn prompts (system prompt + tools of the baseline harness, the instruction)."""
    import harness
    import tasks
    from harness.render import render
    from training.dataset import load_tokenizer

    tok = load_tokenizer(model_dir)
    out: list[list[int]] = []
    i = 0
    while len(out) < batch:
        family = FAMILIES[i % len(FAMILIES)]
        inst = tasks.instances(family, "test")[i // len(FAMILIES)]
        env = tasks.make_env(inst)
        try:
            rendered = render(harness.baseline(family), env.tools())
        finally:
            env.close()
        msgs = [{"role": "system", "content": rendered.system_prompt}, {"role": "user", "content": inst.instruction}]
        ids = tok.apply_chat_template(msgs, tools=rendered.openai_tools(), add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids))
        i += 1
    return out


def flops_per_token(config: dict[str, Any], context: float) -> float:
    """2 x (the matmul weights one token passes through) + the attention scores and values over `context`."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    hd, nq, nkv = config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
    per_layer = h * hd * (nq + 2 * nkv) + nq * hd * h + 3 * h * inter
    weights = layers * per_layer + h * config["vocab_size"]  # + the output projection (tied or not)
    attention = layers * 2 * 2 * nq * hd * context  # q.k and p.v, 2 FLOP per multiply-add
    return 2.0 * weights + attention


def matmul_peak(threads: int, size: int = 1024, seconds: float = 3.0) -> dict[str, float]:
    """GFLOP/s of square matmuls on `threads` threads, fp32 and bf16 (the best of repeated runs)."""
    import torch

    torch.set_num_threads(threads)
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        a @ b
        best, end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            for _ in range(4):
                a @ b
            best = max(best, 4 * 2 * size**3 / (time.perf_counter() - t0))
        out[name] = best / 1e9
    return out


def peer(model_dir: Path, batch: list[list[int]], new_tokens: int, threads: int, dtype: str) -> dict[str, Any]:
    """transformers generate, the whole batch at once, greedy, exactly `new_tokens` each."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    width = max(len(p) for p in batch)
    pad = model.config.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    with torch.inference_mode():
        model.generate(input_ids=ids[:1, -64:], attention_mask=mask[:1, -64:], max_new_tokens=2, do_sample=False)
        t0 = time.perf_counter()
        model(input_ids=ids, attention_mask=mask)  # the prefill alone, to split the wall time
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
        wall = time.perf_counter() - t0
    generated = int((out.shape[1] - width) * out.shape[0])
    return {"wall_s": wall, "prefill_s": prefill, "generated": generated, "tok_s": generated / wall,
            "decode_tok_s": generated / max(1e-9, wall - prefill), "dtype": dtype, "load_avg": os.getloadavg()}


async def _send(api_base: str, name: str, batch: list[list[int]], new_tokens: int) -> tuple[float, int]:
    """(wall seconds, generated tokens) of the whole batch in flight at once, after one short warm request."""
    import httpx

    async with httpx.AsyncClient(base_url=api_base, timeout=900,
                                 limits=httpx.Limits(max_connections=len(batch))) as client:
        async def one(p: list[int]) -> int:
            body = {"model": name, "prompt": p, "max_tokens": new_tokens, "min_tokens": new_tokens,
                    "temperature": 0.0, "ignore_eos": True}
            r = await client.post("/completions", json=body)
            r.raise_for_status()
            return int(r.json()["usage"]["completion_tokens"])

        await one(batch[0][-64:])  # warm
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(p) for p in batch))
        return time.perf_counter() - t0, sum(counts)


def server(model_dir: Path, batch: list[list[int]], new_tokens: int, threads: int, args: str, dtype: str,
           lora: Path | None = None, max_lora_rank: int = 64) -> list[dict[str, Any]]:
    """The vLLM CPU server on the same weights and cores, the batch in flight at once: on the base weights, and
    through `lora` when given (the same server, adapter loaded at run time)."""
    from deploy.vllm_server import ServeSpec, free_port, load_adapter, start_server, stop_server

    cpus = sorted(os.sched_getaffinity(0))[:threads]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cpus))
    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    spec = ServeSpec(model=str(model_dir), name="m0", port=free_port(), enable_lora=lora is not None,
                     max_lora_rank=max_lora_rank, max_model_len=8192, cpu_kvcache_gib=2, dtype=dtype,
                     extra_args=shlex.split(args))
    state = Path(tempfile.mkdtemp(prefix="decode-limit-"))
    handle = start_server(spec, state_dir=state, ready_timeout_s=600)
    out = []
    try:
        names = [spec.name]
        if lora is not None:
            load_adapter(handle.api_base, "adapter", lora, probe=False)
            names.append("adapter")
        for name in names:
            wall, generated = asyncio.run(_send(handle.api_base, name, batch, new_tokens))
            out.append({"wall_s": wall, "generated": generated, "tok_s": generated / wall, "dtype": dtype,
                        "server_args": args, "model": "base" if name == spec.name else f"LoRA {lora}",
                        "max_lora_rank": max_lora_rank if lora is not None else None, "load_avg": os.getloadavg()})
    finally:
        stop_server(spec.port, state_dir=state)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=MICRO, help="Model directory (default: M0, deploy/micro).")
    ap.add_argument("--batch", type=int, default=8, help="Prompts decoded at once (the round's concurrency).")
    ap.add_argument("--new-tokens", type=int, default=128, help="Tokens generated per prompt (EOS ignored).")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="Cores for every side.")
    ap.add_argument("--dtype", default="bfloat16", help="Weights' dtype on both sides (the server's default).")
    ap.add_argument("--server-args", action="append", default=None,
                    help="Extra vLLM arguments; repeat to measure several server settings in the same run.")
    ap.add_argument("--lora", type=Path, default=None, help="A PEFT adapter of the model: also decode through it.")
    ap.add_argument("--max-lora-rank", type=int, action="append", default=None,
                    help="With --lora: the server's max_lora_rank (repeat to compare; default 64, the server's).")
    ap.add_argument("--skip", action="append", default=[], choices=["bound", "peer", "server"])
    args = ap.parse_args()
    import json

    config = json.loads((args.model / "config.json").read_text())
    batch = prompts(args.model, args.batch)
    context = sum(len(p) for p in batch) / len(batch) + args.new_tokens / 2
    per_token = flops_per_token(config, context)
    results: dict[str, Any] = {"prompt_tokens": [len(p) for p in batch], "new_tokens": args.new_tokens,
                               "mean_context": context, "flops_per_token": per_token}
    if "bound" not in args.skip:
        peak = matmul_peak(args.threads)
        results["bound"] = {"gflops": peak, "tok_s": {k: v * 1e9 / per_token for k, v in peak.items()},
                            "load_avg": os.getloadavg()}
    if "peer" not in args.skip:
        results["peer"] = peer(args.model, batch, args.new_tokens, args.threads, args.dtype)
    if "server" not in args.skip:
        results["server"] = [row for a in (args.server_args or [""]) for rank in (args.max_lora_rank or [64])
                             for row in server(args.model, batch, args.new_tokens, args.threads, a, args.dtype,
                                               args.lora, rank)]
    rows = []
    if "bound" in results:
        rows += [(f"FLOP bound ({k}, {results['bound']['gflops'][k]:.0f} GFLOP/s)", v)
                 for k, v in results["bound"]["tok_s"].items()]
    if "peer" in results:
        rows.append((f"transformers generate, batch {args.batch} ({args.dtype})", results["peer"]["tok_s"]))
    for s in results.get("server", []):
        lora = f", LoRA (max_lora_rank {s['max_lora_rank']})" if s["model"] != "base" else ""
        rows.append((f"vLLM CPU server, {args.batch} in flight {s['server_args'] or '(defaults)'}{lora}", s["tok_s"]))
    print(f"| {args.model} decode, {args.batch} prompts of ~{int(context - args.new_tokens / 2)} tokens + {args.new_tokens} "
          f"generated | tokens/s |\n|---|---|")
    for name, v in rows:
        print(f"| {name} | {v:,.0f} |")
    print(f"wrote {save_results('decode_limit', results, args)}")


if __name__ == "__main__":
    main()
