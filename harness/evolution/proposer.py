"""The custom GEPA proposer: a reflector's typed edits -> a validated child harness (or no proposal).

GEPA calls `EditProposer(candidate, reflective_dataset, components)` once per iteration. The reflector sees
the parent harness and the minibatch evidence; its edits apply one by one, and each that does not validate
(or changes nothing) is rejected with its error and counted, never evaluated; so is each edit the edit guard
refuses (guard.py: it copies a train/val instance's data, names a foreign tool, sends the student outside its
task or carries transcript), with the reason in the ledger. No valid edit = no child:
GEPA then spends nothing on evaluating it. Every call is logged to a JSON-lines ledger (the lineage's edits
and rationales come from there) and its reflector cost is added to `total_cost`, which GEPA's
reflection-cost stopper reads. The proposer also listens to GEPA's callbacks for the iteration number (its
random draws are seeded by search seed and iteration, so a resumed search proposes the same edits).
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.evolution.adapter import dataset_from_gepa, decode, encode
from harness.evolution.guard import EditGuard
from harness.evolution.protocols import Reflector
from harness.evolution.records import (ProposalBudget, ProposalLog, ProposedEdit, ReflectiveDataset, RejectedEdit,
                                       apply_proposed, edit_json)
from harness.program import Harness

log = logging.getLogger(__name__)


class EditProposer:
    """GEPA `ProposalFn` + callback; see the module docstring."""

    def __init__(self, reflector: Reflector, family: str, budget: ProposalBudget, search_seed: int,
                 ledger_path: str | Path, max_cost_usd: float | None = None, guard: EditGuard | None = None) -> None:
        self.reflector = reflector
        self.guard = guard
        self.family = family
        self.budget = budget
        self.search_seed = search_seed
        self.ledger_path = Path(ledger_path)
        self.max_cost_usd = max_cost_usd
        self.iteration = 0
        self.task = -1
        self.total_cost = 0.0
        self.counts: Counter[str] = Counter()

    # --- GEPA ProposalFn --------------------------------------------------------------------------
    def __call__(self, candidate: dict[str, str], reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                 components_to_update: list[str]) -> dict[str, str]:
        parent = decode(candidate)
        dataset = dataset_from_gepa(self.family, candidate, reflective_dataset)
        self.task += 1
        rng = random.Random(f"{self.search_seed}:propose:{self.iteration}:{self.task}:{parent.id}")
        where = {"search_seed": self.search_seed, "iteration": self.iteration, "task": self.task,
                 "parent_id": parent.id, "minibatch": [f"{r.instance_id}#s{r.seed}" for r in dataset.records]}
        left = None if self.max_cost_usd is None else max(0.0, self.max_cost_usd - self.total_cost)
        budget = self.budget.model_copy(update={"max_cost_usd": left})
        self.counts["proposals"] += 1
        try:
            proposal = self.reflector.propose(parent, dataset, budget, rng)
        except Exception as e:  # noqa: BLE001 - a reflector bug is one failed proposal, logged, not a dead search
            log.exception("reflector %s failed", self.reflector.name)
            self.counts["reflector_errors"] += 1
            self._log(ProposalLog(**where, child_id=None, status="reflector_error", error=f"{type(e).__name__}: {e}"))
            return {}
        self.total_cost += proposal.cost_usd
        edits = list(proposal.edits)
        over = [RejectedEdit(raw=pe.model_dump_json()[:2000], error=f"over the budget of {budget.max_edits} edits")
                for pe in edits[budget.max_edits:]]
        kept, refused = self.screen(parent, edits[: budget.max_edits], dataset)
        child, applied, invalid = apply_proposed(parent, kept)
        rejected = [*proposal.rejected, *refused, *invalid, *over]
        self.counts["edits_refused"] += len(refused)
        self.counts["edits_proposed"] += len(edits) + len(proposal.rejected)
        self.counts["edits_applied"] += len(applied)
        self.counts["edits_rejected"] += len(rejected)
        ok = bool(applied)
        self.counts["children" if ok else "failed_proposals"] += 1
        self._log(ProposalLog(**where, child_id=child.id if ok else None, edits=applied, rejected=rejected,
                              cost_usd=proposal.cost_usd, attempts=proposal.attempts,
                              status="proposed" if ok else "no_valid_edit"))
        return encode(child) if ok else {}

    def screen(self, parent: Harness, edits: list[ProposedEdit],
               dataset: ReflectiveDataset) -> tuple[list[ProposedEdit], list[RejectedEdit]]:
        """(edits the guard lets through, the refused ones with every reason); all pass without a guard."""
        if self.guard is None:
            return edits, []
        kept, refused = [], []
        for pe in edits:
            reasons = self.guard.check(parent, pe.edit, dataset)
            if not reasons:
                kept.append(pe)
                continue
            log.warning("%s search: edit refused: %s", self.family, "; ".join(reasons)[:500])
            refused.append(RejectedEdit(raw=edit_json(pe.edit)[:2000], error="refused: " + "; ".join(reasons)[:2000]))
        return kept, refused

    # --- GEPA callback ----------------------------------------------------------------------------
    def on_iteration_start(self, event: Mapping[str, Any]) -> None:
        self.iteration = int(event["iteration"])
        self.task = -1

    # --- persistence (GEPA saves this with its state; restored on resume) ----------------------------
    def get_state(self) -> dict[str, Any]:
        return {"total_cost": self.total_cost, "counts": dict(self.counts)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.total_cost = float(state.get("total_cost", 0.0))
        self.counts = Counter(state.get("counts", {}))

    def _log(self, entry: ProposalLog) -> None:
        self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
        with self.ledger_path.open("a") as f:
            f.write(entry.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_ledger(path: str | Path) -> dict[tuple[int, int], ProposalLog]:
    """(iteration, task) -> the last logged proposal (a resumed search logs a redone iteration again)."""
    out: dict[tuple[int, int], ProposalLog] = {}
    p = Path(path)
    if not p.exists():
        return out
    lines = p.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = ProposalLog.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValueError):
            if n == len(lines):
                continue  # torn by a kill
            raise ValueError(f"{p}:{n}: not a proposal log entry") from None
        out[(entry.iteration, entry.task)] = entry
    return out
