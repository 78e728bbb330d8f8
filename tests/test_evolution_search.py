"""The harness search end to end on the Ray rollout pool, with a student whose failures a harness can cause.

The oracle policy (`oracle/<family>`) ignores what a harness says, but not what a harness does: a start
harness with a hook that blocks its writes makes it fail every instance. The library reflector must find
that in the evidence (the blocked calls and the hook that fired) and remove the cause; GEPA must accept the fix on the minibatch and on validation. This checks the machinery against a
known answer (which edits remove the fault); the flawed student will check it against injected faults.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from log_capture import logged_lines

from agents.pool.driver import RolloutPool
from agents.records import ModelRole
from agents.rollout import Limits
from agents.tables.trajectories import read_frame
from flows import evolution
from flows.evolution import EvolveSettings, TransferSettings, run_evolution
from flows.progress import Progress
from flows.store import RunStore
from harness import Harness, apply_edits, baseline
from harness.evolution import SearchConfig, read_lineage, reconstruct
from harness.evolution.cache import read_results
from harness.evolution.proposer import read_ledger

FAMILY = "payroll_audit"


def _broken_start(path: Path) -> Path:
    h = apply_edits(baseline(FAMILY), [
        {"op": "add_hook", "hook": {"id": "no-writes", "when": {"on": "before_tool_call", "tool": "write_file"},
                                    "then": {"do": "block", "message": "writing is disabled"}}},
    ])
    return h.dump(path)


def _settings(start: Path, **kw: object) -> EvolveSettings:
    base = dict(family=FAMILY, student=ModelRole(model="oracle/{family}"), harness=str(start),
                search=SearchConfig(family=FAMILY, seeds=2, minibatch_size=2, budget_rollouts=16,
                                    proposals_per_iteration=2),
                train_instances=4, val_instances=3, limits=Limits(max_turns=8, wall_s=120))
    return EvolveSettings.model_validate({**base, **kw})


@dataclass
class _Searched:
    """One search from the broken start (two search seeds, with upward transfer), run once for the module."""

    settings: EvolveSettings
    store: RunStore
    summary: Any
    out: Path
    h0: Harness
    h_star: Harness
    log: list[str]


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> Iterator[_Searched]:
    tmp = tmp_path_factory.mktemp("search")
    store = RunStore(tmp / "runs", "evo")
    start = _broken_start(tmp / "broken.yaml")
    transfer = TransferSettings(expert=ModelRole(model="oracle/{family}"), test_instances=2, seeds=1)
    settings = _settings(start, transfer=transfer)
    with logged_lines("flows.evolution") as lines, pytest.MonkeyPatch.context() as mp, RolloutPool(2) as pool:
        mp.setattr(evolution, "Progress", functools.partial(Progress, every_s=0.0))  # a line per budget update
        summary = run_evolution(settings, store, Path("/"), pool)
    out = Path(summary.out_dir)
    yield _Searched(settings, store, summary, out, Harness.load(out / "h0.yaml"), Harness.load(out / "h_star.yaml"),
                    lines)


def test_search_removes_the_harness_fault(searched: _Searched) -> None:
    s = searched.summary.search
    assert searched.h0.id == Harness.load(searched.settings.harness).id and s.h0_val_mean == 0.0
    assert s.best_val_mean == 1.0 and searched.h_star.id == s.best_id != searched.h0.id
    assert searched.h_star.hook("no-writes") is None
    assert "removed hook:no-writes" in (searched.out / "diff_h0_h_star.txt").read_text()
    assert any(r["in_h_star"] and r["op"] == "remove_hook" for r in searched.summary.accepted_edits)


def test_the_lineage_alone_rebuilds_h_star_and_follows_gepas_decisions(searched: _Searched) -> None:
    lineage = read_lineage(searched.out / "lineage.jsonl")
    assert reconstruct(searched.h0, lineage, searched.h_star.id).id == searched.h_star.id
    ids = {c.harness_id for c in lineage}
    for c in lineage:
        assert c.parent_id is None or c.parent_id in ids
        if c.parent_id is None:
            continue
        assert c.edits and all(pe.rationale for pe in c.edits)
        if c.accepted:
            assert sum(c.minibatch_scores) > sum(c.parent_minibatch_scores) and len(c.val_scores) == 3
        else:
            assert sum(c.minibatch_scores) <= sum(c.parent_minibatch_scores) and c.val_mean is None


def test_every_proposal_is_in_the_ledger_and_counted(searched: _Searched) -> None:
    lineage = read_lineage(searched.out / "lineage.jsonl")
    for seed in searched.summary.search.seeds:
        ledger = read_ledger(searched.out / f"seed{seed.search_seed}" / "proposals.jsonl")
        assert {task for _, task in ledger} == {0, 1}  # two proposals per iteration
        children = [c for c in lineage if c.search_seed == seed.search_seed and c.parent_id is not None]
        assert len(children) == seed.counts["children"] == sum(e.child_id is not None for e in ledger.values())
        assert seed.counts["proposals"] == len(ledger) and seed.curve[-1][1] == seed.best_val_mean


def test_progress_counts_the_evaluations_of_both_search_seeds(searched: _Searched) -> None:
    lines = [line for line in searched.log if "search evaluations" in line]
    assert lines and lines[-1].startswith(f"{FAMILY} search evaluations: 32/32 (100%)") and lines[-1].endswith("done")
    counts = [int(line.split(": ")[1].split("/")[0]) for line in lines]
    assert len(counts) > 4 and counts == sorted(counts) and counts[0] < 16 < counts[-2]  # 16 per seed


def test_every_evaluation_ran_once_is_cached_and_stored(searched: _Searched) -> None:
    s = searched.summary.search
    cached = read_results(searched.out / "cache.jsonl")
    frame = read_frame(searched.store.root / "trajectories" / "evolve" / FAMILY)
    assert s.evaluations_run == len(cached) == frame.height == frame["id"].n_unique()
    assert {r.trajectory_id for r in cached} == set(frame["id"])
    assert s.evaluations_cached > 0  # h0's validation pass is shared by the two search seeds
    assert (searched.out / "validation_curve.png").stat().st_size > 5000


def test_upward_transfer_pairs_the_expert_on_h0_and_h_star(searched: _Searched) -> None:
    t = searched.summary.transfer
    assert t is not None and t.h0_success == 0.0 and t.h_star_success == 1.0
    assert t.diff.diff == 1.0 and t.diff.ci_low > 0 and t.diff.n_units == 2


def test_a_rerun_resumes_from_the_cache_and_other_settings_are_refused(searched: _Searched) -> None:
    lineage = read_lineage(searched.out / "lineage.jsonl")
    with RolloutPool(2) as pool:
        again = run_evolution(searched.settings, searched.store, Path("/"), pool, resume=True)
        assert again.search.evaluations_run == 0 and again.search.best_id == searched.summary.search.best_id
        assert read_lineage(searched.out / "lineage.jsonl") == lineage
        with pytest.raises(FileExistsError, match="already holds a search"):
            run_evolution(searched.settings, searched.store, Path("/"), pool)
        other = _settings(Path(searched.settings.harness), val_instances=2)
        with pytest.raises(ValueError, match="other settings"):
            run_evolution(other, searched.store, Path("/"), pool, resume=True)


def test_informative_minibatches_drive_a_search_that_resumes_from_the_cache(tmp_path: Path, ray_local: None) -> None:
    store = RunStore(tmp_path / "runs", "evo-informative")
    search = SearchConfig(family=FAMILY, seeds=1, minibatch_size=2, budget_rollouts=14, minibatch_sampler="informative")
    settings = _settings(_broken_start(tmp_path / "broken.yaml"), search=search, train_seeds=2)
    with RolloutPool(2) as pool:
        summary = run_evolution(settings, store, Path("/"), pool)
        assert summary.search.best_val_mean == 1.0  # the blocking hook is gone from h*
        lineage = read_lineage(Path(summary.out_dir) / "lineage.jsonl")
        minibatches = [c.minibatch for c in lineage if c.parent_id is not None]
        assert minibatches and all(len(set(mb)) == 2 for mb in minibatches)
        assert {item.split("#")[1] for mb in minibatches for item in mb} <= {"s0", "s1"}  # train seeds 0 and 1
        again = run_evolution(settings, store, Path("/"), pool, resume=True)
        assert again.search.evaluations_run == 0 and again.search.best_id == summary.search.best_id


def test_budget_too_small_for_one_proposal_is_a_named_error(tmp_path: Path, ray_local: None) -> None:
    store = RunStore(tmp_path / "runs", "evo")
    settings = _settings(_broken_start(tmp_path / "broken.yaml"),
                         search=SearchConfig(family=FAMILY, seeds=1, minibatch_size=2, budget_rollouts=5))
    with RolloutPool(1) as pool, pytest.raises(ValueError, match="budget_rollouts 5 cannot pay"):
        run_evolution(settings, store, Path("/"), pool)
