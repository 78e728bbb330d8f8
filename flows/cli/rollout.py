"""`coevo rollout ...`: run a model under a harness on the first N instances of a split, K seeds each.

    coevo rollout --model 'oracle/{family}' --harness baseline --family all --split val --n 5 --out runs/x
    coevo rollout --model hosted_vllm/tiny --api-base http://127.0.0.1:8111/v1 --family stock_alert \\
        --split val --n 4 --seeds 2 --max-turns 5 --out runs/tiny

Writes DIR/trajectories.parquet and prints the success rate per family. The jobs come from flows/plan.py
(the options become a `RolloutSpec`); the episode limits are the fields of `agents.rollout.Limits` (one option
each, defaults and help from the record; --max-tokens is --max-tokens-per-turn).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agents.records import ModelRole, Trajectory
from agents.jobs import Limits
from flows.cli.options import check_harness, fail, model_options, writable_dir

if TYPE_CHECKING:
    from flows.plan import RolloutSpec

console = Console()


def _families(requested: list[str]) -> list[str]:
    import tasks

    available = tasks.families()
    if not requested or "all" in requested:
        return available
    unknown = [f for f in requested if f not in available]
    if unknown:
        raise typer.BadParameter(f"unknown or not installed: {', '.join(unknown)}; available: {', '.join(available)}",
                                 param_hint="--family")
    return list(dict.fromkeys(requested))


def _tool_choice(value: str | None) -> str | dict[str, object] | None:
    """'auto' | 'required' | 'none' pass through; any other value names the one tool every turn must call."""
    if value is None or value in ("auto", "required", "none"):
        return value
    return {"type": "function", "function": {"name": value}}


def success_table(trajectories: list[Trajectory]) -> Table:
    """Per family: rollouts, passed, success rate, mean score, errored episodes; then the total."""
    by_family: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_family[t.family].append(t)
    table = Table(title="success rate per family")
    for col in ("family", "rollouts", "passed", "success", "mean score", "errors"):
        table.add_column(col, justify="left" if col == "family" else "right")

    def row(name: str, ts: list[Trajectory]) -> list[str]:
        n = len(ts)
        passed = sum(t.passed for t in ts)
        errors = sum(t.stop_reason == "error" for t in ts)
        return [name, str(n), str(passed), f"{100.0 * passed / n:.1f}%", f"{sum(t.score for t in ts) / n:.3f}", str(errors)]

    for family in sorted(by_family):
        table.add_row(*row(family, by_family[family]))
    if len(by_family) > 1:
        table.add_row(*row("all", trajectories), style="bold")
    return table


# RolloutSpec field -> the option that sets it (for error messages)
_OPTION_OF = {"families": "--family", "n_instances": "--n", "harness": "--harness", "model": "--model",
              "tool_choice": "--tool-choice", "split": "--split", "seeds": "--seeds", "tag": "--tag"}


def _spec(model: ModelRole, harness_spec: str, families: list[str], split: str, n: int, seeds: int, limits: Limits,
          tag: str, tool_choice: str | None) -> RolloutSpec:
    """The command's options as a rollout plan spec (validated: a bad value names its option)."""
    from flows.plan import RolloutSpec

    check_harness(harness_spec, "--harness")
    try:
        return RolloutSpec(name=tag, model=model, harness=harness_spec, families=families, split=split,  # type: ignore[arg-type]
                           n_instances=n, seeds=seeds, limits=limits, tag=tag, tool_choice=_tool_choice(tool_choice))
    except ValidationError as e:
        errors = [f"{_OPTION_OF.get(str(err['loc'][0]), err['loc'][0]) if err['loc'] else ''}: {err['msg']}"
                  for err in e.errors()]
        raise typer.BadParameter("; ".join(errors)) from None


@model_options(limits=Limits, aliases={"max_tokens_per_turn": ("--max-tokens",)})
def rollout(
    model: Annotated[str, typer.Option(help="LiteLLM model string; '{family}' is filled per instance, e.g. 'oracle/{family}'.")],
    out: Annotated[Path, typer.Option(help="Output directory; trajectories go to DIR/trajectories.parquet.")],
    limits: Limits,
    api_base: Annotated[Optional[list[str]], typer.Option(help="Server URL ending in /v1; repeat to route over several replicas.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(
        help="Environment variable holding the model's key (read at call time; never a key on the command line).")] = None,
    harness_spec: Annotated[str, typer.Option("--harness", help="'baseline' (h0 per family) or a harness YAML/JSON file.")] = "baseline",
    family: Annotated[Optional[list[str]], typer.Option(help="Task family; repeat for several, or 'all'.")] = None,
    split: Annotated[str, typer.Option(help="train | val | test | pretrain.")] = "val",
    n: Annotated[int, typer.Option(help="First N instances of the split (by index) per family.")] = 5,
    seeds: Annotated[int, typer.Option(help="Seeds per instance (0..K-1): N x K rollouts per family.")] = 1,
    actors: Annotated[int, typer.Option(min=1, help="Ray actors (each runs many episodes concurrently).")] = 2,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight per model server.")] = 8,
    temperature: Annotated[float, typer.Option(min=0.0, max=2.0, help="Sampling temperature (each turn is seeded "
                                                                      "from the episode seed).")] = 0.0,
    tool_choice: Annotated[Optional[str], typer.Option(
        help="auto | required | none, or a tool's name to force that tool (default: the server's).")] = None,
    strict_tools: Annotated[bool, typer.Option(
        help="Send tool schemas with strict: true; vLLM then constrains the call arguments to them.")] = False,
    tag: Annotated[str, typer.Option(help="Label stored with each trajectory (part of its id).")] = "rollout",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: a local Ray).")] = None,
) -> None:
    """Run N instances x K seeds per family through the Ray rollout pool and report success per family.

    The jobs are planned by flows/plan.py, the same planning `coevo run` uses for an evaluation pair.
    """
    from agents.pool.driver import RolloutPool
    from agents.tables.trajectories import write_trajectories
    from flows.plan import plan

    urls = list(api_base or [])
    writable_dir(out, "--out")
    # One server: it is part of the model's identity. Several: replicas of one model, routed per episode.
    try:
        role = ModelRole(model=model, api_base=urls[0] if len(urls) == 1 else None, api_key_env=api_key_env,
                         max_tokens=limits.max_tokens_per_turn, temperature=temperature, strict_tools=strict_tools)
    except ValidationError as e:
        err = e.errors()[0]
        fail(f"{'--api-key-env' if 'api_key_env' in err['loc'] else '--model'}: "
             f"{err['msg'].removeprefix('Value error, ')}")
    if api_key_env and not os.environ.get(api_key_env):
        fail(f"--api-key-env: environment variable {api_key_env} is not set")
    spec = _spec(role, harness_spec, _families(list(family or [])), split, n, seeds, limits, tag, tool_choice)
    jobs = [job for chunk in plan(spec, Path.cwd()) for job in chunk.jobs]
    routes = {spec.role(f).model: urls for f in spec.families} if len(urls) > 1 else None
    with RolloutPool(actors, address=address, concurrency_per_server=concurrency, api_bases=routes) as pool:
        trajectories = pool.run(jobs, progress=True)
        stats = pool.stats
    path = write_trajectories(out / "trajectories.parquet", trajectories)
    console.print(success_table(trajectories))
    console.print(f"wrote {len(trajectories)} trajectories to {path}  "
                  f"(actor deaths {stats.actor_deaths}, retries {stats.retries}, gave up {stats.gave_up})")


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
