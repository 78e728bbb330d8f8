"""Does a seeded request sample the same tokens whatever else the vLLM CPU server is decoding beside it?

    .venv/bin/python benchmarks/seed_determinism.py                          # M1 (deploy/micro1), 12 prompts
    .venv/bin/python benchmarks/seed_determinism.py --model deploy/micro --prompts 24 --beside 24

Every paired comparison of the round (M_t h* against h0, an arm against M_t, the search's child against its
parent) samples each (instance, seed, turn) with the same request seed on both sides, so that the two sides share
their random numbers. That holds only if a seeded request's tokens depend on its seed alone, not on the batch it
was decoded in. This script measures it: `--prompts` first-turn prompts (a round's first turn: the baseline
harness's system prompt and tools, the instruction of a test instance, through the model's chat template), each
with its own seed, T=0.7, `--new-tokens` tokens, sent

  (a) one at a time, twice (is the server repeatable at all?), and
  (b) all at once with `--beside` other seeded requests in flight (the round's situation: 24-32 rollouts at once).

It prints how many prompts came out identical in (a) and between (a) and (b), and where the first difference
starts; the raw JSON goes to benchmarks/results/. Nothing here is a timed assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from decode_limit import prompts  # noqa: E402
from results_io import save_results  # noqa: E402

MICRO1 = REPO / "deploy" / "micro1"


async def _sample(api_base: str, name: str, batch: list[tuple[list[int], int]], new_tokens: int) -> list[list[int]]:
    """The token ids each (prompt, seed) sampled, every request of `batch` in flight at once."""
    import httpx

    async with httpx.AsyncClient(base_url=api_base, timeout=900,
                                 limits=httpx.Limits(max_connections=max(1, len(batch)))) as client:
        async def one(prompt: list[int], seed: int) -> list[int]:
            body = {"model": name, "prompt": prompt, "max_tokens": new_tokens, "temperature": 0.7, "seed": seed,
                    "return_token_ids": True}
            r = await client.post("/completions", json=body)
            r.raise_for_status()
            return list(r.json()["choices"][0]["token_ids"])

        return list(await asyncio.gather(*(one(p, s) for p, s in batch)))


def _first_difference(a: list[int], b: list[int]) -> int | None:
    """The index of the first token where a and b differ (a length difference counts), None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _compare(left: list[list[int]], right: list[list[int]]) -> dict[str, Any]:
    firsts = [_first_difference(a, b) for a, b in zip(left, right)]
    differ = [f for f in firsts if f is not None]
    return {"identical": len(firsts) - len(differ), "of": len(firsts), "first_difference_at": differ}


def measure(model_dir: Path, n_prompts: int, beside: int, new_tokens: int) -> dict[str, Any]:
    from deploy.vllm_server import ServeSpec, free_port, start_server, stop_server

    ids = prompts(model_dir, n_prompts + beside)
    mine = [(p, 7_000 + i) for i, p in enumerate(ids[:n_prompts])]
    others = [(p, 9_000 + i) for i, p in enumerate(ids[n_prompts:])]
    # the round's server settings (deploy/configs/local.yaml: LoRA on, rank 16, the default window), which also
    # finds the compiled model those servers left in vLLM's cache
    spec = ServeSpec(model=str(model_dir), name="student", port=free_port(), enable_lora=True, max_lora_rank=16)
    state = Path(tempfile.mkdtemp(prefix="seed-determinism-"))
    handle = start_server(spec, state_dir=state, ready_timeout_s=1800)  # a first compile on a busy machine
    try:
        alone = [asyncio.run(_sample(handle.api_base, spec.name, [job], new_tokens))[0] for job in mine]
        again = [asyncio.run(_sample(handle.api_base, spec.name, [job], new_tokens))[0] for job in mine]
        batched = asyncio.run(_sample(handle.api_base, spec.name, mine + others, new_tokens))[:n_prompts]
    finally:
        stop_server(spec.port, state_dir=state)
    return {"prompt_tokens": [len(p) for p, _ in mine], "new_tokens": new_tokens, "beside": beside,
            "alone_twice": _compare(alone, again), "alone_vs_batched": _compare(alone, batched),
            "load_avg": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=MICRO1, help="Model directory (default: M1, deploy/micro1).")
    ap.add_argument("--prompts", type=int, default=12, help="Seeded prompts compared (first turns of test instances).")
    ap.add_argument("--beside", type=int, default=12, help="Other seeded requests in flight during (b).")
    ap.add_argument("--new-tokens", type=int, default=64, help="Tokens sampled per request (T=0.7).")
    args = ap.parse_args()
    res = measure(args.model, args.prompts, args.beside, args.new_tokens)
    for label, key in (("alone, twice", "alone_twice"), (f"alone vs with {args.beside} beside", "alone_vs_batched")):
        c = res[key]
        where = f"; first differing token at {sorted(c['first_difference_at'])}" if c["first_difference_at"] else ""
        print(f"{label}: {c['identical']} of {c['of']} identical{where}")
    print(f"saved {save_results('seed_determinism', res, args)}")


if __name__ == "__main__":
    main()
