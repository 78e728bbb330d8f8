"""Why a round's harness search accepted what it did: every proposal, its edits, the minibatch scores of the
parent and the child, and the validation mean of what was accepted.

    .venv/bin/python benchmarks/search_log.py runs/<run id>/rounds/r0 [--family F]

Reads `evolution/<family>/lineage.jsonl` (one line per candidate the search made: its edits, the minibatch it
was tried on, the parent's and its own minibatch scores, and the validation scores when the minibatch test let
it through). Prints one markdown table per family and a line of counts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _edit(e: dict[str, Any]) -> str:
    edit = e.get("edit", {})
    op = edit.get("op", "?")
    target = (edit.get("section") or {}).get("id") or (edit.get("hook") or {}).get("id") or edit.get("tool") or \
        edit.get("section_id") or ""
    return f"{op} {target}".strip()


def rows(lineage: Path) -> list[dict[str, Any]]:
    out = []
    for line in lineage.read_text().splitlines():
        c = json.loads(line)
        if c.get("iteration") == 0:
            out.append({"seed": c["search_seed"], "iter": 0, "edits": "(start harness)", "parent mb": "",
                        "child mb": "", "val mean": f"{c['val_mean']:.3f}", "accepted": "start"})
            continue
        parent, child = sum(c.get("parent_minibatch_scores") or []), sum(c.get("minibatch_scores") or [])
        val = c.get("val_mean")
        out.append({"seed": c["search_seed"], "iter": c["iteration"], "edits": "; ".join(_edit(e) for e in c["edits"]),
                    "parent mb": f"{parent:.2f}", "child mb": f"{child:.2f}",
                    "val mean": "" if val is None else f"{val:.3f}", "accepted": "yes" if c.get("accepted") else "no"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("round_dir", type=Path)
    ap.add_argument("--family", action="append")
    args = ap.parse_args()
    for lineage in sorted((args.round_dir / "evolution").glob("*/lineage.jsonl")):
        family = lineage.parent.name
        if args.family and family not in args.family:
            continue
        table = rows(lineage)
        cols = ["seed", "iter", "edits", "parent mb", "child mb", "val mean", "accepted"]
        print(f"\n### {family}\n\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for r in table:
            print("| " + " | ".join(str(r[c]) for c in cols) + " |")
        proposals = [r for r in table if r["iter"] != 0]
        better = sum(float(r["child mb"]) > float(r["parent mb"]) for r in proposals)
        print(f"\n{family}: {len(proposals)} proposals, {better} beat their parent on the minibatch, "
              f"{sum(r['accepted'] == 'yes' for r in proposals)} accepted")


if __name__ == "__main__":
    main()
