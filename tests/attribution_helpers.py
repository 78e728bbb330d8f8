"""Failing trajectories with a known cause, made from real oracle rollouts (for the attribution tests).

Each case runs the real `oracle/<family>` policy through `agents.rollout.run_episode`, turns its calls into
a script, perturbs the script (drops, changes or repeats calls; finishes early) and replays it through the
real runtime and the real environment with the scripted model (tests/scripted_model.py, a stand-in for an
external model), so the verdict is the real verifier's. Two cases change the harness instead (a hook that
blocks a valid call, a hook that stops the episode) and one the limits (max turns).

The label of each case is attached as `InjectedFault` ground truth, as the flawed student will attach its own.
This is a proxy made alongside the heuristic's rules, not the flawed student: figures measured on it are an
upper bound, and say so where reported.

    PYTHONPATH=$PWD:$PWD/tests .venv/bin/python tests/attribution_helpers.py OUT_DIR [--indices 40-49]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness as harness_pkg
import tasks
from agents.records import InjectedFault, ModelRole, Trajectory
from agents.jobs import Limits
from agents.rollout import run_episode
from harness.hooks import AtTurn, BeforeToolCall, Block, Hook, Stop
from harness.program import Harness
from scripted_model import Step, scripted

Calls = list[tuple[str, Any]]
Script = list[Step]


class NotApplicable(Exception):
    """This perturbation does not apply to this instance (e.g. no product sits exactly at the bound)."""


async def oracle_run(family: str, index: int, h: Harness | None = None, limits: Limits = Limits()) -> Trajectory:
    inst = tasks.get(family).generate(index)
    env = tasks.make_env(inst)
    try:
        return await run_episode(ModelRole(model=f"oracle/{family}"), h or harness_pkg.baseline(family), env, seed=0,
                                 limits=limits)
    finally:
        env.close()


def script_of(t: Trajectory) -> Script:
    """One step per turn: the turn's calls, or its final text."""
    return [Step(calls=[(c.name, copy.deepcopy(c.arguments)) for c in turn.tool_calls]) if turn.tool_calls
            else Step(text=str(turn.assistant.get("content") or "done")) for turn in t.turns]


async def replay(family: str, index: int, script: Script, h: Harness | None = None, limits: Limits = Limits()) -> Trajectory:
    role, _ = scripted(script)
    env = tasks.make_env(tasks.get(family).generate(index))
    try:
        return await run_episode(role, h or harness_pkg.baseline(family), env, seed=0, limits=limits)
    finally:
        env.close()


def find(script: Script, name: str, pred: Callable[[dict[str, Any]], bool] = lambda a: True) -> int:
    for i, s in enumerate(script):
        if s.calls and s.calls[0][0] == name and isinstance(s.calls[0][1], dict) and pred(s.calls[0][1]):
            return i
    raise NotApplicable(f"no {name} call")


def with_args(step: Step, **changes: Any) -> Step:
    name, args = step.calls[0]
    return Step(calls=[(name, {**args, **changes})])


# --- perturbations: script -> (script, turn of the fault, what changed) ------------------------------------
def mistyped_argument(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "write_file", lambda a: a.get("path") == "audit.csv")
    name, args = s[i].calls[0]
    s[i] = Step(calls=[(name, {"path": args["path"], "contents": args["content"]})])
    return s, i, "write_file(audit.csv) with 'contents' for 'content', never repaired"


def hallucinated_tool(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "create_sheet")
    s[i] = Step(calls=[("make_spreadsheet", s[i].calls[0][1])])
    return s, i, "create_sheet called as make_spreadsheet"


def wrong_columns(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "create_sheet")
    cols = list(s[i].calls[0][1]["columns"])
    cols[1] = cols[1] + " name"
    s[i] = with_args(s[i], columns=cols)
    return s, i, f"sheet columns {cols}"


def wrong_report_key(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "bucket_put")
    s[i] = with_args(s[i], key="reports/anomalies.csv")
    return s, i, "report uploaded as reports/anomalies.csv"


def _threshold(inst: Any) -> int:
    m = re.search(r"at or below (\d+) units", inst.instruction)
    if not m:
        raise NotApplicable("no 'at or below N units' bound in the task")
    return int(m.group(1))


def _drop_products(s: Script, skus: set[str]) -> Script:
    i = find(s, "append_rows")
    rows = [r for r in s[i].calls[0][1]["rows"] if r[0] not in skus]
    s[i] = with_args(s[i], rows=rows)
    return [x for x in s if not (x.calls and x.calls[0][0] == "send_email"
                                 and any(f"SKU {k})" in x.calls[0][1].get("body", "") for k in skus))]


