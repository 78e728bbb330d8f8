"""An all-or-nothing promotion (flows/round/gate.py): a round SIGKILLed at every kill point of its gate resumes to a
candidate wholly promoted (weights with the recorded sha256, every row, loadable) or wholly not, never between.

One tiny round (the round test's config on the session's vLLM server, the correction arm alone; the
`non_inferior` rule, `allow_fit_risk` and `correction.keep: any`, so the random tiny student's adapter is promoted) runs as `coevo run` in a child process with
`COEVO_TEST_KILL=gate_rollouts`: it is killed during the gate's validation rollouts. Each `--resume` is killed
at the next point (`gate_merge`: merged weights written to staging; `gate_weights`: weights published, no row;
`gate_registry`: inside the registry transaction), and the last resume runs to the end. After every kill the
state on disk holds no promotion row without complete weights of the recorded digest and no partial weights
directory; each resume passes through the promotion again from where the kill left it, and the last one ends
wholly promoted. The registry's single transaction and its token are checked alone first (no model).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from test_flows_round import round_config

from flows.faults import KILL_POINTS
from flows.ops.registry import SHA_FILE, GateDecision, Promotion, PromotionRegistry, directory_sha256
from flows.store import list_runs

REPO = Path(__file__).resolve().parents[1]


def test_the_gate_commits_every_row_and_the_decision_at_once_and_once(tmp_path: Path) -> None:
    reg = PromotionRegistry.under(tmp_path)
    rows = [Promotion(family=f, student="hosted_vllm/student-r1", student_path="/m", student_sha256="ab" * 32,
                      harness_id="h", harness_path="baseline", run_id="r", round=1) for f in ("a", "b")]
    decision = GateDecision(run_id="r", round=0, candidate="student@r1-corr-s0", promoted=True, reason="PROMOTED")

    def boom() -> None:
        raise RuntimeError("killed inside the transaction")

    with pytest.raises(RuntimeError):
        reg.commit_gate(rows, decision, "t1", before_commit=boom)
    assert reg.history() == [] and reg.decisions() == []  # nothing of it stayed
    assert reg.commit_gate(rows, decision, "t1") is True
    assert reg.commit_gate(rows, decision, "t1") is False  # a resumed gate that had committed writes nothing twice
    assert [p.family for p in reg.history()] == ["a", "b"] and len(reg.decisions()) == 1
    assert reg.current("a")[0].student_sha256 == "ab" * 32


def _cleanup(tag: str) -> None:
    """SIGKILL what a killed `coevo run` left behind (its Ray, its Prefect server): processes carrying its tag."""
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("COEVO_KILL_TEST") == tag:
                proc.send_signal(signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue


def _state(runs: Path, run_id: str, t: int, final: Path) -> str:
    """'promoted' | 'not' | 'none' (nothing committed); asserts it is never in between."""
    reg = PromotionRegistry.under(runs)
    rows = [p for p in reg.history() if p.run_id == run_id]
    decisions = reg.decisions(run_id)
    staging = final.with_name(f".{final.name}.staging")
    if final.exists():  # published means complete: the digest file matches the files
        assert (final / SHA_FILE).read_text().strip() == directory_sha256(final), "a partial weights directory"
    if not decisions:
        assert rows == [], "promotion rows without the decision"
        return "none"
    (d,) = decisions
    if not d.promoted:
        assert rows == []
        return "not"
    assert len(rows) == 1 and rows[0].round == t + 1  # one family in this config
    assert final.exists() and rows[0].student_path == str(final.resolve())
    assert rows[0].student_sha256 == directory_sha256(final) == d.evidence["merged_sha256"]
    assert not staging.exists()
    return "promoted"


@pytest.mark.vllm
@pytest.mark.slow
def test_a_gate_killed_at_every_point_resumes_wholly_promoted(tmp_path: Path, vllm_server: str,
                                                             tiny_model_dir: Path) -> None:
    raw = round_config(tmp_path, vllm_server, tiny_model_dir)
    raw["round"]["index"] = 100_000 + os.getpid() % 100_000  # adapter names no other test loaded
    raw["round"]["gate"].update(rule="non_inferior", allow_fit_risk=True)
    raw["round"].update(arms=["corr"])  # the gate judges the correction arm only
    raw["round"]["correction"].update(keep="any", n=1)  # the random tiny student improves nothing: keep its rows
    raw["evaluation"]["n_instances"] = 1
    raw["round"]["search"].update(budget_rollouts=3, minibatch_size=1, train_instances=1, val_instances=1)
    raw["round"]["data"].update(instances=1)
    # 2 validation instances after the search's 1 (val 21-22, which the search never saw): the gate runs several chunks
    # (M_t's two, the candidate's two) and `gate_rollouts` kills between them
    raw["round"]["gate"].update(val_instances=2)
    t = raw["round"]["index"]
    (tmp_path / "round.yaml").write_text(yaml.safe_dump(raw))
    short = Path(tempfile.mkdtemp(prefix="gk", dir="/tmp"))  # Ray's socket paths must stay short
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "RAY_ADDRESS"))}
    env.update(PREFECT_HOME=str(short / "prefect"), RAY_TMPDIR=str(short / "ray"), PYTHONPATH=str(REPO),
               COEVO_KILL_TEST=tag)
    runs = tmp_path / "runs"
    first = ["run", "--config", str(tmp_path / "round.yaml"), "--rounds", "1"]
    seen: list[str] = []
    try:
        for n, point in enumerate([*KILL_POINTS, None]):
            args = first if n == 0 else ["run", "--resume", run_id, "--runs-dir", str(runs)]
            child = {**env, **({"COEVO_TEST_KILL": point} if point else {})}
            log = tmp_path / f"run{n}.log"  # a file, not a pipe: what a killed run leaves behind would hold a pipe
            with log.open("w") as out:
                proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *args], cwd=tmp_path, env=child,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                code = proc.wait(timeout=900)
            _cleanup(tag)
            if n == 0:
                (run_id,) = list_runs(runs)
            final = runs / run_id / "rounds" / f"r{t}" / "merged" / f"student-r{t + 1}"
            if point is None:
                assert code == 0, log.read_text()[-3000:]
            else:
                assert code == -signal.SIGKILL, (point, code, log.read_text()[-3000:])
                assert (runs / run_id / "rounds" / f"r{t}" / "logs" / f"kill-{point}.fired").exists()
            seen.append(f"{point or 'end'}: {_state(runs, run_id, t, final)}")
    finally:
        _cleanup(tag)
    print("gate kill points -> state after the kill:", "; ".join(seen))
    assert seen[:-1] == [f"{p}: none" for p in KILL_POINTS] and seen[-1] == "end: promoted"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(final)  # the served name's weights load
    AutoTokenizer.from_pretrained(final)
