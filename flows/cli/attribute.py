"""`coevo attribute ...`: why did these rollouts fail? One category of the failure ontology per failing rollout.

    coevo attribute --trajectories runs/x --attributor heuristic --out runs/x/attribution
    coevo attribute --trajectories runs/x --attributor judge:hosted_vllm/judge --api-base http://127.0.0.1:8000/v1 \\
        --out runs/x/attribution-judge
    coevo attribute --trajectories runs/x --attributor judge:openai/gpt-4.1 --api-key-env OPENAI_API_KEY --out DIR

Reads every trajectory table under --trajectories; writes DIR/attributions.parquet, DIR/composition.md (+ .png)
and, when the trajectories carry simulation ground truth (the flawed student), DIR/accuracy.md with the
confusion matrix. Attributors only ever see `Trajectory.view()`.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from flows.cli.options import existing_path, read_trajectory_option

console = Console()



def _attributor(spec: str, api_base: str | None, api_key_env: str | None, max_tokens: int):  # -> Attributor
    from analysis.attribution import make_attributor, parse_spec  # lazy imports: fast CLI start

    try:
        name, _ = parse_spec(spec)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--attributor") from None
    if name != "judge":
        if api_key_env:
            raise typer.BadParameter("only a judge calls a model; drop it or use --attributor judge:MODEL",
                                     param_hint="--api-key-env")
        return make_attributor(spec)
    if api_key_env and not os.environ.get(api_key_env):
        raise typer.BadParameter(f"environment variable {api_key_env} is not set", param_hint="--api-key-env")
    return make_attributor(spec, api_base=api_base, api_key_env=api_key_env, max_tokens=max_tokens)


def _summary(frame) -> Table:  # frame: the attribution table with a `pair` column
    table = Table(title="failing rollouts per category")
    table.add_column("pair")
    table.add_column("category")
    table.add_column("rollouts", justify="right")
    for row in frame.group_by("pair", "category").len().sort("pair", "category").iter_rows(named=True):
        table.add_row(row["pair"], row["category"], str(row["len"]))
    return table


def attribute(
    trajectories: Annotated[Path, typer.Option(help="A trajectory Parquet file or a directory of them.")],
    out: Annotated[Path, typer.Option(help="Output directory (attributions.parquet, composition.md, accuracy.md).")],
    attributor: Annotated[str, typer.Option(help="'heuristic' (offline rules) or 'judge:MODEL' (any LiteLLM model).")] = "heuristic",
    api_base: Annotated[Optional[str], typer.Option(help="Server URL ending in /v1 for a hosted_vllm judge.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(
        help="Environment variable holding the judge's API key (the key itself never goes on the command line).")] = None,
    max_tokens: Annotated[int, typer.Option(min=16, help="Judge answer token limit.")] = 512,
    concurrency: Annotated[int, typer.Option(min=1, help="Trajectories attributed at once (judge calls in flight).")] = 4,
    n_boot: Annotated[int, typer.Option(min=100, help="Bootstrap draws for the composition CIs.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
) -> None:
    """Attribute every failing rollout to a failure category and write the composition per (model, harness) pair."""
    from analysis.attribution.batch import attribute_batch, write_batch
    from analysis.attribution.measure import accuracy_markdown

    existing_path(trajectories, "--trajectories")
    chosen = _attributor(attributor, api_base, api_key_env, max_tokens)
    trajs = read_trajectory_option(trajectories, "--trajectories")
    batch = asyncio.run(attribute_batch(trajs, chosen, concurrency=concurrency))
    paths = write_batch(batch, out, random.Random(seed), n_boot=n_boot)
    console.print(_summary(batch.frame))
    if batch.accuracy is not None:
        console.print(accuracy_markdown(batch.accuracy))
    console.print(f"{len(trajs)} rollouts, {batch.frame.height} failing; wrote " + ", ".join(str(p) for p in paths.values()))


def register(app: typer.Typer) -> None:
    app.command("attribute")(attribute)