def exclusive_bound(s: Script, inst: Any) -> tuple[Script, int, str]:
    bound = _threshold(inst)
    i = find(s, "append_rows")
    at = {r[0] for r in s[i].calls[0][1]["rows"] if str(r[2]) == str(bound)}
    if not at:
        raise NotApplicable("no product exactly at the bound")
    return _drop_products(s, at), i, f"stock < {bound} instead of <= {bound}"


def overtime_convention(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "write_file", lambda a: a.get("path") == "audit.csv")
    lines = s[i].calls[0][1]["content"].splitlines()
    col = lines[0].split(",").index("overtime_hours")
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        cells[col] = f"{float(cells[col]) + 1.5:.2f}"
        out.append(",".join(cells))
    s[i] = with_args(s[i], content="\n".join(out) + "\n")
    return s, i, "overtime counted from a lower daily threshold"


def _page_skus(t: Trajectory, page: int) -> set[str]:
    for turn in t.turns:
        for c, r in zip(turn.tool_calls, turn.tool_results, strict=False):
            if c.name == "list_products" and isinstance(c.arguments, dict) and c.arguments.get("page") == page:
                return {p["sku"] for p in json.loads(r.content)["products"]}
    raise NotApplicable(f"no page {page}")


def _pages(t: Trajectory) -> int:
    pages = [c.arguments.get("page") for turn in t.turns for c in turn.tool_calls
             if c.name == "list_products" and isinstance(c.arguments, dict)]
    if len(pages) < 2:
        raise NotApplicable("a single page of products")
    return max(pages)


def requery_and_forget(s: Script, inst: Any, t: Trajectory) -> tuple[Script, int, str]:
    _pages(t)
    first = _page_skus(t, 1)
    i = find(s, "append_rows")
    low = [r[0] for r in s[i].calls[0][1]["rows"] if r[0] in first]
    if not low:
        raise NotApplicable("no low-stock product on page 1")
    j = find(s, "create_sheet")
    s = _drop_products(s, {low[0]})
    s.insert(j, Step(calls=[("list_products", {"page": 1})]))
    return s, j, f"re-read page 1 late and still lost {low[0]}"


def skip_page(s: Script, inst: Any, t: Trajectory) -> tuple[Script, int, str]:
    last = _pages(t)
    skus = _page_skus(t, last)
    i = find(s, "list_products", lambda a: a.get("page") == last)
    del s[i]
    s = _drop_products(s, skus)
    return s, i, f"page {last} of the product listing skipped"


