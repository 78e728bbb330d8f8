"""Two vLLM CPU servers of the same student behind one RolloutPool: the session's shared server (A) and a
second one started here (B) on the same tiny model. Requests spread over both, each conversation stays on
the server it started on, and B killed mid-stage (SIGKILL to its process group, so requests in flight die
rather than drain) loses no rollout: the pool notices B is gone (the episodes on it end in model_error and B
fails a health probe) and starts those jobs over on A.

B is reached through a small forwarding gate (the way a load balancer fronts a replica), which kills B at a
point fixed by the protocol, not by timing: when the first second-turn request of a conversation reaches B.
That conversation owes turns to B (so something must be rerouted), and B has answered at least one request.
Earlier versions watched the pool from a thread and lost the race on loaded CI machines three times.

Kept lean for 2 cores: B has no LoRA slots and a small window; episodes are 8 forced calls of one tool
(strict schema, sampled, up to 160 tokens), so every conversation makes exactly 8 requests. The tiny model pads
the empty arguments object with whitespace the grammar allows: over 300 sampled seeds (temperature 1.0) a call took
24-69 tokens, 18 of 300 over 48, so a 48-token cap cut about 4 conversations of 8 turns in 10. Stickiness is checked
on A's own request counter (Prometheus /metrics): the requests A served in the stage are exactly the turns
of the trajectories recorded on A.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

import harness
import tasks
from agents.jobs import Limits, RolloutJob
from agents.pool.driver import RolloutPool
from agents.records import ModelRole
from harness import ToolPolicy

FAMILY, TOOL = "stock_alert", "list_sheets"
N_JOBS = 8
TURNS = 8  # every conversation makes exactly 8 requests
MAX_TOKENS = 160  # a forced call of the tiny model takes 24-69 tokens (300 seeds); 160 leaves no cut call


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


class KillGate:
    """Forwards HTTP to server B; `on_second_turn` runs once, before forwarding, when the first request that
    continues a conversation (it carries an assistant message) arrives. Replies from a dead B become 502,
    as a load balancer answers for a replica that is gone."""

    def __init__(self, upstream: str, on_second_turn: Callable[[], None]) -> None:
        self.upstream, self.on_second_turn = upstream.rstrip("/"), on_second_turn
        self.answered = 0  # chat completions B answered with 200 through the gate
        self.fired = threading.Event()
        self._lock = threading.Lock()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body: bytes | None) -> None:
                if body is not None and gate._continues(body):
                    with gate._lock:
                        if not gate.fired.is_set():
                            gate.on_second_turn()
                            gate.fired.set()
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                url = gate.upstream + self.path.removeprefix("/v1")
                try:
                    r = httpx.request(self.command, url, content=body, headers=headers, timeout=300)
                    status, payload, ctype = r.status_code, r.content, r.headers.get("content-type", "application/json")
                except httpx.HTTPError as e:
                    payload = json.dumps({"error": f"upstream gone: {e}"}).encode()
                    status, ctype = 502, "application/json"
                if status == 200 and self.path.endswith("/chat/completions"):
                    with gate._lock:
                        gate.answered += 1
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.api_base = f"http://127.0.0.1:{self._server.server_port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @staticmethod
    def _continues(body: bytes) -> bool:
        try:
            messages = json.loads(body).get("messages", [])
        except ValueError:
            return False
        return any(m.get("role") == "assistant" for m in messages if isinstance(m, dict))

    def __enter__(self) -> KillGate:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


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
    role = ModelRole(model="hosted_vllm/tiny", api_base=api_base, max_tokens=MAX_TOKENS, temperature=1.0,
                     strict_tools=True, retries=1)
    limits = Limits(max_turns=TURNS, max_tokens_per_turn=MAX_TOKENS, wall_s=240)
    choice = {"type": "function", "function": {"name": TOOL}}
    insts = tasks.instances(FAMILY, "val")[: N_JOBS // 2]
    return [RolloutJob(instance=i, harness=h, model=role, seed=s, limits=limits, tool_choice=choice, tag="scaleout-vllm")
            for i in insts for s in range(2)]


@pytest.mark.vllm
@pytest.mark.slow
def test_two_servers_spread_stick_and_survive_one_stopped(vllm_server: str, second_server: tuple[str, int, Path],
                                                          ray_local: None) -> None:
    from deploy.vllm_server import find_server

    a, (b_direct, b_port, b_state) = vllm_server, second_server
    jobs = _jobs(a)
    stopped: dict[str, float] = {}
    pool_ref: list[RolloutPool] = []

    def kill_b() -> None:
        """B is killed with the conversation that asked this second turn still owing it turns."""
        pool = pool_ref[0]
        done_on_b = sum(t.server == b for t in list(pool.timings.values()))
        stopped.update(in_flight=pool.server_loads().get(b, 0), done_on_b=done_on_b, answered=gate.answered)
        os.killpg(find_server(b_port, b_state).pid, signal.SIGKILL)  # in-flight requests die too

    served_a = _requests_served(a)
    with KillGate(b_direct, kill_b) as gate:
        b = gate.api_base
        with RolloutPool(n_actors=2, concurrency_per_server=2, max_attempts=3,
                         api_bases={"hosted_vllm/tiny": [a, b]}) as pool:
            pool_ref.append(pool)
            trajs = list(pool.stream(jobs))
            stats, timings = pool.stats, dict(pool.timings)
    served_a = _requests_served(a) - served_a

    assert gate.fired.is_set(), "no conversation reached a second turn on B: the pool never spread to it"
    assert stopped["in_flight"] > 0 and stopped["answered"] >= 1, stopped
    # Nothing lost, nothing twice; every rollout a real 8-turn conversation of forced tool calls.
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
