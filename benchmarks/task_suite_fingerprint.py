"""Fingerprint of the task suite, to show that a refactoring of `tasks/` left it unchanged.

For every family: the sha256 of each of the 100 evaluation instances' `model_dump()` (and of the whole
list, json.dumps with sort_keys), and the verdict (score, passed and failed checks, feedback) of the oracle
and of the do-nothing policy on the chosen instances (all 100 for the five non-browser families, the first
`--browser-n` for website_admin and browser_automation, which take seconds each).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/task_suite_fingerprint.py --out /tmp/before.json
    PYTHONPATH=$PWD .venv/bin/python benchmarks/task_suite_fingerprint.py --out /tmp/after.json
    PYTHONPATH=$PWD .venv/bin/python benchmarks/task_suite_fingerprint.py --compare /tmp/before.json /tmp/after.json

Only the public seams are used (`tasks.get`, `Family.generate`, `tasks.policies.run_policy`), so the same
script runs on both sides of a refactoring.

`--compare` wants the instances, scores, step counts, and passed/failed checks identical. Two things are
normalised first: durations in the feedback (unittest's "Ran 5 tests in 0.004s" differs run to run), and
the check names of the two browser families, which used to name each item (`products[KIT-368].status =
disabled`, `mentions Red Kite`, `test 3 passed`) and are now the fixed names of `Family.check_names` with
one item per change / name / test slot (`Verdict.from_items`): each old name is mapped to its new check,
and a new check passes when all its old items passed. Their feedback is not compared (it now names the
items inside the fixed checks).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

BROWSER = ("website_admin", "browser_automation")
_DURATION = re.compile(r"\bin \d+(?:\.\d+)?s\b")
_ITEM = re.compile(r"^\w+\[.+\]\.\w+ = ")


def _new_check(name: str, new_rows: bool) -> str:
    """The fixed check an item-named check of a browser family belongs to (fixed names map to themselves)."""
    if name.startswith("mentions "):
        return "answer_names"
    if name.startswith("test ") and name.endswith("passed"):
        return "tests_pass"
    if name.endswith(" exists"):
        return "new_row_created"
    if _ITEM.match(name):
        return "new_row_fields" if new_rows else "requested_changes"
    return name


def _regroup(v: dict[str, Any]) -> tuple[set[str], set[str]]:
    new_rows = any(n.endswith(" exists") for n in v["passed"] + v["failed"])
    failed = {_new_check(n, new_rows) for n in v["failed"]}
    passed = {_new_check(n, new_rows) for n in v["passed"]} - failed
    return passed, failed


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _instances(family: str) -> dict[str, Any]:
    import tasks

    fam = tasks.get(family)
    dumps = [fam.generate(i).model_dump() for i in range(100)]
    return {"family_sha256": _digest(dumps), "instance_sha256": [_digest(d) for d in dumps]}


def _verdicts(family: str, indices: list[int]) -> list[dict[str, Any]]:
    import tasks
    from tasks.policies import run_policy

    async def one(i: int) -> dict[str, Any]:
        inst = tasks.get(family).generate(i)
        out: dict[str, Any] = {"index": i}
        for policy in ("oracle", "do_nothing"):
            run = await run_policy(inst, policy)
            v = run.verdict
            out[policy] = {"score": v.score, "passed": v.passed_checks, "failed": v.failed_checks,
                           "feedback": v.feedback, "steps": run.steps, "error": run.error}
        return out

    async def many() -> list[dict[str, Any]]:
        return [await one(i) for i in indices]

    return asyncio.run(many())


def record(browser_n: int, workers: int) -> dict[str, Any]:
    import tasks

    families = tasks.families()
    jobs = [(f, list(range(k, k + 10))) for f in families if f not in BROWSER for k in range(0, 100, 10)]
    jobs += [(f, list(range(k, min(k + 2, browser_n)))) for f in families if f in BROWSER
             for k in range(0, browser_n, 2)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        inst = dict(zip(families, pool.map(_instances, families), strict=True))
        results = list(pool.map(_verdicts, *zip(*jobs, strict=True)))
    out: dict[str, Any] = {f: {**inst[f], "verdicts": []} for f in families}
    for (family, _), rows in zip(jobs, results, strict=True):
        out[family]["verdicts"] += rows
    return out


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Every difference between two fingerprints (an empty list: identical)."""
    problems = []
    for family in sorted(set(before) | set(after)):
        a, b = before.get(family), after.get(family)
        if a is None or b is None:
            problems.append(f"{family}: present on one side only")
            continue
        if a["family_sha256"] != b["family_sha256"]:
            bad = [i for i, (x, y) in enumerate(zip(a["instance_sha256"], b["instance_sha256"], strict=True)) if x != y]
            problems.append(f"{family}: instance payloads differ at {bad[:10]}")
        va = {r["index"]: r for r in a["verdicts"]}
        vb = {r["index"]: r for r in b["verdicts"]}
        for i in sorted(set(va) & set(vb)):
            for policy in ("oracle", "do_nothing"):
                problems += [f"{family}/{i} {policy} {d}" for d in _verdict_diff(family, va[i][policy], vb[i][policy])]
    return problems


def _verdict_diff(family: str, x: dict[str, Any], y: dict[str, Any]) -> list[str]:
    out = [f"{k}: {x[k]!r} != {y[k]!r}" for k in ("score", "steps", "error") if x[k] != y[k]]
    if family in BROWSER:
        if _regroup(x) != _regroup(y):
            out.append(f"checks: {_regroup(x)} != {_regroup(y)}")
        return out
    out += [f"{k}: {x[k]!r} != {y[k]!r}" for k in ("passed", "failed") if x[k] != y[k]]
    fx, fy = _DURATION.sub("in <t>s", x["feedback"]), _DURATION.sub("in <t>s", y["feedback"])
    if fx != fy:
        out.append(f"feedback: {fx!r} != {fy!r}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the fingerprint here (JSON)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two fingerprints")
    ap.add_argument("--browser-n", type=int, default=18, help="instances of each browser family (default 18)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.compare:
        before, after = (json.loads(open(p).read()) for p in args.compare)
        problems = compare(before, after)
        for p in problems:
            print(p)
        n = sum(len(f["verdicts"]) for f in after.values())
        print(f"{len(problems)} differences over {len(after)} families, {n} instances with verdicts")
        return 1 if problems else 0
    start = time.monotonic()
    fp = record(args.browser_n, args.workers)
    with open(args.out, "w") as f:
        json.dump(fp, f, indent=1, sort_keys=True)
    for family, d in fp.items():
        scores = [(r["oracle"]["score"], r["do_nothing"]["score"]) for r in d["verdicts"]]
        print(f"{family:20s} sha256 {d['family_sha256'][:12]}  verdicts {len(scores):3d}  "
              f"oracle min {min(s for s, _ in scores):.3f}  do-nothing max {max(s for _, s in scores):.3f}")
    print(f"recorded in {time.monotonic() - start:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
