"""Bytes per stored 20-turn trajectory: table version 1 (one row per trajectory, the whole record as JSON,
every turn's full prompt ids) against version 2 (trajectory table + turn table, prompt ids by delta).

    .venv/bin/python benchmarks/storage.py                 # ~1 min; writes benchmarks/results/storage-<date>.json
    .venv/bin/python benchmarks/storage.py --n 24 --turns 20 --families budget_approval stock_alert

Workload: the oracle (`oracle/<family>`) runs on val/test instances under the baseline harness with
`Limits(max_turns=turns)`; trajectories that reach exactly `turns` turns are kept (real messages, tool calls
and tool results). Token ids are what the vLLM server with the tiny model reports for such a conversation:
each turn's prompt = the tiny model's chat template over that turn's exact view (`model_messages(i)`) and
tools, tokenized; the completion = the reply as the template renders it, up to and including <|im_end|>.
Two harnesses: the baseline (the whole history every turn) and the baseline with a context window
(`keep_last_turns=4`, so prompts are rewritten every turn once the window is full).

Version 1 is rebuilt from the same trajectories exactly as its writer stored them (the previous
`agents/tables/trajectories.py`: 21 columns, `record_json` = the trajectory JSON with `prompt_token_ids` per
turn). Version 2 is `write_trajectories` today. Both files hold all trajectories of a run of the benchmark,
like one evaluation chunk. The oracle has no logprobs: version 2 is measured without them (the same
information as version 1) and with one float64 per completion token added (seeded random values, as
incompressible as real ones), the cost of keeping them.

Besides the files as written (polars' default zstd) it reports the same tables written uncompressed (what
grows with the square of the turns before a compressor finds the repeats), and what reading costs: the prompt ids a reader holds per trajectory, the
trajectory JSON size (what crosses Ray from an actor), and the time and Python memory (tracemalloc) to load
the file. Version 1 is timed as Parquet read + `json.loads` of every record only (its reader also validated
the records with pydantic, so that figure is a lower bound); version 2 as `read_trajectories` (pydantic
records included).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import polars as pl  # noqa: E402

import tasks  # noqa: E402
from agents.jobs import Limits  # noqa: E402
from agents.records import ModelRole, Trajectory  # noqa: E402
from agents.rollout import run_episode  # noqa: E402
from agents.token_ids import encode_prompt, next_base  # noqa: E402
from agents.tables.trajectories import (  # noqa: E402
    read_trajectories, to_frame, to_turn_frame, turns_path, write_trajectories)
from harness import ContextPolicy, Harness, baseline  # noqa: E402

sys.path.append(str(REPO / "benchmarks"))
from results_io import commit  # noqa: E402

V1_SCHEMA = {  # the version-1 table (agents/tables/trajectories.py before schema_version 2)
    "id": pl.String(), "instance_id": pl.String(), "family": pl.String(), "split": pl.String(),
    "difficulty": pl.String(), "harness_id": pl.String(), "model_id": pl.String(), "seed": pl.Int64(),
    "tag": pl.String(), "stop_reason": pl.String(), "score": pl.Float64(), "passed": pl.Boolean(),
    "n_turns": pl.Int64(), "n_tool_calls": pl.Int64(), "n_malformed_tool_calls": pl.Int64(),
    "prompt_tokens": pl.Int64(), "completion_tokens": pl.Int64(), "cost_usd": pl.Float64(), "wall_s": pl.Float64(),
    "error": pl.String(), "record_json": pl.String(),
}
V2_ONLY_TURN_FIELDS = ("prompt_ids_reused", "prompt_ids_added", "prompt_ids_copy", "finish_reason", "logprobs", "context_messages", "context_cut")


async def oracle_trajectories(families: list[str], harness_of, n: int, turns: int) -> list[Trajectory]:
    """Up to `n` oracle trajectories of exactly `turns` turns, round-robin over the families."""
    pools = {f: [i for s in ("val", "test") for i in tasks.instances(f, s)] for f in families}
    out: list[Trajectory] = []
    while len(out) < n and any(pools.values()):
        for f in families:
            if not pools[f] or len(out) >= n:
                continue
            inst = pools[f].pop(0)
            env = tasks.make_env(inst)
            try:
                traj = await run_episode(ModelRole(model=f"oracle/{f}"), harness_of(f), env, seed=0,
                                         limits=Limits(max_turns=turns))
            finally:
                env.close()
            if len(traj.turns) == turns:
                out.append(traj)
    return out


def with_token_ids(traj: Trajectory, tok, rng: random.Random | None) -> Trajectory:
    """The trajectory with the ids the tiny model's server would report (and logprobs when `rng` is given)."""
    base: list[int] = []
    turns = []
    for i, t in enumerate(traj.turns):
        view = traj.model_messages(i)
        prompt_text = tok.apply_chat_template(view, tools=traj.tools, add_generation_prompt=True, tokenize=False)
        full_text = tok.apply_chat_template([*view, t.assistant], tools=traj.tools, tokenize=False)
        if not full_text.startswith(prompt_text):
            raise RuntimeError(f"turn {i}: the template is not prefix-stable here")
        prompt = tok.encode(prompt_text, add_special_tokens=False)
        completion = tok.encode(full_text[len(prompt_text):].rstrip("\n"), add_special_tokens=False)
        reused, added, copy = encode_prompt(base, prompt)
        base = next_base(prompt, completion)
        turns.append(t.model_copy(update={
            "prompt_ids_reused": reused, "prompt_ids_added": added, "prompt_ids_copy": copy, "completion_token_ids": completion,
            "prompt_tokens": len(prompt), "completion_tokens": len(completion),
            "logprobs": [-abs(rng.gauss(0, 1.5)) for _ in completion] if rng else None}))
    return traj.model_copy(update={"turns": turns})


