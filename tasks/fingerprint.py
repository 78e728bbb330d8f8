"""Fingerprints of task instances and of a task suite: what tells two runs' instances apart when their ids agree.

    digest = instance_digest(inst)                          # sha256 of the instance's content
    suite_fingerprint({inst.id: instance_digest(inst) for inst in insts})    # 16 hex digits

An instance id (`<family>/<index>`) names a slot; its content (instruction, payload, seed, difficulty) comes
from the family's generator, which a change to `tasks/` can alter. Two runs can be compared unit by unit only
when every instance they share has the same content: `suite_fingerprint` over the shared ids is then the same
on both sides. The content is `TaskInstance.model_dump(mode="json")`, serialised with sorted keys (the same
bytes as `benchmarks/task_suite_fingerprint.py` hashes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from tasks.records import TaskInstance

FINGERPRINT_CHARS = 16


def instance_digest(inst: TaskInstance) -> str:
    """sha256 (hex) of the instance's content, keys sorted."""
    text = json.dumps(inst.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def suite_fingerprint(digests: Mapping[str, str]) -> str:
    """One short hash over instance id -> content digest (order-free); '' for no instances."""
    if not digests:
        return ""
    lines = "".join(f"{iid} {digests[iid]}\n" for iid in sorted(digests))
    return hashlib.sha256(lines.encode()).hexdigest()[:FINGERPRINT_CHARS]


def differing(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The instance ids both suites hold whose contents differ, sorted."""
    return sorted(iid for iid in a.keys() & b.keys() if a[iid] != b[iid])
