"""Two vLLM CPU servers of the same student behind one RolloutPool: the session's shared server (A) and a
second one started here (B) on the same tiny model. Requests spread over both, each conversation stays on
the server it started on, and B killed mid-stage (SIGKILL to its process group, so requests in flight die
rather than drain) loses no rollout: the pool notices B is gone (the episodes
on it end in model_error and B fails a health probe) and starts those jobs over on A.

Kept lean for 2 cores: B has no LoRA slots and a small window; episodes are 8 forced calls of one tool
(strict schema, sampled, 48 tokens), so every conversation makes exactly 8 requests. Stickiness is checked
on A's own request counter (Prometheus /metrics): the requests A served in the stage are exactly the turns
of the trajectories recorded on A.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import harness
import tasks
from agents.jobs import Limits, RolloutJob
from agents.pool import RolloutPool
from agents.records import ModelRole
from harness import ToolPolicy

FAMILY, TOOL = "stock_alert", "list_sheets"
N_JOBS = 8
TURNS = 8  # long enough that the watcher below, slow on a loaded machine, still finds B mid-stage


@pytest.fixture
def second_server(tiny_model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    """Server B: same weights, served under the same name as the shared server (`tiny`)."""
    from deploy.vllm_server import ServeSpec, free_port, start_server, stop_server

    state_dir = tmp_path / "vllm-b"
    spec = ServeSpec(model=str(tiny_model_dir), name="tiny", port=free_port(), enable_lora=False,
                     max_model_len=4096, cpu_kvcache_gib=1)
    handle = start_server(spec, state_dir=state_dir, ready_timeout_s=400)
    try:
        yield handle.api_base, spec.port, state_dir
    finally:
        stop_server(spec.port, state_dir=state_dir, grace_s=5)


def _metric(api_base: str, name: str) -> float:
    """A vLLM counter or gauge from its Prometheus endpoint, summed over its labels."""
    text = httpx.get(api_base.removesuffix("/v1") + "/metrics", timeout=10).text
    values = re.findall(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", text, flags=re.M)
    assert values, f"{name} missing from /metrics"
    return sum(float(v) for v in values)


def _requests_served(api_base: str) -> float:
    return _metric(api_base, "vllm:request_success_total")


def _jobs(api_base: str) -> list[RolloutJob]:
    if FAMILY not in tasks.families():
        pytest.skip(f"needs the {FAMILY} family")
    h = harness.baseline(FAMILY)
    env = tasks.make_env(tasks.instances(FAMILY, "val")[0])
    try:
        others = sorted(t.name for t in env.tools() if t.name != TOOL)
    finally:
        env.close()
    h = h.model_copy(update={"tools": ToolPolicy(hidden=others)})  # one tool in the prompt: short prefills
    role = ModelRole(model="hosted_vllm/tiny", api_base=api_base, max_tokens=48, temperature=1.0, strict_tools=True,
                     retries=1)
    limits = Limits(max_turns=TURNS, max_tokens_per_turn=48, wall_s=240)
    choice = {"type": "function", "function": {"name": TOOL}}
    insts = tasks.instances(FAMILY, "val")[: N_JOBS // 2]
    return [RolloutJob(instance=i, harness=h, model=role, seed=s, limits=limits, tool_choice=choice, tag="scaleout-vllm")
            for i in insts for s in range(2)]


@pytest.mark.vllm
@pytest.mark.slow
def test_two_servers_spread_stick_and_survive_one_stopped(vllm_server: str, second_server: tuple[str, int, Path],
                                                          ray_local: None) -> None:
    from deploy.vllm_server import find_server

    a, (b, b_port, b_state) = vllm_server, second_server
    jobs = _jobs(a)
    stopped: dict[str, float] = {}
    seen: list[tuple[int, int, float]] = []  # the watcher's (finished on B, in flight on B, B's answers) snapshots
    served_a, served_b0 = _requests_served(a), _requests_served(b)
    stop = threading.Event()
    with RolloutPool(n_actors=2, concurrency_per_server=2, max_attempts=3, api_bases={"hosted_vllm/tiny": [a, b]}) as pool:
        def stop_b_mid_stage() -> None:
            """Once B has answered a first turn and still owes at least 2 turns to conversations it holds.

            "In flight" alone is not enough: an episode whose turns are all done stays in flight until the pool
            collects it, and on a loaded machine this thread can wake only then (CI once killed a B that owed
            nothing, so nothing was rerouted). Owed turns = TURNS x (episodes given to B) - requests B answered;
            read in this order (finished, in flight, answered) every race makes the count smaller, never larger.
            """
            while not stop.is_set():
                done_on_b = sum(t.server == b for t in list(pool.timings.values()))
                in_flight_b = pool.server_loads().get(b, 0)
                if in_flight_b > 0:  # only then ask B's /metrics (slow on a loaded machine)
                    served_b = _requests_served(b) - served_b0
                    owed = TURNS * (done_on_b + in_flight_b) - served_b
                    seen.append((done_on_b, in_flight_b, served_b))
                    if served_b >= 1 and owed >= 2:
                        stopped.update(in_flight=in_flight_b, done_on_b=done_on_b, owed=owed)
                        os.killpg(find_server(b_port, b_state).pid, signal.SIGKILL)  # in-flight requests die too
                        return
                time.sleep(0.05)

        stopper = threading.Thread(target=stop_b_mid_stage)
        stopper.start()
        try:
            trajs = list(pool.stream(jobs))
        finally:
            stop.set()
            stopper.join()
        stats, timings = pool.stats, dict(pool.timings)
    served_a = _requests_served(a) - served_a

    assert stopped.get("in_flight", 0) > 0, f"B was never caught owing turns; watcher snapshots {seen[:20]}"
    # Nothing lost, nothing twice; every rollout a real 4-turn conversation of forced tool calls.
    assert sorted(t.id for t in trajs) == sorted(j.key for j in jobs)
    for t in trajs:
        assert t.stop_reason == "max_turns", (t.stop_reason, t.error)
        assert [c.name for turn in t.turns for c in turn.tool_calls] == [TOOL] * TURNS
    # Spread: B took conversations (and answered requests) before it stopped; the jobs it had in flight started
    # over on A; the ones it finished stay recorded on B, not rerun.
    servers = {k: tm.server for k, tm in timings.items()}
    assert set(servers.values()) <= {a, b} and a in servers.values()
    assert sum(s == b for s in servers.values()) >= stopped["done_on_b"]
    assert stats.servers_down == [b] and stats.rerouted >= 1 and stats.gave_up == 0, (stats, stopped)
    rerouted = [k for k, tm in timings.items() if tm.attempts > 1]
    assert len(rerouted) == stats.rerouted and all(servers[k] == a for k in rerouted)
    # Stickiness: A answered exactly the turns of the conversations recorded on A (none of B's half-done ones).
    turns_on_a = sum(len(t.turns) for t in trajs if servers[t.id] == a)
    assert served_a == turns_on_a, (served_a, turns_on_a)