def finish_early(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = next((k for k, x in enumerate(s) if x.calls and x.calls[0][0] in ("write_file", "bucket_put", "create_sheet",
                                                                            "reply_to_thread")), None)
    if i is None:
        raise NotApplicable("no output call")
    return s[:i] + [Step(text="All done.")], i, "finished before writing any output"


def loop_call(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = next((k for k, x in enumerate(s) if x.calls), None)
    if i is None or i + 1 >= len(s):
        raise NotApplicable("too short")
    first = s[i + 1]
    return s[:i + 1] + [first, first, first, Step(text="Stopping here.")], i + 1, f"{first.calls[0][0]} called 3 times in a row, then gave up"


def stale_value(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "append_rows")
    rows = [list(r) for r in s[i].calls[0][1]["rows"]]
    if not rows:
        raise NotApplicable("no low-stock rows")
    rows[0][2] = str(int(rows[0][2]) + 7)
    s[i] = with_args(s[i], rows=rows)
    return s, i, f"stock of {rows[0][0]} written from a stale value"


def adjacent_tool(s: Script, inst: Any) -> tuple[Script, int, str]:
    i = find(s, "reply_to_thread")
    tid = s[i].calls[0][1]["thread_id"]
    manager = next(r["manager_id"] for r in inst.payload["requests"] if r["thread_id"] == tid)
    s[i] = Step(calls=[("send_message", {"to": manager, "text": s[i].calls[0][1]["text"]})])
    return s, i, f"decision for {tid} sent as a direct message instead of a thread reply"


@dataclass
class Case:
    name: str
    category: str
    families: tuple[str, ...]
    perturb: Callable[..., tuple[Script, int, str]] | None = None
    needs_oracle_trajectory: bool = False
    harness: Callable[[str], Harness] | None = None
    limits: Limits = field(default_factory=Limits)
    known_miss: str = ""  # the category the heuristic names instead (a documented limitation), if any


def blocking_harness(family: str) -> Harness:
    h = harness_pkg.baseline(family)
    hook = Hook(id="block-writes", when=BeforeToolCall(tool="write_file|bucket_put|create_sheet"),
                then=Block(message="writing is disabled"), max_fires=1)
    return h.model_copy(update={"hooks": [hook]})


def stopping_harness(family: str) -> Harness:
    h = harness_pkg.baseline(family)
    return h.model_copy(update={"hooks": [Hook(id="stop-early", when=AtTurn(turn=2), then=Stop(message="budget"))]})


CASES: tuple[Case, ...] = (
    Case("mistyped_argument", "tool_use", ("payroll_audit",), mistyped_argument),
    Case("hallucinated_tool", "tool_use", ("stock_alert",), hallucinated_tool),
    Case("wrong_columns", "instruction_following", ("stock_alert",), wrong_columns),
    Case("wrong_report_key", "instruction_following", ("anomaly_detection",), wrong_report_key),
    Case("exclusive_bound", "implicit_knowledge", ("stock_alert",), exclusive_bound),
    Case("overtime_convention", "implicit_knowledge", ("payroll_audit",), overtime_convention),
    Case("requery_and_forget", "long_context", ("stock_alert",), requery_and_forget, needs_oracle_trajectory=True),
    Case("skip_page", "planning", ("stock_alert",), skip_page, needs_oracle_trajectory=True),
    Case("finish_early", "planning", ("payroll_audit", "anomaly_detection", "budget_approval"), finish_early),
    Case("loop_call", "planning", ("budget_approval", "code_refactor"), loop_call),
    Case("max_turns", "planning", ("anomaly_detection",), limits=Limits(max_turns=2)),
    Case("blocked_valid_call", "environment_or_harness", ("payroll_audit", "anomaly_detection"), harness=blocking_harness),
    Case("hook_stop", "environment_or_harness", ("budget_approval",), harness=stopping_harness),
    # faults the flawed student may inject that leave no trace the heuristic reads (docs/attribution.md)
    Case("stale_value", "long_context", ("stock_alert",), stale_value, known_miss="implicit_knowledge"),
    Case("adjacent_tool", "tool_use", ("budget_approval",), adjacent_tool, known_miss="planning"),
)


OracleRuns = dict[tuple[str, int], Trajectory]


async def _oracle(family: str, index: int, memo: OracleRuns) -> Trajectory:
    if (family, index) not in memo:
        memo[(family, index)] = await oracle_run(family, index)
    return memo[(family, index)]


async def make_case(case: Case, family: str, index: int, memo: OracleRuns | None = None) -> Trajectory:
    """The case's failing trajectory on one instance, labelled; NotApplicable when it does not apply.

    `memo` keeps the plain oracle rollouts of (family, index) across cases (they are deterministic)."""
    memo = {} if memo is None else memo
    inst = tasks.get(family).generate(index)
    h = case.harness(family) if case.harness else None
    if case.perturb is None:
        t = await oracle_run(family, index, h, case.limits) if case.harness is None else \
            await replay(family, index, script_of(await _oracle(family, index, memo)), h, case.limits)
        turn, what = max(0, len(t.turns) - 1), case.name
    else:
        base = await _oracle(family, index, memo)
        args = (script_of(base), inst, base) if case.needs_oracle_trajectory else (script_of(base), inst)
        script, turn, what = case.perturb(*args)
        t = await replay(family, index, script, h, case.limits)
    if t.passed:
        raise NotApplicable(f"{case.name} on {inst.id} still passed")
    fault = InjectedFault(turn=turn, category=case.category, kind=case.name, detail=what)
    return t.model_copy(update={"injected_faults": [fault]})


async def make_cases(indices: list[int], cases: tuple[Case, ...] = CASES) -> tuple[list[Trajectory], list[str]]:
    out, skipped = [], []
    memo: OracleRuns = {}
    for case in cases:
        for family in case.families:
            for i in indices:
                try:
                    out.append(await make_case(case, family, i, memo))
                except NotApplicable as e:
                    skipped.append(f"{case.name}/{family}/{i}: {e}")
    return out, skipped


def main() -> None:
    from agents.tables.trajectories import write_trajectories

    ap = argparse.ArgumentParser(description="Write perturbed-oracle trajectories with labelled causes.")
    ap.add_argument("out", type=Path)
    ap.add_argument("--indices", default="40-49", help="instance indices, e.g. 40-49")
    a = ap.parse_args()
    lo, _, hi = a.indices.partition("-")
    trajs, skipped = asyncio.run(make_cases(list(range(int(lo), int(hi or lo) + 1))))
    path = write_trajectories(a.out / "trajectories.parquet", trajs)
    print(f"{len(trajs)} trajectories -> {path}; {len(skipped)} not applicable")


if __name__ == "__main__":
    main()
