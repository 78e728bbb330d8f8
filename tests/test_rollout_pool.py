"""RolloutPool on real Ray actors and the real tiny vLLM server; `coevo rollout` on the oracle.

Prompts are kept short on purpose (role section only, no tools exposed, 1-2 turns of 8 tokens): the shared
CPU server prefills at most 2048 tokens per step, and the runs must stay seconds long on 2 cores.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import polars as pl
import pytest
import ray
from typer.testing import CliRunner

import harness
import tasks
from agents.jobs import RolloutJob
from agents.pool.driver import RolloutPool
from agents.records import ModelRole
from agents.jobs import Limits
from harness import ToolPolicy

T = TypeVar("T")
TWO_FAMILIES = ("stock_alert", "code_refactor")  # the two with the shortest instructions among light families


def _families() -> list[str]:
    have = tasks.families()
    chosen = [f for f in TWO_FAMILIES if f in have]
    if len(chosen) < 2:
        chosen = (chosen + [f for f in have if f not in chosen])[:2]
    if len(chosen) < 2:
        pytest.skip(f"needs two task families, have {have}")
    return chosen


def _short_harness(family: str) -> harness.Harness:
    """h0 with every environment tool hidden: a few hundred prompt tokens, a one-turn text answer."""
    h = harness.baseline(family)
    env = tasks.make_env(tasks.instances(family, "val")[0])
    try:
        names = [t.name for t in env.tools()]
    finally:
        env.close()
    return h.model_copy(update={"tools": ToolPolicy(hidden=sorted(names))})


def _tiny_jobs(api_base: str, n_per_family: int = 6, tag: str = "pool-test") -> list[RolloutJob]:
    role = ModelRole(model="hosted_vllm/tiny", api_base=api_base, max_tokens=8, retries=1)
    limits = Limits(max_turns=2, max_tokens_per_turn=8, wall_s=120)
    jobs = []
    for fam in _families():
        h = _short_harness(fam)
        insts = tasks.instances(fam, "val")[: n_per_family // 2]
        jobs += [RolloutJob(instance=i, harness=h, model=role, seed=s, limits=limits, tag=tag) for i in insts for s in range(2)]
    return jobs


def _assert_complete(jobs: list[RolloutJob], trajs: list) -> None:
    assert len(trajs) == len(jobs) == 12
    assert len({t.id for t in trajs}) == 12
    assert {t.id for t in trajs} == {j.key for j in jobs}
    assert {t.family for t in trajs} == set(_families())
    for t in trajs:
        assert t.stop_reason != "error", t.error
        assert t.turns, f"{t.instance.id}: no model turn ran ({t.stop_reason}: {t.error})"
        assert t.turns[0].completion_tokens > 0
        # 8-token text replies: a reply cut by the limit ends the episode as truncated, never as an answer
        assert (t.stop_reason == "truncated") == (t.turns[-1].finish_reason == "length"), (t.stop_reason, t.turns[-1])
        assert t.model_id == jobs[0].model.id


@pytest.mark.vllm
def test_pool_runs_12_rollouts_across_two_families(vllm_server: str, ray_local: None) -> None:
    jobs = _tiny_jobs(vllm_server)
    with RolloutPool(n_actors=2, concurrency_per_server=4) as pool:
        streamed = list(pool.stream(jobs))
        _assert_complete(jobs, streamed)
        # both actors took work (least-loaded dispatch), and run() returns the same records in job order
        assert pool.stats.finished == 12 and pool.stats.actor_deaths == 0
        assert {j.key for j in jobs} == set(pool.timings)
        for t in pool.timings.values():  # where the time went adds up: driver > actor > episode > model + env
            assert t.roundtrip_s >= t.actor_s >= t.episode_s >= t.model_s > 0 and t.env_s > 0
            assert t.overhead_s == pytest.approx(t.in_actor_overhead_s + t.transport_s, abs=1e-6)
        ordered = pool.run(jobs)
    assert [t.id for t in ordered] == [j.key for j in jobs]


@pytest.mark.vllm
def test_pool_survives_an_actor_killed_mid_run(vllm_server: str, ray_local: None) -> None:
    jobs = _tiny_jobs(vllm_server, tag="pool-kill-test")
    killed: list[int] = []

    with RolloutPool(n_actors=2, concurrency_per_server=4, max_attempts=3) as pool:
        def kill_first_busy_actor() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not killed:
                busy = [a for a in pool.actor_loads() if a.in_flight > 0]
                if busy:
                    ray.kill(busy[0].handle)
                    killed.append(busy[0].in_flight)
                time.sleep(0.005)

        killer = threading.Thread(target=kill_first_busy_actor)
        killer.start()
        trajs = list(pool.stream(jobs))
        killer.join()
        stats = pool.stats

    assert killed and killed[0] > 0, "the test never found an actor with work to kill"
    _assert_complete(jobs, trajs)
    assert stats.actor_deaths == 1
    assert stats.retries >= killed[0]  # every job in flight on the dead actor ran again elsewhere
    assert stats.gave_up == 0 and stats.finished == 12


@pytest.mark.vllm
def test_job_whose_actor_keeps_dying_ends_as_error(vllm_server: str, ray_local: None) -> None:
    job = _tiny_jobs(vllm_server, tag="pool-doomed")[0]
    stop = threading.Event()

    with RolloutPool(n_actors=1, max_attempts=2) as pool:
        def kill_every_busy_actor() -> None:
            while not stop.is_set():
                for a in pool.actor_loads():
                    if a.in_flight:
                        ray.kill(a.handle)
                time.sleep(0.005)

        killer = threading.Thread(target=kill_every_busy_actor)
        killer.start()
        try:
            [traj] = pool.run([job])
        finally:
            stop.set()
            killer.join()
        stats = pool.stats

    assert traj.id == job.key
    assert traj.stop_reason == "error" and traj.score == 0.0
    assert "gave up after 2 attempts" in traj.error and "actor died" in traj.error
    assert stats.actor_deaths == 2 and stats.retries == 1 and stats.gave_up == 1


def test_routing_sticks_each_episode_to_one_least_loaded_server(ray_local: None) -> None:
    """Two 'replicas' of the oracle model: jobs spread over both, each conversation on one server."""
    fam = _families()[0]
    h = harness.baseline(fam)
    role = ModelRole(model=f"oracle/{fam}")
    jobs = [RolloutJob(instance=i, harness=h, model=role, seed=0, limits=Limits(max_turns=40))
            for i in tasks.instances(fam, "val")[:4]]
    bases = ["http://replica-a/v1", "http://replica-b/v1"]  # the oracle provider ignores api_base
    with RolloutPool(n_actors=2, concurrency_per_server=1, api_bases={role.model: bases}) as pool:
        trajs = pool.run(jobs)
        servers = [pool.timings[j.key].server for j in jobs]
    assert set(servers) == set(bases)  # capacity 1 per replica: the second job must go to the other one
    assert all(t.passed for t in trajs), [(t.instance.id, t.verdict.feedback) for t in trajs]
    assert all(t.model_id == role.id for t in trajs)  # the record names the job's model, not the replica


@contextlib.contextmanager
def _sampled(read: Callable[[], T]) -> Iterator[list[T]]:
    """`read()` every 10 ms on a thread while the block runs; the samples."""
    samples: list[T] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            samples.append(read())
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield samples
    finally:
        stop.set()
        watcher.join()


def test_two_threads_stream_on_one_pool_and_share_its_limits(ray_local: None) -> None:
    """The search seeds of a harness search stream on one pool at once: a stream whose server is full (taken by
    the other stream) waits for room instead of failing, the per-server limit holds over both, and each stream
    gets exactly its own trajectories."""
    fam = _families()[0]
    h = harness.baseline(fam)
    role = ModelRole(model=f"oracle/{fam}")
    insts = tasks.instances(fam, "val")[:4]
    mine = [[RolloutJob(instance=i, harness=h, model=role, seed=s, limits=Limits(max_turns=40)) for i in insts[:2]]
            for s in (0, 1)]
    with RolloutPool(n_actors=1, concurrency_per_server=1) as pool:  # the oracle runs in the actor: capacity 1
        with _sampled(lambda: sum(pool.server_loads().values())) as loads, ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda jobs: [t.id for t in pool.stream(jobs)], mine))
        assert pool.stats.finished == 4 and pool.server_loads() == {}
    assert [sorted(ids) for ids in got] == [sorted(j.key for j in jobs) for jobs in mine]
    assert max(loads) == 1


def test_family_limit_bounds_a_familys_episodes_in_flight(ray_local: None) -> None:
    """`family_limits` caps a family's episodes over the whole pool, whatever room the servers and actors
    have; other families are not held back."""
    fam, other = _families()
    role_of = {f: ModelRole(model=f"oracle/{f}") for f in (fam, other)}
    jobs = [RolloutJob(instance=i, harness=harness.baseline(f), model=role_of[f], seed=0, limits=Limits(max_turns=40))
            for f in (fam, other) for i in tasks.instances(f, "val")[:3]]
    with RolloutPool(n_actors=2, concurrency_per_server=8, family_limits={fam: 1}) as pool:
        with _sampled(pool.family_loads) as loads:
            trajs = pool.run(jobs)
    assert all(t.passed for t in trajs)
    assert max(x.get(fam, 0) for x in loads) == 1 and max(x.get(other, 0) for x in loads) > 1
    with pytest.raises(ValueError, match="family_limits"):
        RolloutPool(family_limits={fam: 0})


def test_duplicate_jobs_run_once_and_jobs_round_trip(ray_local: None) -> None:
    fam = _families()[0]
    inst = tasks.instances(fam, "val")[0]
    job = RolloutJob(instance=inst, harness=harness.baseline(fam), model=ModelRole(model=f"oracle/{fam}"), seed=3,
                     limits=Limits(max_turns=40))
    again = RolloutJob.model_validate_json(job.model_dump_json())
    assert again == job and again.key == job.key
    with RolloutPool(n_actors=1) as pool:
        a, b = pool.run([job, again])
        assert pool.stats.finished == 1
    assert a is b and a.id == job.key and a.passed
    with pytest.raises(ValueError, match="max_attempts"):
        RolloutPool(max_attempts=0)


def test_cli_rollout_on_oracle_writes_parquet_and_reports_100(ray_local: None, tmp_path) -> None:
    from flows.cli import app

    fams = _families()
    args = ["rollout", "--model", "oracle/{family}", "--harness", "baseline", "--split", "val", "--n", "2",
            "--seeds", "1", "--actors", "2", "--out", str(tmp_path)]
    for f in fams:
        args += ["--family", f]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    df = pl.read_parquet(tmp_path / "trajectories.parquet")
    assert df.height == 2 * len(fams)
    assert set(df["family"]) == set(fams)
    assert df["passed"].all(), df.select("instance_id", "stop_reason", "score", "error").to_dicts()
    for f in fams:
        assert f in result.output
    assert "100.0%" in result.output


@pytest.mark.vllm
def test_cli_rollout_forces_one_tool_with_strict_schemas(vllm_server: str, ray_local: None, tmp_path) -> None:
    """`--tool-choice <tool> --strict-tools`: every turn of the tiny model is a valid call of that tool (sampled:
    greedy decoding loops on whitespace inside the arguments until max_tokens)."""
    from agents.tables.trajectories import read_trajectories
    from flows.cli import app

    if "stock_alert" not in tasks.families():
        pytest.skip("needs the stock_alert family")
    args = ["rollout", "--model", "hosted_vllm/tiny", "--api-base", vllm_server, "--family", "stock_alert",
            "--split", "val", "--n", "2", "--max-turns", "2", "--max-tokens", "64", "--temperature", "1", "--tool-choice", "list_sheets",
            "--strict-tools", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    trajs = read_trajectories(tmp_path / "trajectories.parquet")
    assert len(trajs) == 2 and all(t.stop_reason == "max_turns" for t in trajs), [(t.stop_reason, t.messages[-1]) for t in trajs]
    calls = [(c.name, c.arguments) for t in trajs for turn in t.turns for c in turn.tool_calls]
    assert calls == [("list_sheets", {})] * 4


def test_actor_resets_rays_worker_niceness_on_every_thread() -> None:
    """Ray starts workers at nice 15; a rollout actor puts each thread of its process back to 0 (when it may)."""
    import os
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("lowering niceness needs root (CAP_SYS_NICE)")
    code = (
        "import os, threading\n"
        "from agents.pool.actor import _undo_worker_niceness\n"
        "done = threading.Event(); threading.Thread(target=done.wait).start()\n"
        "tids = [int(t) for t in os.listdir('/proc/self/task')]\n"
        "for t in tids: os.setpriority(os.PRIO_PROCESS, t, 15)\n"
        "before = {os.getpriority(os.PRIO_PROCESS, t) for t in tids}\n"
        "_undo_worker_niceness()\n"
        "print(len(tids), sorted(before), sorted({os.getpriority(os.PRIO_PROCESS, t) for t in tids}))\n"
        "done.set()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    n_threads, before, after = out.stdout.split(" ", 2)
    assert int(n_threads) >= 2 and before == "[15]" and after.strip() == "[0]"
