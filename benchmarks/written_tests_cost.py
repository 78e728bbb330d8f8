"""What one browser_automation written-tests verification costs, and where (issue 12: one browser per verify).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/written_tests_cost.py             # ~1 min on 2 idle cores
    PYTHONPATH=$PWD .venv/bin/python benchmarks/written_tests_cost.py --repeats 3 --split test

Runs the verifier's own `run_on_mutants` on the oracle's tests of the first written-tests instance of a
split (2 x (1 + faults) sandboxed pytest runs, two at a time, one browser) and samples every descendant
process's CPU time every 50 ms, keeping each process's last value: CPU seconds by kind of process (the
browser, its renderers, the runs' Playwright clients, the browser server, pytest), the wall time, the
browsers seen at once, and whether the oracle's tests earned full marks. Short-lived processes that end
between two samples are undercounted, so the totals are a lower bound.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tasks  # noqa: E402
from results_io import save_results  # noqa: E402
from tasks.browser_automation.verify import judge_runs, run_on_mutants  # noqa: E402
from tasks.shop.lab_pages import make_lab_page  # noqa: E402


def _kind(p: psutil.Process) -> str:
    name = p.name()
    try:
        argv = p.cmdline()
    except psutil.Error:
        argv = []
    if name in ("chromium", "chrome"):
        flag = next((a for a in argv if a.startswith("--type=")), None)
        if flag:
            return "chromium " + flag[len("--type="):]
        parent = p.parent()  # a browser's parent is not Chromium; an exiting helper has lost its argv
        return "chromium browser" if parent and parent.name() not in ("chromium", "chrome") else "chromium (exiting)"
    if "node" in name:
        return "browser server (node)" if "launch-server" in argv else "Playwright client (node)"
    if "python" in name:
        return "pytest and relays (python)"
    return name


class _Sampler:
    def __init__(self) -> None:
        self.last: dict[int, tuple[str, float]] = {}
        self.browsers_at_once = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(0.05):
            browsers = 0
            for p in psutil.Process().children(recursive=True):
                try:
                    kind, cpu = _kind(p), sum(p.cpu_times()[:2])
                except psutil.Error:
                    continue
                self.last[p.pid] = (kind, cpu)
                browsers += kind == "chromium browser"
            self.browsers_at_once = max(self.browsers_at_once, browsers)


def measure(split: str) -> dict:
    family = tasks.get("browser_automation")
    inst = next(i for i in family.instances(split) if i.payload["kind"] == "write_tests")
    lab = make_lab_page(inst.payload["lab_seed"], inst.difficulty == "hard")
    own = psutil.Process().cpu_times()
    start = time.monotonic()
    with _Sampler() as sampler:
        run, schedule = run_on_mutants(inst, {"tests/test_lab.py": lab.oracle_tests})
    wall = time.monotonic() - start
    after = psutil.Process().cpu_times()
    by_kind: collections.Counter[str] = collections.Counter()
    for kind, cpu in sampler.last.values():
        by_kind[kind] += cpu
    earned, _ = judge_runs(run.outcomes, schedule.order)
    return {"instance": inst.id, "runs": schedule.runs, "wall_s": round(wall, 1),
            "cpu_s_sandboxed": round(sum(by_kind.values()), 1),
            "cpu_s_our_process": round(after.user + after.system - own.user - own.system, 1),
            "cpu_s_by_kind": {k: round(v, 1) for k, v in by_kind.most_common()},
            "browsers_at_once": sampler.browsers_at_once, "earned": earned, "tests": len(run.outcomes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="train", choices=["train", "val", "test"])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    rows = []
    for i in range(args.repeats):
        row = measure(args.split)
        rows.append(row)
        kinds = ", ".join(f"{k} {v}" for k, v in row["cpu_s_by_kind"].items())
        print(f"[{i + 1}/{args.repeats}] {row['instance']}: {row['runs']} runs, wall {row['wall_s']} s, "
              f"CPU {row['cpu_s_sandboxed']} s sandboxed + {row['cpu_s_our_process']} s ours ({kinds}); "
              f"browsers at once {row['browsers_at_once']}; earned {row['earned']}/{row['tests']}", flush=True)
    print(f"saved {save_results('written_tests_cost', rows, args)}")


if __name__ == "__main__":
    main()
