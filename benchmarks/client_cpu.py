"""Client CPU per model call: `ModelClient` (lean httpx path and LiteLLM) vs a bare httpx client (issue 11 §2).

    .venv/bin/python benchmarks/client_cpu.py                     # starts a vLLM CPU server on the tiny model
    .venv/bin/python benchmarks/client_cpu.py --api-base URL      # a running server serving 'tiny'

The same requests (the baseline harness's system prompt and tools of `--family`, a user turn per instance,
named tool_choice, strict tools, `--max-tokens` generated tokens, per-request seeds) are sent in rounds
(bare httpx, ModelClient lean, ModelClient litellm; the order rotates each repeat so load hits all alike),
`--concurrency` in flight, and the CPU seconds of this process (`time.process_time`, all threads) are divided
by the number of calls. CPU time is what a driver node spends per call whatever the server's speed; wall
time on this shared machine mostly measures the server and other jobs. Target: ModelClient <= 2x the bare
client per call. Raw JSON goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402

from results_io import save_results  # noqa: E402
from rollout_throughput import SERVED, start_server  # noqa: E402


def requests(family: str, n: int, max_tokens: int) -> list[dict[str, Any]]:
    """(messages, tools, tool_choice, seed) of n calls, as ModelClient.complete takes them."""
    import harness
    import tasks
    from harness.render import render

    h = harness.baseline(family)
    insts = tasks.instances(family, "test")
    out = []
    for i in range(n):
        inst = insts[i % len(insts)]
        env = tasks.make_env(inst)
        try:
            rendered = render(h, env.tools())
        finally:
            env.close()
        msgs = [{"role": "system", "content": rendered.system_prompt}, {"role": "user", "content": inst.instruction}]
        out.append({"messages": msgs, "tools": rendered.openai_tools(), "seed": i, "max_tokens": max_tokens})
    return out


async def bare(api_base: str, bodies: list[dict[str, Any]], concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=api_base, timeout=300, limits=limits) as client:
        async def one(body: dict[str, Any]) -> None:
            nonlocal errors
            async with sem:
                r = await client.post("/chat/completions", json=body)
                errors += r.status_code != 200
                r.json()

        await asyncio.gather(*(one(b) for b in bodies))
    return errors


async def via_client(client: Any, reqs: list[dict[str, Any]], concurrency: int, tool_choice: Any) -> int:
    sem = asyncio.Semaphore(concurrency)

    async def one(r: dict[str, Any]) -> None:
        async with sem:
            await client.complete(r["messages"], r["tools"], tool_choice=tool_choice, seed=r["seed"],
                                  max_tokens=r["max_tokens"])

    await asyncio.gather(*(one(r) for r in reqs))
    return 0


def measure(fn: Any) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(fn())
    return time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--api-base", default=None)
    ap.add_argument("--family", default="stock_alert")
    ap.add_argument("--tool", default="list_sheets")
    ap.add_argument("--calls", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from agents.client import ModelClient
    from agents.vllm_http import request_body
    from agents.records import ModelRole
    from deploy.vllm_server import stop_server

    handle = state = None
    api_base = args.api_base
    if api_base is None:
        handle, state = start_server(8192, set(os.sched_getaffinity(0)))
        api_base = handle.api_base
    try:
        role = ModelRole(model=f"hosted_vllm/{SERVED}", api_base=api_base, retries=0, temperature=1.0, strict_tools=True)
        tool_choice = {"type": "function", "function": {"name": args.tool}}
        reqs = requests(args.family, args.calls, args.max_tokens)
        lean, full = ModelClient(role, "auto"), ModelClient(role, "litellm")
        bodies = [request_body(lean.request_kwargs(r["messages"], r["tools"], tool_choice, r["seed"], r["max_tokens"]))
                  for r in reqs]
        runs = {
            "bare": lambda: bare(api_base, bodies, args.concurrency),
            "lean": lambda: via_client(lean, reqs, args.concurrency, tool_choice),
            "litellm": lambda: via_client(full, reqs, args.concurrency, tool_choice),
        }
        for name in runs:  # warm-up: imports, connection pools, LiteLLM set-up
            measure(runs[name])
        rows: dict[str, list[dict[str, float]]] = {k: [] for k in runs}
        order = list(runs)
        for rep in range(args.repeats):
            for name in order[rep % 3:] + order[: rep % 3]:
                cpu, wall = measure(runs[name])
                rows[name].append({"cpu_ms_per_call": 1000 * cpu / args.calls, "wall_s": wall})
                print(f"repeat {rep} {name:8s}: {1000 * cpu / args.calls:.2f} ms CPU per call, wall {wall:.1f} s", flush=True)
        med = {k: statistics.median(r["cpu_ms_per_call"] for r in v) for k, v in rows.items()}
        print(f"\nCPU per call (median of {args.repeats}): bare {med['bare']:.2f} ms | ModelClient lean {med['lean']:.2f} ms "
              f"({med['lean'] / med['bare']:.2f}x bare) | ModelClient litellm {med['litellm']:.2f} ms "
              f"({med['litellm'] / med['bare']:.2f}x bare)   target <= 2x")
        out = save_results("client_cpu", {"median_cpu_ms_per_call": med, "runs": rows}, args)
        print(f"raw results: {out.relative_to(REPO)}")
    finally:
        if handle is not None and state is not None:
            stop_server(handle.spec.port, state_dir=state)


if __name__ == "__main__":
    main()
