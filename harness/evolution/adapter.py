"""The GEPA adapter: a GEPA candidate is one harness; evaluation goes through the injected evaluator.

GEPA evolves a dict of named texts. Our edits add and remove components (sections, hooks), and GEPA's
reflective proposer may only change the values of keys a candidate already has, while
`Harness.from_components` cannot remove a section or set its kind/title. So a candidate is the whole harness
under one key: `{"harness": <canonical JSON>}` (`encode`/`decode`). The per-component view
(`Harness.components()`) is what the reflective dataset is organised by: for each component, the failing
rollouts in which it fired.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gepa.core.adapter import EvaluationBatch

from harness.evolution.protocols import Evaluator, evaluate_many
from harness.evolution.records import EvalItem, ReflectiveDataset, RolloutResult
from harness.program import Harness, stable_dump

CANDIDATE_KEY = "harness"
ALL_ROLLOUTS = "harness"  # the reflective dataset's key holding every rollout of the minibatch


def encode(h: Harness) -> dict[str, str]:
    """A harness as a GEPA candidate (canonical JSON: equal harnesses are equal candidates)."""
    return {CANDIDATE_KEY: json.dumps(stable_dump(h), sort_keys=True, separators=(",", ":"))}


def decode(candidate: Mapping[str, str]) -> Harness:
    if set(candidate) != {CANDIDATE_KEY}:
        raise ValueError(f"a harness candidate has exactly the key '{CANDIDATE_KEY}', got {sorted(candidate)}")
    return Harness.model_validate_json(candidate[CANDIDATE_KEY])


class HarnessAdapter:
    """`gepa.GEPAAdapter` over harnesses. Scores are verifier scores in [0, 1] (success = 1.0).

    `evaluate` runs the whole batch through the evaluator as one parallel batch; with `capture_traces` the
    `RolloutResult`s are the trajectories GEPA hands back to `make_reflective_dataset`.
    """

    propose_new_texts = None  # proposals come from the custom proposer (harness.evolution.proposer)

    def __init__(self, evaluator: Evaluator, family: str, persist: Any = None) -> None:
        self.evaluator = evaluator
        self.family = family
        self.persist = persist  # an object with get_state()/set_state(dict) saved in GEPA's run state

    def evaluate(self, batch: list[EvalItem], candidate: dict[str, str],
                 capture_traces: bool = False) -> EvaluationBatch[RolloutResult, dict[str, Any]]:
        results = self.evaluator(decode(candidate), batch)
        return EvaluationBatch(outputs=[r.summary() for r in results], scores=[r.score for r in results],
                               trajectories=list(results) if capture_traces else None)

    def batch_evaluate(self, items: list[tuple[dict[str, str], list[EvalItem]]]) -> list[EvaluationBatch]:
        """Several (candidate, batch) pairs (an iteration's parents or children, or the validation passes of
        several accepted children) as ONE parallel batch of rollouts."""
        results = evaluate_many(self.evaluator, [(decode(cand), batch) for cand, batch in items])
        return [EvaluationBatch(outputs=[r.summary() for r in rs], scores=[r.score for r in rs], trajectories=list(rs))
                for rs in results]

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> dict[str, list[dict[str, Any]]]:
        """`{"harness": every rollout}` plus, per harness component, the failing rollouts in which it fired.

        Each record has the instruction, the score, the failed checks with the verifier's feedback, a trimmed
        transcript, the tool calls and the components that triggered.
        """
        h = decode(candidate)
        ds = ReflectiveDataset(family=self.family, harness_id=h.id, records=list(eval_batch.trajectories or []))
        out: dict[str, list[dict[str, Any]]] = {ALL_ROLLOUTS: [r.model_dump(mode="json") for r in ds.records]}
        for component, rows in ds.by_component(sorted(h.components())).items():
            if rows:
                out[component] = [r.model_dump(mode="json") for r in rows]
        return out

    # GEPA snapshots this into its run state before each iteration and restores it on resume.
    def get_adapter_state(self) -> dict[str, Any]:
        return dict(self.persist.get_state()) if self.persist is not None else {}

    def set_adapter_state(self, state: dict[str, Any]) -> None:
        if self.persist is not None and state:
            self.persist.set_state(state)


def dataset_from_gepa(family: str, candidate: Mapping[str, str],
                      reflective: Mapping[str, Sequence[Mapping[str, Any]]]) -> ReflectiveDataset:
    """Our typed dataset back from the mapping GEPA passes to the proposer."""
    h = decode(candidate)
    records = [RolloutResult.model_validate(dict(r)) for r in reflective.get(ALL_ROLLOUTS, [])]
    return ReflectiveDataset(family=family, harness_id=h.id, records=records)
