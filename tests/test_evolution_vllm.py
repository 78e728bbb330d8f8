"""The harness search with the real tiny model on vLLM CPU: as an `llm` reflector, and killed mid-search.

- The tiny model as reflector writes noise: every invalid answer is sent back with its error, then rejected
  and counted; no child is evaluated for a failed proposal, and the search still finishes. The server's own
  request counter equals the student's turns plus the reflector's answers (nothing runs that is not counted).
- `coevo evolve` is SIGKILLed in a subprocess in the middle of a search and resumed with `--resume`: the
  resumed search sends the server exactly the requests of the rollouts that were not finished at the kill
  (zero repeated rollouts), and ends with the same lineage, h* and evaluations as an uninterrupted search.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.pool.driver import RolloutPool
from agents.records import ModelRole
from agents.rollout import Limits
from flows.evolution import EvolveSettings, run_evolution
from flows.store import RunStore
from harness.evolution import SearchConfig, read_lineage
from harness.evolution.cache import read_results
from harness.evolution.proposer import read_ledger
from tests.prefect_helpers import invoke, prefect_server, vllm_requests

pytestmark = pytest.mark.vllm
FAMILY = "payroll_audit"
REPO = Path(__file__).resolve().parent.parent


def settled_requests(api_base: str, quiet_s: float = 3.0) -> float:
    """The counter once it has not moved for `quiet_s` (requests of a killed client may still finish)."""
    last, since = vllm_requests(api_base), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.5)
        now = vllm_requests(api_base)
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_tiny_llm_reflector_invalid_proposals_are_rejected_and_counted(tmp_path: Path, vllm_server: str,
                                                                       ray_local: None) -> None:
    store = RunStore(tmp_path / "runs", "llm")
    settings = EvolveSettings(
        family=FAMILY, student=ModelRole(model="hosted_vllm/tiny", api_base=vllm_server, max_tokens=16),
        reflector="llm:hosted_vllm/tiny",
        reflector_role=ModelRole(model="hosted_vllm/tiny", api_base=vllm_server, max_tokens=96),
        reflector_prompt_chars=12_000, tool_choice="required", train_instances=2, val_instances=2,
        search=SearchConfig(family=FAMILY, seeds=1, minibatch_size=1, budget_rollouts=5, max_retries=1),
        limits=Limits(max_turns=2, wall_s=120, max_tokens_per_turn=16))
    before = vllm_requests(vllm_server)
    with RolloutPool(2) as pool:
        summary = run_evolution(settings, store, Path("/"), pool)
    out = Path(summary.out_dir)
    seed = summary.search.seeds[0]
    c = seed.counts
    assert c["proposals"] >= 2 and c["proposals"] == c.get("children", 0) + c.get("failed_proposals", 0)
    assert c["edits_rejected"] >= 1
    ledger = read_ledger(out / "seed0" / "proposals.jsonl")
    assert len(ledger) == c["proposals"]
    for entry in ledger.values():
        assert 1 <= entry.attempts <= 2  # the first answer, and at most one retry with the error
        if entry.child_id is None:
            assert entry.status == "no_valid_edit" and entry.rejected and all(r.error for r in entry.rejected)
    lineage = read_lineage(out / "lineage.jsonl")
    assert len([x for x in lineage if x.parent_id is not None]) == c.get("children", 0)
    assert (out / "h_star.yaml").exists() and summary.search.reflector == "llm:hosted_vllm/tiny"
    # every request the server served is a counted student turn or a counted reflector answer
    turns = sum(r.n_turns for r in read_results(out / "cache.jsonl"))
    assert vllm_requests(vllm_server) - before == turns + sum(e.attempts for e in ledger.values())


@pytest.fixture(scope="module")
def prefect_api() -> Iterator[str]:
    with prefect_server() as api:
        yield api


def _args(api_base: str, out: Path) -> list[str]:
    return ["evolve", "--family", FAMILY, "--student", "hosted_vllm/tiny", "--api-base", api_base,
            "--reflector", "library", "--seeds", "1", "--budget-rollouts", "9", "--out", str(out),
            "--minibatch", "1", "--train-n", "3", "--val-n", "2", "--max-turns", "2", "--max-tokens", "16",
            "--tool-choice", "required", "--actors", "1"]


def _cache(out: Path) -> Path:
    return out / "evolution" / FAMILY / "cache.jsonl"


def test_killed_search_resumes_with_zero_repeated_rollouts(tmp_path: Path, vllm_server: str, ray_local: None,
                                                           prefect_api: str) -> None:
    import ray

    # an uninterrupted search: the reference
    ref = invoke(_args(vllm_server, tmp_path / "ref"))
    assert ref.exit_code == 0, ref.output
    assert "h_star.yaml" in ref.output and "rollouts run" in ref.output
    ref_results = read_results(_cache(tmp_path / "ref"))
    assert len(ref_results) >= 5
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="evolution-ref-")))
    assert {"evolution-ref-payroll-audit-edits", "evolution-ref-payroll-audit-curve"} <= {a.key for a in found}

    # the same search in another process, SIGKILLed once a few rollouts are cached
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_API_URL": prefect_api}
    cmd = [sys.executable, "-m", "flows.cli", *_args(vllm_server, out), "--ray-address",
           ray.get_runtime_context().gcs_address]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while not (_cache(out).exists() and len(_cache(out).read_text().splitlines()) >= 3):
        assert proc.poll() is None, f"the search exited ({proc.returncode}) before it could be killed"
        assert time.monotonic() < deadline, "no rollout was cached in 300 s"
        time.sleep(0.2)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cached_at_kill = {r.key for r in read_results(_cache(out))}
    assert 3 <= len(cached_at_kill) < len(ref_results)
    before = settled_requests(vllm_server)

    resumed = invoke([*_args(vllm_server, out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    after = vllm_requests(vllm_server)
    results = read_results(_cache(out))
    new = [r for r in results if r.key not in cached_at_kill]
    assert after - before == sum(r.n_turns for r in new)  # only unfinished rollouts ran again
    # and the resumed search is the uninterrupted one
    assert {r.key for r in results} == {r.key for r in ref_results}
    evo_ref, evo = tmp_path / "ref" / "evolution" / FAMILY, out / "evolution" / FAMILY
    assert read_lineage(evo / "lineage.jsonl") == read_lineage(evo_ref / "lineage.jsonl")
    assert (evo / "h_star.yaml").read_text() == (evo_ref / "h_star.yaml").read_text()

    # a second --resume of a finished search runs nothing
    again = invoke([*_args(vllm_server, out), "--resume"])
    assert again.exit_code == 0 and vllm_requests(vllm_server) == after
    assert "rollouts run 0" in " ".join(again.output.split())
    # starting over a stored search without --resume is refused, naming the way out
    refused = invoke(_args(vllm_server, out))
    assert refused.exit_code == 2 and "already holds a search" in refused.output
