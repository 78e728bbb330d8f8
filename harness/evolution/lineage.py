"""The lineage of a search: every candidate with its parent, edits, rationale and scores; h* from h0 again.

Built after (or during) a search from GEPA's saved state (scores, parents, which proposals were accepted)
and the proposer's ledger (the edits and rationales). `reconstruct` replays the edits along the parent chain
from h0: the lineage file alone gives h* back, which is how a reader checks it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.edits import apply_edits
from harness.evolution.adapter import decode
from harness.evolution.records import EvolutionCandidate, ProposalLog
from harness.program import Harness


def _val(state: Any, idx: int, val_labels: Sequence[str]) -> tuple[dict[str, float], float | None]:
    scores = {val_labels[k]: float(v) for k, v in state.prog_candidate_val_subscores[idx].items()}
    return scores, (sum(scores.values()) / len(scores) if scores else None)


def build_lineage(state: Any, ledger: dict[int, ProposalLog], search_seed: int, train_labels: Sequence[str],
                  val_labels: Sequence[str]) -> list[EvolutionCandidate]:
    """One record for h0, then one per proposed child in iteration order (accepted or not)."""
    ids = [decode(c).id for c in state.program_candidates]
    scores, mean = _val(state, 0, val_labels)
    out = [EvolutionCandidate(search_seed=search_seed, iteration=0, harness_id=ids[0], parent_id=None, accepted=True,
                              val_scores=scores, val_mean=mean, rollouts_at_discovery=0)]
    for entry in state.full_program_trace:
        iteration = int(entry["i"]) + 1
        prop = ledger.get(iteration)
        if prop is None or prop.child_id is None or "new_subsample_scores" not in entry:
            continue  # nothing was proposed (perfect minibatch, no valid edit) or the iteration did not finish
        parent_idx = int(entry["selected_program_candidate"])
        if ids[parent_idx] != prop.parent_id:
            raise ValueError(f"ledger iteration {iteration} has parent {prop.parent_id}, GEPA's state "
                             f"{ids[parent_idx]}: the ledger belongs to another search")
        new_idx = entry.get("new_program_idx")
        accepted = new_idx is not None
        scores, mean = _val(state, new_idx, val_labels) if accepted else ({}, None)
        out.append(EvolutionCandidate(
            search_seed=search_seed, iteration=iteration, harness_id=prop.child_id, parent_id=prop.parent_id,
            edits=prop.edits, rejected_edits=prop.rejected, accepted=accepted,
            minibatch=[train_labels[i] for i in entry.get("subsample_ids", [])],
            parent_minibatch_scores=[float(x) for x in entry.get("subsample_scores", [])],
            minibatch_scores=[float(x) for x in entry["new_subsample_scores"]],
            val_scores=scores, val_mean=mean,
            rollouts_at_discovery=int(state.num_metric_calls_by_discovery[new_idx]) if accepted else 0,
            reflector_cost_usd=prop.cost_usd))
    return out


def reconstruct(h0: Harness, lineage: Sequence[EvolutionCandidate], harness_id: str) -> Harness:
    """The harness `harness_id`, rebuilt from h0 by applying the edits along its chain of accepted parents."""
    by_id = {c.harness_id: c for c in lineage if c.accepted}
    chain: list[EvolutionCandidate] = []
    cur = by_id.get(harness_id)
    if cur is None:
        raise KeyError(f"harness {harness_id} is not an accepted candidate of this lineage")
    while cur.parent_id is not None:
        chain.append(cur)
        if len(chain) > len(by_id):
            raise ValueError(f"the lineage has a cycle through {harness_id}")
        nxt = by_id.get(cur.parent_id)
        if nxt is None:
            raise KeyError(f"candidate {cur.harness_id} names parent {cur.parent_id}, which is not in the lineage")
        cur = nxt
    if cur.harness_id != h0.id:
        raise ValueError(f"the lineage starts at {cur.harness_id}, not at the given h0 {h0.id}")
    h = h0
    for cand in reversed(chain):
        h = apply_edits(h, [pe.edit for pe in cand.edits])
        if h.id != cand.harness_id:
            raise ValueError(f"replaying the edits of {cand.harness_id} gave {h.id}")
    return h


def write_lineage(path: str | Path, lineage: Sequence[EvolutionCandidate]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(c.model_dump_json() + "\n" for c in lineage))
    tmp.replace(p)
    return p


def read_lineage(path: str | Path) -> list[EvolutionCandidate]:
    return [EvolutionCandidate.model_validate(json.loads(line))
            for line in Path(path).read_text().splitlines() if line.strip()]


def validation_curve(lineage: Sequence[EvolutionCandidate], total_evals: int) -> list[tuple[int, float]]:
    """(evaluations spent, best validation mean so far) once h0 and each accepted candidate had their validation
    scores (evaluations at discovery + the validation pass), and at the end of the search."""
    points: list[tuple[int, float]] = []
    best = float("-inf")
    for c in sorted((c for c in lineage if c.accepted and c.val_mean is not None),
                    key=lambda c: (c.rollouts_at_discovery, c.iteration)):
        best = max(best, c.val_mean or 0.0)
        points.append((c.rollouts_at_discovery + len(c.val_scores), best))
    if points:
        points.append((max(total_evals, points[-1][0]), best))
    return points
