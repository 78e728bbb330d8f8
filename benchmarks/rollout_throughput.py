"""Rollout pool throughput vs the model server alone (issue 5, "Performance").

    .venv/bin/python benchmarks/rollout_throughput.py --rollouts 32 --concurrency 16

1. Starts a vLLM CPU server on the tiny model (deploy.vllm_server), warms it up.
2. Pool: N rollouts (baseline harness, `tool_choice=required` so every turn is a parsed tool call and the
   episode runs to `--max-turns`) through `RolloutPool` with `--concurrency` episodes in flight.
3. Direct: every model request those rollouts made (the same messages, tools, seed and max tokens, read back
   from the trajectories) sent straight to the server with httpx, `--concurrency` at a time.
4. Prints generated tokens/s of both and the ratio (target >= 0.8), and the pool's own overhead per turn:
   job round trip at the driver minus model-call latency minus time inside environment methods, per turn
   (target median < 5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402

SERVED = "tiny"


def start_server(max_model_len: int) -> tuple[Any, Path]:
    from deploy.tiny_model import build_tiny_model, is_built
    from deploy.vllm_server import ServeSpec, free_port, start_server

    model_dir = REPO / ".cache" / "tiny-model"
    if not is_built(model_dir):
        build_tiny_model(model_dir)
    state = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    # ServeSpec turns chunked prefill off on CPU (the CPU build crashes on seeded, chunked prefills).
    spec = ServeSpec(model=str(model_dir), name=SERVED, port=free_port(), enable_lora=False,
                     max_model_len=max_model_len, cpu_kvcache_gib=1)
    return start_server(spec, state_dir=state, ready_timeout_s=600), state


# Sampled, not greedy: greedy decoding makes the random tiny model loop on digits inside a forced tool call
# until max_tokens, so no call ever parses and every episode ends after one turn.
TEMPERATURE = 1.0


def requests_of(trajectories: list[Any], max_tokens: int, tool_choice: str) -> list[dict[str, Any]]:
    """The exact chat requests the rollouts made: the conversation before each assistant message."""
    out = []
    for t in trajectories:
        turn = 0
        for i, m in enumerate(t.messages):
            if m.get("role") == "assistant":
                # the per-turn seed run_episode sends (episode seed * 1000 + turn), the same sampling settings
                body = {"model": SERVED, "messages": t.messages[:i], "max_tokens": max_tokens,
                        "seed": t.seed * 1_000 + turn, "temperature": TEMPERATURE, "top_p": 1.0,
                        "return_token_ids": True}
                turn += 1
                if t.tools:
                    body |= {"tools": t.tools, "tool_choice": tool_choice}
                out.append(body)
    return out


async def send_direct(api_base: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[int, float, int]:
    """Send all requests, `concurrency` at a time; returns (completion tokens, wall seconds, errors)."""
    sem = asyncio.Semaphore(concurrency)
    tokens = errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=api_base, timeout=300, limits=limits) as client:
        async def one(body: dict[str, Any]) -> None:
            nonlocal tokens, errors
            async with sem:
                r = await client.post("/chat/completions", json=body)
                if r.status_code != 200:
                    errors += 1
                    return
                tokens += int(r.json()["usage"]["completion_tokens"])

        t0 = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return tokens, time.perf_counter() - t0, errors


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=32, help="N rollouts (and the same requests sent directly)")
    ap.add_argument("--concurrency", type=int, default=16, help="episodes / requests in flight")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--family", default="stock_alert")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64, help="generated tokens per turn")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--api-base", default=None, help="use a running server (serving 'tiny') instead of starting one")
    args = ap.parse_args()

    import ray

    import harness
    import tasks
    from agents.pool import RolloutJob, RolloutPool
    from agents.records import ModelRole
    from agents.rollout import Limits
    from deploy.vllm_server import stop_server

    handle = state = None
    if args.api_base:
        api_base = args.api_base
    else:
        t0 = time.perf_counter()
        handle, state = start_server(args.max_model_len)
        api_base = handle.api_base
        print(f"vLLM CPU server ready at {api_base} in {time.perf_counter() - t0:.0f} s")
    try:
        insts = tasks.instances(args.family, "test")
        h = harness.baseline(args.family)
        role = ModelRole(model=f"hosted_vllm/{SERVED}", api_base=api_base, max_tokens=args.max_tokens, retries=0,
                         temperature=TEMPERATURE)
        limits = Limits(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
        jobs = [RolloutJob(instance=insts[i % len(insts)], harness=h, model=role, seed=i // len(insts), limits=limits,
                           tool_choice="required", tag="bench") for i in range(args.rollouts)]
        warm = [j.model_copy(update={"tag": "warmup"}) for j in jobs[: args.concurrency]]

        with RolloutPool(args.actors, num_cpus=os.cpu_count(), concurrency_per_server=args.concurrency) as pool:
            ray.get([a.handle.ping.remote() for a in pool.actor_loads()])
            pool.run(warm)  # actor imports, server warm-up, litellm client setup: not what we measure
            t0 = time.perf_counter()
            trajs = pool.run(jobs)
            pool_wall = time.perf_counter() - t0
            timings = [pool.timings[t.id] for t in trajs]
        pool_tokens = sum(x.completion_tokens for t in trajs for x in t.turns)
        turns = sum(len(t.turns) for t in trajs)
        tool_turns = sum(bool(x.tool_calls) for t in trajs for x in t.turns)
        stops: dict[str, int] = {}
        for t in trajs:
            stops[t.stop_reason] = stops.get(t.stop_reason, 0) + 1

        bodies = requests_of(trajs, args.max_tokens, "required")
        asyncio.run(send_direct(api_base, bodies[: args.concurrency], args.concurrency))  # same warm-up courtesy
        direct_tokens, direct_wall, direct_errors = asyncio.run(send_direct(api_base, bodies, args.concurrency))

        per_turn_ms = [1000 * x.overhead_per_turn_s for x in timings]
        in_actor_ms = [1000 * max(0.0, x.episode_s - x.model_s - x.env_s) / max(x.turns, 1) for x in timings]
        transport_ms = [1000 * max(0.0, x.roundtrip_s - x.episode_s) / max(x.turns, 1) for x in timings]
        model_ms = [1000 * x.model_s / max(x.turns, 1) for x in timings]
        env_ms = [1000 * x.env_s / max(x.turns, 1) for x in timings]
        pool_tps = pool_tokens / pool_wall
        direct_tps = direct_tokens / direct_wall
        report = {
            "rollouts": len(trajs), "turns": turns, "requests_direct": len(bodies), "concurrency": args.concurrency,
            "actors": args.actors, "family": args.family, "max_turns": args.max_turns, "max_tokens": args.max_tokens,
            "tool_call_turns": tool_turns, "stop_reasons": stops, "direct_errors": direct_errors,
            "pool_tokens": pool_tokens, "pool_wall_s": round(pool_wall, 2), "pool_tokens_per_s": round(pool_tps, 1),
            "direct_tokens": direct_tokens, "direct_wall_s": round(direct_wall, 2),
            "direct_tokens_per_s": round(direct_tps, 1), "ratio": round(pool_tps / direct_tps, 3),
            "overhead_per_turn_ms_median": round(statistics.median(per_turn_ms), 2),
            "overhead_per_turn_ms_p90": round(pct(per_turn_ms, 0.9), 2),
            "in_actor_overhead_per_turn_ms_median": round(statistics.median(in_actor_ms), 2),
            "ray_transport_per_turn_ms_median": round(statistics.median(transport_ms), 2),
            "model_latency_per_turn_ms_median": round(statistics.median(model_ms), 1),
            "env_time_per_turn_ms_median": round(statistics.median(env_ms), 2),
        }
        print(f"pool   : {pool_tokens} tokens in {pool_wall:.2f} s = {pool_tps:.1f} tok/s "
              f"({len(trajs)} rollouts, {turns} turns, {tool_turns} with tool calls, stop reasons {stops})")
        print(f"direct : {direct_tokens} tokens in {direct_wall:.2f} s = {direct_tps:.1f} tok/s "
              f"({len(bodies)} requests, {direct_errors} errors)")
        print(f"ratio  : {pool_tps / direct_tps:.3f}  (target >= 0.8)")
        print(f"pool overhead per turn: median {report['overhead_per_turn_ms_median']} ms, "
              f"p90 {report['overhead_per_turn_ms_p90']} ms  (target median < 5 ms); "
              f"of which in-actor {report['in_actor_overhead_per_turn_ms_median']} ms, "
              f"Ray transport {report['ray_transport_per_turn_ms_median']} ms; "
              f"model {report['model_latency_per_turn_ms_median']} ms/turn, env {report['env_time_per_turn_ms_median']} ms/turn")
        print(json.dumps(report))
    finally:
        if handle is not None and state is not None:
            stop_server(handle.spec.port, state_dir=state)


if __name__ == "__main__":
    main()
