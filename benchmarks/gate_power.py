"""The promotion gate's error rates by simulation (analysis/gate_power.py): the share of no-op candidates it promotes
(the null rate) and of candidates with a true +10-point gain (the power), over a grid of validation sizes.

    .venv/bin/python benchmarks/gate_power.py --instances 30 --eval-seeds 1 4 8 12 --train-seeds 1 3 --draws 400

Each row: --instances validation instances judged (all families together: the study's 3 families x the 10 val
instances the search does not use = 30), --eval-seeds sampling seeds per instance (round.gate.val_seeds),
--train-seeds training seeds of the correction arm, the seed choice (`average` / `split`), M_t's success
--base-rate, the instances' difficulty spread (--concentration), the gain and its spread between training seeds.
`legacy null` is the rule before (the best seed chosen on the units that judge it; any positive mean promoted) on
the same no-op draws. Seeded (--seed): the same command prints the same table. Prints a markdown table; raw JSON
in benchmarks/results/gate_power-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from analysis.gate_power import GateSimulation, gate_rates
from results_io import save_results  # benchmarks/ is sys.path[0] when this script runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--instances", type=int, nargs="+", default=[30])
    p.add_argument("--eval-seeds", type=int, nargs="+", default=[1, 4, 8, 12])
    p.add_argument("--train-seeds", type=int, nargs="+", default=[1, 3])
    p.add_argument("--choice", nargs="+", default=["average"], choices=["average", "split"])
    p.add_argument("--base-rate", type=float, default=0.24)
    p.add_argument("--concentration", type=float, default=2.0)
    p.add_argument("--gain", type=float, default=0.10)
    p.add_argument("--seed-sd", type=float, default=0.03)
    p.add_argument("--draws", type=int, default=400)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rows = []
    print("| instances | eval seeds | training seeds | seed choice | null promoted | power (+{:.0f} pts) | legacy null "
          "| mean simulated gain | s |".format(100 * a.gain))
    print("|---|---|---|---|---|---|---|---|---|")
    for n in a.instances:
        for e in a.eval_seeds:
            for k in a.train_seeds:
                for choice in a.choice:
                    s = GateSimulation(instances=n, eval_seeds=e, train_seeds=k, base_rate=a.base_rate,
                                       concentration=a.concentration, gain=a.gain, seed_sd=a.seed_sd,
                                       seed_choice=choice, draws=a.draws, n_boot=a.n_boot)
                    t0 = time.monotonic()
                    r = gate_rates(s, random.Random(a.seed))
                    wall = time.monotonic() - t0
                    rows.append({**r.model_dump(mode="json"), "wall_s": round(wall, 1)})
                    print(f"| {n} | {e} | {k} | {choice} | {100 * r.null_promoted:.1f}% | {100 * r.power:.1f}% | "
                          f"{100 * r.legacy_null_promoted:.1f}% | {100 * r.mean_gain:+.1f} pts | {wall:.0f} |",
                          flush=True)
    path = save_results("gate_power", rows, a)
    print(json.dumps({"written": str(path)}))


if __name__ == "__main__":
    main()
