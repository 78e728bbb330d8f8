"""The harness search: GEPA over typed harness edits, evaluated by an injected evaluator.

    from harness.evolution import CachedEvaluator, ResultCache, SearchConfig, make_reflector, run_search
    evaluator = CachedEvaluator(my_evaluator, ResultCache(out / "cache.jsonl"))   # flows wires the Ray pool
    result = run_search(h0, train_items, val_items, evaluator, make_reflector("library", family),
                        SearchConfig(family=family, budget_rollouts=200), out)

Modules: records (data), protocols (Evaluator, CompletionFn, Reflector), cache (content-keyed results),
adapter (GEPA adapter), proposer (typed edits -> child harness), sampling (resumable GEPA strategies),
lineage (candidates, h* from h0), search (the GEPA runs), cards (knowledge cards), reflectors/ (strategies),
transcript (trimmed conversation text). Imports no ray, torch, prefect, litellm or agents.
"""

from harness.evolution.cache import CachedEvaluator, ResultCache
from harness.evolution.cards import load_card, section_id, stated_keys
from harness.evolution.lineage import read_lineage, reconstruct
from harness.evolution.protocols import Completion, CompletionFn, Evaluator, Reflector, items_for
from harness.evolution.records import EvalItem, EvolutionCandidate, Proposal, ProposedEdit, RolloutResult, cache_key
from harness.evolution.reflectors import make_reflector, parse_strategy
from harness.evolution.search import SearchConfig, SearchResult, run_search

__all__ = [
    "CachedEvaluator", "Completion", "CompletionFn", "EvalItem", "Evaluator", "EvolutionCandidate", "Proposal",
    "ProposedEdit", "Reflector", "ResultCache", "RolloutResult", "SearchConfig", "SearchResult", "cache_key",
    "items_for", "load_card", "make_reflector", "parse_strategy", "read_lineage", "reconstruct", "run_search",
    "section_id", "stated_keys",
]
