"""Failure attribution: why a rollout failed, in the six-category ontology (docs/attribution.md).

    from analysis.attribution import make_attributor, attribute_all
    records = await attribute_all(make_attributor("heuristic"), [t.view() for t in failing])

Strategies (one small file each, chosen by name): `heuristic` (offline rules) and `judge:MODEL` (a model with
a rubric). `measure` is the only code that reads simulation ground truth.
"""

from analysis.attribution.base import Attributor, attribute_all, make_attributor, parse_spec
from analysis.attribution.ontology import BUCKETS, CATEGORIES, DEFINITIONS, UNATTRIBUTED, Bucket, Category
from analysis.attribution.records import ATTRIBUTION_SCHEMA, Attribution

__all__ = ["ATTRIBUTION_SCHEMA", "BUCKETS", "CATEGORIES", "DEFINITIONS", "UNATTRIBUTED", "Attribution", "Attributor",
           "Bucket", "Category", "attribute_all", "make_attributor", "parse_spec"]
