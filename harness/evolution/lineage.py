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


def _trace_tasks(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The (parent, minibatch) tasks of one GEPA iteration (older traces only have the first one's keys)."""
    if entry.get("tasks"):
        return list(entry["tasks"])
    keys = ("selected_program_candidate", "subsample_ids", "subsample_scores", "new_subsample_scores")
    return [{"parent_idx" if k == "selected_program_candidate" else k: entry[k] for k in keys if k in entry}]


def build_lineage(state: Any, ledger: dict[tuple[int, int], ProposalLog], search_seed: int,
                  train_labels: Sequence[str], val_labels: Sequence[str]) -> list[EvolutionCandidate]:
    """One record for h0, then one per proposed child whose minibatch run finished (accepted or not).

    GEPA's trace gives each iteration's tasks (parent, minibatch, scores before/after) and the candidates it
    added; the ledger gives each proposal's parent, minibatch, child and edits. They are matched on (parent,
    minibatch); a child is accepted when GEPA added a candidate with its harness id in that iteration.
    """
    ids = [decode(c).id for c in state.program_candidates]
    scores, mean = _val(state, 0, val_labels)
    out = [EvolutionCandidate(search_seed=search_seed, iteration=0, harness_id=ids[0], parent_id=None, accepted=True,
                              val_scores=scores, val_mean=mean, rollouts_at_discovery=0)]
    for entry in state.full_program_trace:
        iteration = int(entry["i"]) + 1
        added = {ids[j]: j for j in entry.get("new_program_indices", [])}
        tasks = [t for t in _trace_tasks(entry) if "new_subsample_scores" in t]
        for (it, _), prop in sorted(ledger.items()):
            if it != iteration or prop.child_id is None:
                continue
            match = next((t for t in tasks if ids[int(t["parent_idx"])] == prop.parent_id
                          and [train_labels[i] for i in t.get("subsample_ids", [])] == prop.minibatch), None)
            if match is None:
                continue  # the iteration did not finish (a kill) or the proposal was not evaluated
            tasks.remove(match)
            new_idx = added.get(prop.child_id)
            scores, mean = _val(state, new_idx, val_labels) if new_idx is not None else ({}, None)
            out.append(EvolutionCandidate(
                search_seed=search_seed, iteration=iteration, harness_id=prop.child_id, parent_id=prop.parent_id,
                edits=prop.edits, rejected_edits=prop.rejected, accepted=new_idx is not None, minibatch=prop.minibatch,
                parent_minibatch_scores=[float(x) for x in match.get("subsample_scores", [])],
                minibatch_scores=[float(x) for x in match["new_subsample_scores"]], val_scores=scores, val_mean=mean,
                rollouts_at_discovery=int(state.num_metric_calls_by_discovery[new_idx]) if new_idx is not None else 0,
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
