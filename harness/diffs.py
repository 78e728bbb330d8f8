"""Readable diff between two harnesses, component by component (what a reviewer or a report shows)."""

from __future__ import annotations

import difflib

from harness.program import Harness


def diff(a: Harness, b: Harness) -> str:
    """'' when equal; else one block per added/removed/changed component with a unified text diff."""
    ca, cb = a.components(), b.components()
    out: list[str] = []
    for key in sorted(set(ca) | set(cb)):
        if key not in cb:
            out.append(f"- removed {key}")
            out.extend(f"    - {line}" for line in ca[key].splitlines())
        elif key not in ca:
            out.append(f"+ added {key}")
            out.extend(f"    + {line}" for line in cb[key].splitlines())
        elif ca[key] != cb[key]:
            out.append(f"~ changed {key}")
            lines = difflib.unified_diff(ca[key].splitlines(), cb[key].splitlines(), lineterm="", n=1)
            out.extend(f"    {line}" for line in list(lines)[2:])  # skip the ---/+++ file header
    sa, sb = {s.id: s for s in a.sections}, {s.id: s for s in b.sections}
    for sid in sorted(set(sa) & set(sb)):
        for attr in ("kind", "title"):
            va, vb = getattr(sa[sid], attr), getattr(sb[sid], attr)
            if va != vb:
                out.append(f"~ section:{sid} {attr}: {va!r} -> {vb!r}")
    order_a = [s.id for s in a.sections if s.id in {x.id for x in b.sections}]
    order_b = [s.id for s in b.sections if s.id in {x.id for x in a.sections}]
    if order_a != order_b:
        out.append(f"~ section order: {order_a} -> {order_b}")
    if not out:
        return ""
    return f"harness {a.id} -> {b.id}\n" + "\n".join(out)
