"""Rollout pool throughput vs the model server alone (issue 5, "Performance").

    .venv/bin/python benchmarks/rollout_throughput.py                 # 32 rollouts x 8 turns, 16 in flight, 3 repeats

1. Starts a vLLM CPU server on the tiny model (deploy.vllm_server; dev mode, so the prefix cache can be reset).
2. Workload: N multi-turn rollouts of `--family` under its baseline harness. The model is told to call
   `--tool` every turn (named `tool_choice`, tools sent with `strict: true`, so vLLM's guided decoding makes
   even the random tiny model produce a valid call); the environment runs each call and the episode goes on
   until `--max-turns`. Without this the tiny model's calls never parse and every episode ends after one turn.
3. Each repeat: reset the server's prefix cache, run the N rollouts through `RolloutPool` (`--concurrency`
   episodes in flight); reset the cache again, then send every model request those rollouts made (the same
   messages, tools, tool_choice, seed and max tokens, read back from the trajectories, turn by turn) straight
   to the server with httpx, `--concurrency` at a time.
   `--workload realistic` instead mixes four families (stock_alert, payroll_audit, budget_approval,
   anomaly_detection) under their baseline harnesses with `tool_choice: required`: the model picks any of
   the family's tools with schema-valid arguments, the environment really runs them (errors included), so
   environment time and varied tool results are part of the measurement.
   `--student micro --workload realistic`: the same with the committed micro student M0 (deploy/micro) on the
   three families it was trained on (code_refactor, payroll_audit, anomaly_detection), `tool_choice: auto`
   (it writes its own calls, as in a round), T=0.7: multi-turn episodes that a real student ends itself.
   `--transport auto|litellm`: the client path inside the pool (agents/vllm_http.py's lean httpx path for
   hosted_vllm, the default, or LiteLLM); run both against one server (`--api-base`) to compare.
4. Prints generated tokens/s of both and their ratio per repeat and the median (target >= 0.8), and the
   pool's own overhead per turn: job round trip at the driver minus model-call latency minus time in the
   environment, per turn (target median < 5 ms), split into in-actor time and driver<->actor transport.
   Also the CPU seconds the pool's processes (driver + actors) and the direct client spend per model call,
   since on a small machine the client's CPU competes with the server's front end.
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
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402

from results_io import commit, machine  # noqa: E402  (benchmarks/ is sys.path[0] when a script here runs)

REALISTIC_FAMILIES = ("stock_alert", "payroll_audit", "budget_approval", "anomaly_detection")
# Sampled, not greedy: greedy decoding makes the random tiny model loop on one token until max_tokens.
TEMPERATURE = 1.0


class Student(NamedTuple):
    """The served model: the random tiny model (built on demand) or the committed micro student M0."""

    served: str
    weights: Path
    families: tuple[str, ...]   # the realistic workload's families
    temperature: float
    max_model_len: int


STUDENTS = {
    "tiny": Student("tiny", REPO / ".cache" / "tiny-model", REALISTIC_FAMILIES, TEMPERATURE, 8192),
    # M0 writes its own calls (tool_choice auto, no guided decoding), at the round's sampling temperature, on the
    # three families it was trained on; its trajectories run 3k-11k tokens
    "micro": Student("micro", REPO / "deploy" / "micro", ("code_refactor", "payroll_audit", "anomaly_detection"),
                     0.7, 16384),
}


def parse_cpus(spec: str) -> set[int]:
    """'0', '0-3', '0,2-3' -> CPU ids."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def split_cpus(server_spec: str | None, shared: bool) -> tuple[set[int], set[int]]:
    """(server CPUs, client CPUs). By default the server gets the first half: on separate hardware (GPU
    server, rollout workers on CPUs) the client's work does not slow the server down; on a shared 2-core box
    it would, and the ratio would measure CPU contention rather than the pool."""
    cpus = sorted(os.sched_getaffinity(0))
    if shared or len(cpus) < 2:
        return set(cpus), set(cpus)
    server = parse_cpus(server_spec) if server_spec else set(cpus[: len(cpus) // 2])
    client = set(cpus) - server
    if not server <= set(cpus) or not client:
        raise SystemExit(f"--server-cpus {server_spec!r} must be a proper subset of this process's CPUs {cpus}")
    return server, client


def start_server(student: Student, max_model_len: int, cpus: set[int]) -> tuple[Any, Path]:
    from deploy.tiny_model import build_tiny_model, is_built
    from deploy.vllm_server import ServeSpec, free_port, start_server

    model_dir = student.weights
    if student.served == "tiny" and not is_built(model_dir):
        build_tiny_model(model_dir)
    state = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # exposes POST /reset_prefix_cache (read by ServeSpec.environment)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(cpus)))  # the engine's compute threads
    spec = ServeSpec(model=str(model_dir), name=student.served, port=free_port(), enable_lora=False,
                     max_model_len=max_model_len, cpu_kvcache_gib=1)
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)  # the server's processes inherit it (front end and engine included)
    try:
        return start_server(spec, state_dir=state, ready_timeout_s=600), state
    finally:
        os.sched_setaffinity(0, mine)


def reset_prefix_cache(api_base: str) -> bool:
    """Empty the server's prefix cache so neither side reuses the other's prompts; False if not in dev mode."""
    r = httpx.post(api_base.removesuffix("/v1") + "/reset_prefix_cache", timeout=30)
    return r.status_code == 200


def requests_of(trajectories: list[Any], role: Any, tool_choice: Any, served: str) -> list[dict[str, Any]]:
    """The chat requests the rollouts made (the conversation before each assistant message), turn by turn."""
    from agents.client import ModelClient
    from agents.seeds import turn_seed

    client = ModelClient(role)
    by_turn: list[tuple[int, dict[str, Any]]] = []
    for t in trajectories:
        turn = 0
        for i, m in enumerate(t.messages):
            if m.get("role") != "assistant":
                continue
            # the same body the rollout's client built (strict tools, the rollout's per-turn seed)
            kw = client.request_kwargs(t.messages[:i], t.tools or None, tool_choice,
                                       turn_seed(t.instance.id, t.seed, turn), role.max_tokens)
            body = {"model": served, "messages": kw["messages"], "max_tokens": kw["max_tokens"], "seed": kw["seed"],
                    "temperature": kw["temperature"], "top_p": kw["top_p"], **kw.get("extra_body", {})}
            if "tools" in kw:
                body |= {"tools": kw["tools"], "tool_choice": kw["tool_choice"]}
            by_turn.append((turn, body))
            turn += 1
    # all first turns, then all second turns, ...: the order in which the rollouts could issue them
    return [b for _, b in sorted(by_turn, key=lambda x: x[0])]


async def send_direct(api_base: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[int, float, int, float]:
    """Send all requests, `concurrency` at a time; returns (completion tokens, wall s, errors, client CPU s)."""
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

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(b) for b in bodies))
        return tokens, time.perf_counter() - t0, errors, time.process_time() - c0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=32, help="N rollouts per repeat (and their requests sent directly)")
    ap.add_argument("--concurrency", type=int, default=16, help="episodes / requests in flight")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--family", default="stock_alert")
    ap.add_argument("--tool", default="list_sheets", help="the tool every turn calls (a tool of --family)")
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64, help="generated tokens per turn")
    ap.add_argument("--repeats", type=int, default=3, help="pool/direct pairs; the median ratio is reported")
    ap.add_argument("--max-model-len", type=int, default=None, help="default: 8192 (tiny), 16384 (micro)")
    ap.add_argument("--api-base", default=None, help="use a running server (serving --student's name) instead of "
                                                     "starting one")
    ap.add_argument("--student", choices=sorted(STUDENTS), default="tiny",
                    help="tiny: the random tiny model; micro: the committed micro student M0 (deploy/micro), which "
                         "writes its own calls (realistic workload: its 3 families, tool_choice auto, T=0.7)")
    ap.add_argument("--server-cpus", default=None,
                    help="CPUs for the server, e.g. '0' or '0-3' (default: the first half); the pool, Ray and the "
                         "direct client run on the others")
    ap.add_argument("--shared-cpus", action="store_true",
                    help="no pinning: server, pool and direct client share every CPU")
    ap.add_argument("--workload", choices=("forced", "realistic"), default="forced",
                    help="forced: one argument-free tool every turn; realistic: several families, any tool (required "
                         "for tiny, auto for micro)")
    ap.add_argument("--transport", choices=("auto", "litellm"), default="auto",
                    help="the model client's path for hosted_vllm inside the pool (auto = lean httpx)")
    args = ap.parse_args()
    student = STUDENTS[args.student]
    if args.student == "micro" and args.workload != "realistic":
        ap.error("--student micro runs the realistic workload only (add --workload realistic)")
    max_model_len = args.max_model_len or student.max_model_len
    os.environ["COEVO_MODEL_TRANSPORT"] = args.transport  # before Ray starts: the actors inherit it
    server_cpus, client_cpus = split_cpus(args.server_cpus, args.shared_cpus)

    import ray

    import harness
    import tasks
    from agents.pool.driver import RolloutJob, RolloutPool
    from agents.records import ModelRole
    from agents.rollout import Limits
    from deploy.vllm_server import stop_server

    handle = state = None
    if args.api_base:
        api_base = args.api_base
    else:
        t0 = time.perf_counter()
        handle, state = start_server(student, max_model_len, server_cpus)
        api_base = handle.api_base
        print(f"vLLM CPU server ready at {api_base} in {time.perf_counter() - t0:.0f} s")
    os.sched_setaffinity(0, client_cpus)  # Ray (and so the actors) inherit it
    print(f"CPUs: server {sorted(server_cpus) if not args.api_base else 'as started'}, "
          f"pool + direct client {sorted(client_cpus)}" + (" (shared)" if server_cpus == client_cpus else ""))
    try:
        families = student.families if args.workload == "realistic" else (args.family,)
        per_family = [tasks.instances(f, "test") for f in families]
        insts = [xs[i] for i in range(min(map(len, per_family))) for xs in per_family]  # interleaved
        role = ModelRole(model=f"hosted_vllm/{student.served}", api_base=api_base, max_tokens=args.max_tokens,
                         retries=0, temperature=student.temperature, strict_tools=args.student == "tiny")
        tool_choice: Any = ("auto" if args.student == "micro" else "required" if args.workload == "realistic"
                            else {"type": "function", "function": {"name": args.tool}})
        limits = Limits(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)

        def jobs_for(repeat: int, tag: str) -> list[RolloutJob]:
            return [RolloutJob(instance=insts[i % len(insts)], harness=harness.baseline(insts[i % len(insts)].family), model=role, seed=repeat * 10_000 + i,
                               limits=limits, tool_choice=tool_choice, tag=tag) for i in range(args.rollouts)]

        can_reset = reset_prefix_cache(api_base)
        if not can_reset:
            print("note: the server has no /reset_prefix_cache (start it with VLLM_SERVER_DEV_MODE=1); the direct "
                  "replay will hit the prefix cache the pool filled")
        rows: list[dict[str, Any]] = []
        with RolloutPool(args.actors, num_cpus=len(client_cpus), concurrency_per_server=args.concurrency) as pool:
            actors = [a.handle for a in pool.actor_loads()]
            ray.get([a.ping.remote() for a in actors])
            pool.run(jobs_for(99, "warmup")[: args.concurrency])  # imports, LiteLLM set-up: not what we measure
            warm_bodies = requests_of(pool.run(jobs_for(98, "warmup")[: args.concurrency]), role, tool_choice,
                                      student.served)
            asyncio.run(send_direct(api_base, warm_bodies, args.concurrency))
            for rep in range(args.repeats):
                reset_prefix_cache(api_base)
                cpu0 = time.process_time() + sum(ray.get([a.cpu_seconds.remote() for a in actors]))
                t0 = time.perf_counter()
                trajs = pool.run(jobs_for(rep, "bench"))
                pool_wall = time.perf_counter() - t0
                pool_cpu = time.process_time() + sum(ray.get([a.cpu_seconds.remote() for a in actors])) - cpu0
                timings = [pool.timings[t.id] for t in trajs]
                bodies = requests_of(trajs, role, tool_choice, student.served)
                reset_prefix_cache(api_base)
                d_tokens, d_wall, d_errors, d_cpu = asyncio.run(send_direct(api_base, bodies, args.concurrency))
                turns = sum(len(t.turns) for t in trajs)
                p_tokens = sum(x.completion_tokens for t in trajs for x in t.turns)
                rows.append({
                    "pool_tokens": p_tokens, "pool_wall_s": pool_wall, "pool_tps": p_tokens / pool_wall,
                    "direct_tokens": d_tokens, "direct_wall_s": d_wall, "direct_tps": d_tokens / d_wall,
                    "direct_errors": d_errors, "turns": turns, "requests": len(bodies),
                    "tool_turns": sum(bool(x.tool_calls) for t in trajs for x in t.turns),
                    "tool_errors": sum(r.is_error for t in trajs for x in t.turns for r in x.tool_results),
                    "stops": dict(sorted(Counter(t.stop_reason for t in trajs).items())),
                    "pool_cpu_ms_per_turn": 1000 * pool_cpu / max(turns, 1),
                    "direct_cpu_ms_per_request": 1000 * d_cpu / max(len(bodies), 1),
                    "overhead_ms": [1000 * x.per_turn(x.overhead_s) for x in timings],
                    "in_actor_ms": [1000 * x.per_turn(x.in_actor_overhead_s) for x in timings],
                    "transport_ms": [1000 * x.per_turn(x.transport_s) for x in timings],
                    "model_ms": [1000 * x.per_turn(x.model_s) for x in timings],
                    "env_ms": [1000 * x.per_turn(x.env_s) for x in timings],
                })
                r = rows[-1]
                print(f"repeat {rep}: pool {r['pool_tokens']} tok in {pool_wall:.2f} s = {r['pool_tps']:.1f} tok/s | "
                      f"direct {d_tokens} tok in {d_wall:.2f} s = {r['direct_tps']:.1f} tok/s | "
                      f"ratio {r['pool_tps'] / r['direct_tps']:.3f} | {turns} turns ({r['tool_turns']} tool calls, "
                      f"{r['tool_errors']} tool errors), stops {r['stops']}, direct errors {d_errors} | "
                      f"overhead/turn median {statistics.median(r['overhead_ms']):.2f} ms", flush=True)

        ratios = [r["pool_tps"] / r["direct_tps"] for r in rows]
        med = {k: statistics.median(x for r in rows for x in r[k])
               for k in ("overhead_ms", "in_actor_ms", "transport_ms", "model_ms", "env_ms")}
        all_overhead = [x for r in rows for x in r["overhead_ms"]]
        report = {
            "rollouts": args.rollouts, "repeats": args.repeats, "concurrency": args.concurrency, "actors": args.actors,
            "student": args.student, "family": args.family, "tool": args.tool, "workload": args.workload, "transport": args.transport, "max_turns": args.max_turns, "max_tokens": args.max_tokens,
            "prefix_cache_reset": can_reset, "server_cpus": sorted(server_cpus), "client_cpus": sorted(client_cpus), "ratios": [round(x, 3) for x in ratios],
            "ratio_median": round(statistics.median(ratios), 3),
            "pool_tokens_per_s": [round(r["pool_tps"], 1) for r in rows],
            "direct_tokens_per_s": [round(r["direct_tps"], 1) for r in rows],
            "overhead_per_turn_ms_median": round(med["overhead_ms"], 2),
            "overhead_per_turn_ms_p90": round(pct(all_overhead, 0.9), 2),
            "in_actor_per_turn_ms_median": round(med["in_actor_ms"], 2),
            "transport_per_turn_ms_median": round(med["transport_ms"], 2),
            "model_per_turn_ms_median": round(med["model_ms"], 1), "env_per_turn_ms_median": round(med["env_ms"], 2),
            "pool_cpu_ms_per_turn": [round(r["pool_cpu_ms_per_turn"], 2) for r in rows],
            "direct_cpu_ms_per_request": [round(r["direct_cpu_ms_per_request"], 2) for r in rows],
        }
        print(f"ratio  : median {report['ratio_median']} over {args.repeats} repeats {report['ratios']}  (target >= 0.8)")
        print(f"pool overhead per turn: median {report['overhead_per_turn_ms_median']} ms, "
              f"p90 {report['overhead_per_turn_ms_p90']} ms  (target median < 5 ms); of which in-actor "
              f"{report['in_actor_per_turn_ms_median']} ms, driver<->actor {report['transport_per_turn_ms_median']} ms;"
              f" model {report['model_per_turn_ms_median']} ms/turn, environment {report['env_per_turn_ms_median']} ms/turn")
        print(f"client CPU: pool {report['pool_cpu_ms_per_turn']} ms per turn (driver + actors), "
              f"direct {report['direct_cpu_ms_per_request']} ms per request")
        print(json.dumps(report))
        out = REPO / "benchmarks" / "results" / f"rollout_throughput-{time.strftime('%Y-%m-%d')}-{args.workload}-{args.transport}{'-shared' if args.shared_cpus else ''}{'-micro' if args.student == 'micro' else ''}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**report, "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": commit(), "machine": machine(),
                                   "raw": rows}, indent=1))
        print(f"raw results: {out.relative_to(REPO)}")
    finally:
        if handle is not None and state is not None:
            stop_server(handle.spec.port, state_dir=state)


if __name__ == "__main__":
    main()
