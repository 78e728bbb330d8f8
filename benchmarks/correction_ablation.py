"""What a correction row should hold, and which expert should write it: measured on the validation split.

    .venv/bin/python benchmarks/correction_ablation.py --run RUN_ID [--config deploy/configs/micro_study.yaml]

Takes a round (run RUN_ID of --config, round 0) whose `arm_data` stage has finished and, for each variant, a copy
of that run (hard links, under runs/ablation/<variant>/RUN_ID) without its trained arms' outputs (sets,
datasets, adapters, their test and validation rollouts), resumed with the variant's config (`coevo run --resume
RUN_ID --config VARIANT`). Every stage reruns under the changed config but finds its
finished work: the evaluation and train-split rollouts by their chunk keys, the search in its cache, and the
correction episodes (probes, rewrites, student replays) in the episode cache by job key, so a variant that
changes only the row reruns no episode; then ONE correction arm with ONE training seed is trained, evaluated and
gated. The gate's validation rollouts of M_t are the same job keys in every variant (the same rollouts). The
run's own setting is read from the run itself (its correction arm's training seed 0) once it has finished.

Variants (the rest of the config as given):
- rows: `correction.suffix` none | replay | original with `correction.loss_on` all_student (with the loss on the
  corrected turn only, the suffix cannot change the gradient: those rows train what none/corrected trains);
- experts: `correction.expert` flawed/{family}@expert | showwork/{family} (suffix none, loss on corrected).
Per variant: corrections kept and rows in the set, validation success of the correction seed and of M_t, the
paired difference with its 95% CI, and the test-split success of the correction seed. Prints a markdown table;
raw JSON in benchmarks/results/correction_ablation-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from results_io import save_results  # noqa: E402

from flows.config import read_config_data  # noqa: E402  (the config with its `extends:` chain merged)

# With the loss on the corrected turn only, what follows it cannot change the gradient (a causal model's logits at
# turn t* do not see later tokens): replay/corrected and original/corrected train exactly what none/corrected
# trains, so they are not run (only their row lengths differ).
ROWS = [("none", "all_student"), ("replay", "all_student"), ("original", "all_student")]
EXPERTS = ["flawed/{family}@expert", "showwork/{family}"]
DEFAULTS = {"suffix": "none", "loss_on": "corrected", "expert": None}


def variants(which: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if which in ("all", "rows"):
        out |= {f"rows-{s}-{lo}": {"suffix": s, "loss_on": lo} for s, lo in ROWS}
    if which in ("all", "experts"):
        out |= {f"expert-{e.split('/')[0]}": {"expert": e, "suffix": "none", "loss_on": "corrected"} for e in EXPERTS}
    return out


def variant_config(base: dict[str, Any], name: str, overrides: dict[str, Any], runs_dir: Path,
                   port: int | None) -> Path:
    cfg = json.loads(json.dumps(base))
    cfg["runs_dir"] = str(runs_dir)
    student = cfg["models"][cfg["round"].get("student", "student")]
    for server in cfg.get("servers", []) if port else []:  # its own server, to run beside the source run
        if student.get("api_base", "").endswith(f":{server['port']}/v1"):
            student["api_base"] = f"http://127.0.0.1:{port}/v1"
            server["port"] = port
    r = cfg["round"]
    r["arms"] = ["corr"]
    cfg.setdefault("lora", {})["seeds"] = 1
    r.setdefault("correction", {}).update(overrides)
    path = runs_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# What the trained arms wrote in the round's store (globs): a copy drops them, so nothing of the source's adapters is
# found under the variant's (same) served adapter names.
ARM_OUTPUTS = ["trajectories/eval/imit_h0.*", "trajectories/eval/imit.*", "trajectories/eval/corr.*",
               "trajectories/eval/val.corr.*", "trajectories/sets", "datasets/sets", "datasets/imit_h0-*",
               "datasets/imit-*", "datasets/corr-*", "adapters", "merged", "attributions", "reports"]


def copy_run(src: Path, dst: Path) -> None:
    if dst.exists():
        return  # resumed: the variant's earlier attempt is continued
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns(".lock", "*.lock"))
    rnd = dst / "rounds" / "r0"  # the store replaces files atomically, so the hard-linked source is never touched
    for pattern in ARM_OUTPUTS:
        for path in rnd.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def measured(run_dir: Path) -> dict[str, Any]:
    """The variant's numbers from its round record (training seed 0 of the correction arm)."""
    state = json.loads((run_dir / "rounds" / "r0" / "state.json").read_text())["stages"]["round"]
    gate, data = state["gate"]["output"], state["arm_data"]["output"]["sets"]["corr"]
    arms = state["evaluate_arms"]["output"]
    test = arms.get("pairs", {}).get("corr.s0.hstar", {}).get("success")
    card = data.get("card", {})
    kept = card.get("correction_card", card).get("corrections", 0)  # corrections kept (status corrected)
    return {"kept": kept, "rows": data.get("rows", 0), "val_corr": gate["val"].get("val.corr.s0.hstar"),
            "val_M_t": gate["val"].get("val.M_t.hstar"), "diff": gate.get("diff", {}).get("diff"),
            "ci": [gate.get("diff", {}).get("ci_low"), gate.get("diff", {}).get("ci_high")], "test_corr": test,
            "gate": gate["reason"][:160], "reason": data.get("reason", "")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="The finished run to branch from (its round 0).")
    ap.add_argument("--config", type=Path, default=REPO / "deploy/configs/micro_study.yaml")
    ap.add_argument("--variants", choices=["all", "rows", "experts"], default="all")
    ap.add_argument("--variant", action="append", help="Run only this variant (repeatable, in the order given).")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "ablation")
    ap.add_argument("--port", type=int, default=None, help="The variants' student server port (default: the "
                    "config's; another one runs beside the source run, but its student replays are then new episodes "
                    "when the source run cached them under its server, as runs before 2026-12-04 did).")
    args = ap.parse_args()
    base = read_config_data(args.config)
    src = REPO / base.get("runs_dir", "runs") / args.run
    own = base["round"].get("correction", {})
    results = []
    chosen = variants(args.variants)
    if args.variant:  # these, in this order
        unknown = [v for v in args.variant if v not in chosen]
        if unknown:
            ap.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(chosen)}")
        chosen = {v: chosen[v] for v in args.variant}
    for name, overrides in chosen.items():
        if all(own.get(k, DEFAULTS[k]) == v for k, v in overrides.items()):
            continue  # the run itself is this variant

        runs_dir = (args.out / name).resolve()
        copy_run(src, runs_dir / args.run)
        cfg = variant_config(base, name, overrides, runs_dir, args.port)
        cmd = [str(REPO / ".venv/bin/coevo"), "run", "--resume", args.run, "--config", str(cfg)]
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        done = subprocess.run(cmd, cwd=REPO)
        row = {"variant": name, **overrides, "exit": done.returncode}
        if done.returncode == 0:
            row |= measured(runs_dir / args.run)
        results.append(row)
        print(json.dumps(row), flush=True)
    if (src / "rounds" / "r0" / "reports" / "report.md").exists():  # the source run has finished: its own setting
        results.insert(0, {"variant": "the run itself (seed 0)", "suffix": own.get("suffix", "none"),
                           "loss_on": own.get("loss_on", "corrected"), "expert": own.get("expert"), **measured(src)})
    cols = ["variant", "kept", "rows", "val_corr", "val_M_t", "diff", "ci", "test_corr"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(str(r.get(c)) for c in cols) + " |")
    print(f"wrote {save_results('correction_ablation', results, args)}")


if __name__ == "__main__":
    main()