def v1_row(traj: Trajectory) -> dict[str, object]:
    data = json.loads(traj.model_dump_json())
    for turn, ids in zip(data["turns"], traj.token_ids(), strict=True):
        for k in V2_ONLY_TURN_FIELDS:
            turn.pop(k)
        turn["prompt_token_ids"] = None if ids is None else ids[0]
    data.pop("prefix_turns")
    t = traj
    return {
        "id": t.id, "instance_id": t.instance.id, "family": t.family, "split": t.instance.split,
        "difficulty": t.instance.difficulty, "harness_id": t.harness_id, "model_id": t.model_id, "seed": t.seed,
        "tag": t.tag, "stop_reason": t.stop_reason, "score": t.score, "passed": t.passed, "n_turns": len(t.turns),
        "n_tool_calls": sum(len(x.tool_calls) for x in t.turns),
        "n_malformed_tool_calls": sum(x.malformed_tool_calls for x in t.turns),
        "prompt_tokens": sum(x.prompt_tokens for x in t.turns), "completion_tokens": sum(x.completion_tokens for x in t.turns),
        "cost_usd": t.cost_usd, "wall_s": t.wall_s, "error": t.error, "record_json": json.dumps(data),
    }


def load_cost(load) -> tuple[float, int]:
    """(seconds, bytes of Python memory held by the result) of one `load()` (median of 3 timings)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        load()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    result = load()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del result
    return sorted(times)[1], held


def measure(trajs: list[Trajectory], with_logprobs: list[Trajectory], out: Path) -> dict[str, object]:
    v1 = out / "v1.parquet"
    v1_frame = pl.DataFrame([v1_row(t) for t in trajs], schema=V1_SCHEMA)
    v1_frame.write_parquet(v1)
    raw = {"v1": v1_frame, "v2_trajectories": to_frame(trajs), "v2_turns": to_turn_frame(trajs)}
    for name, frame in raw.items():
        frame.write_parquet(out / f"raw-{name}.parquet", compression="uncompressed")
    raw_bytes = {name: (out / f"raw-{name}.parquet").stat().st_size for name in raw}
    v2 = write_trajectories(out / "v2.parquet", trajs)
    v2lp = write_trajectories(out / "v2lp.parquet", with_logprobs)
    n = len(trajs)
    size = {"v1": v1.stat().st_size, "v2_trajectories": v2.stat().st_size, "v2_turns": turns_path(v2).stat().st_size,
            "v2_logprobs": v2lp.stat().st_size + turns_path(v2lp).stat().st_size}
    v2_total = size["v2_trajectories"] + size["v2_turns"]
    prompts = [len(ids[0]) for t in trajs for ids in t.token_ids() if ids]
    v1_s, v1_mem = load_cost(lambda: [json.loads(r) for r in pl.read_parquet(v1)["record_json"]])
    v2_s, v2_mem = load_cost(lambda: read_trajectories(v2))
    return {
        "n_trajectories": n, "turns": len(trajs[0].turns), "families": sorted({t.family for t in trajs}),
        "mean_prompt_tokens_per_turn": round(sum(prompts) / len(prompts), 1),
        "stored_prompt_ids_per_trajectory_v1": sum(prompts) / n,
        "stored_prompt_ids_per_trajectory_v2": sum(len(x.prompt_ids_added or []) for t in trajs for x in t.turns) / n,
        "file_bytes": size,
        "bytes_per_trajectory_v1": size["v1"] / n, "bytes_per_trajectory_v2": v2_total / n,
        "bytes_per_trajectory_v2_with_logprobs": size["v2_logprobs"] / n,
        "ratio_v1_over_v2": round(size["v1"] / v2_total, 2),
        "ratio_v1_over_v2_with_logprobs": round(size["v1"] / size["v2_logprobs"], 2),
        "uncompressed_file_bytes": raw_bytes,
        "uncompressed_bytes_per_trajectory_v1": raw_bytes["v1"] / n,
        "uncompressed_bytes_per_trajectory_v2": (raw_bytes["v2_trajectories"] + raw_bytes["v2_turns"]) / n,
        "uncompressed_ratio_v1_over_v2": round(raw_bytes["v1"] / (raw_bytes["v2_trajectories"] + raw_bytes["v2_turns"]), 2),
        "json_bytes_per_trajectory_v1": sum(len(v1_row(t)["record_json"]) for t in trajs) / n,  # type: ignore[arg-type]
        "json_bytes_per_trajectory_v2": sum(len(t.model_dump_json()) for t in trajs) / n,
        "load_ms_per_trajectory_v1_json_only": round(1000 * v1_s / n, 2),
        "load_ms_per_trajectory_v2": round(1000 * v2_s / n, 2),
        "loaded_python_bytes_per_trajectory_v1": v1_mem / n, "loaded_python_bytes_per_trajectory_v2": v2_mem / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=12, help="trajectories per harness variant")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--families", nargs="+", default=["budget_approval", "stock_alert"])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(REPO / ".cache" / "tiny-model"))
    variants = {
        "baseline": baseline,
        "window4": lambda f: baseline(f).model_copy(update={"context": ContextPolicy(keep_last_turns=4)}),
    }
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, harness_of in variants.items():
            raw = asyncio.run(oracle_trajectories(args.families, harness_of, args.n, args.turns))
            if not raw:
                raise SystemExit(f"no oracle trajectory of {args.turns} turns in {args.families}")
            trajs = [with_token_ids(t, tok, None) for t in raw]
            lp = [with_token_ids(t, tok, random.Random(i)) for i, t in enumerate(raw)]
            (Path(tmp) / name).mkdir()
            results[name] = measure(trajs, lp, Path(tmp) / name)
            r = results[name]
            print(f"{name}: {r['n_trajectories']} x {r['turns']}-turn trajectories ({', '.join(r['families'])}), "  # type: ignore[arg-type]
                  f"{r['mean_prompt_tokens_per_turn']} prompt tokens/turn | v1 {r['bytes_per_trajectory_v1']:.0f} B | "
                  f"v2 {r['bytes_per_trajectory_v2']:.0f} B (x{r['ratio_v1_over_v2']} smaller) | "
                  f"v2 + logprobs {r['bytes_per_trajectory_v2_with_logprobs']:.0f} B (x{r['ratio_v1_over_v2_with_logprobs']})")
            print(f"    uncompressed Parquet: v1 {r['uncompressed_bytes_per_trajectory_v1']:.0f} B | "
                  f"v2 {r['uncompressed_bytes_per_trajectory_v2']:.0f} B (x{r['uncompressed_ratio_v1_over_v2']} smaller)")
            print(f"    prompt ids held {r['stored_prompt_ids_per_trajectory_v1']:.0f} -> {r['stored_prompt_ids_per_trajectory_v2']:.0f} | "
                  f"JSON {r['json_bytes_per_trajectory_v1']:.0f} -> {r['json_bytes_per_trajectory_v2']:.0f} B | "
                  f"load {r['load_ms_per_trajectory_v1_json_only']} ms (json only) -> {r['load_ms_per_trajectory_v2']} ms | "
                  f"memory {r['loaded_python_bytes_per_trajectory_v1'] / 1e6:.2f} -> "
                  f"{r['loaded_python_bytes_per_trajectory_v2'] / 1e6:.2f} MB per trajectory")
    record = {"benchmark": "storage", "date": dt.date.today().isoformat(), "commit": commit(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "python": platform.python_version(), "polars": pl.__version__,
              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"storage-{record['date']}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"raw results: {path}")


if __name__ == "__main__":
    main()
