"""`coevo rollout ...`: run a model under a harness on the first N instances of a split, K seeds each.

    coevo rollout --model 'oracle/{family}' --harness baseline --family all --split val --n 5 --out runs/x
    coevo rollout --model hosted_vllm/tiny --api-base http://127.0.0.1:8111/v1 --family stock_alert \\
        --split val --n 4 --seeds 2 --max-turns 5 --out runs/tiny

Writes DIR/trajectories.parquet and prints the success rate per family.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from agents.records import ModelRole, Trajectory

console = Console()
FAMILY_PLACEHOLDER = "{family}"


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


def _harness_for(spec: str, family: str):  # -> Harness (imported lazily: the CLI must start fast)
    import harness

    if spec == "baseline":
        return harness.baseline(family)
    path = Path(spec)
    if not path.exists():
        raise typer.BadParameter(f"{spec} is neither 'baseline' nor an existing harness file", param_hint="--harness")
    return harness.Harness.load(path)


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


def rollout(
    model: Annotated[str, typer.Option(help="LiteLLM model string; '{family}' is filled per instance, e.g. 'oracle/{family}'.")],
    out: Annotated[Path, typer.Option(help="Output directory; trajectories go to DIR/trajectories.parquet.")],
    api_base: Annotated[Optional[list[str]], typer.Option(help="Server URL ending in /v1; repeat to route over several replicas.")] = None,
    harness_spec: Annotated[str, typer.Option("--harness", help="'baseline' (h0 per family) or a harness YAML/JSON file.")] = "baseline",
    family: Annotated[Optional[list[str]], typer.Option(help="Task family; repeat for several, or 'all'.")] = None,
    split: Annotated[str, typer.Option(help="train | val | test.")] = "val",
    n: Annotated[int, typer.Option(min=1, help="First N instances of the split (by index) per family.")] = 5,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per instance (0..K-1): N x K rollouts per family.")] = 1,
    actors: Annotated[int, typer.Option(min=1, help="Ray actors (each runs many episodes concurrently).")] = 2,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight per model server.")] = 8,
    max_turns: Annotated[int, typer.Option(min=1, help="Turn limit per episode.")] = 30,
    max_tokens: Annotated[int, typer.Option(min=1, help="Generated tokens per turn.")] = 512,
    temperature: Annotated[float, typer.Option(min=0.0, max=2.0, help="Sampling temperature (each turn is seeded "
                                                                      "from the episode seed).")] = 0.0,
    wall_s: Annotated[float, typer.Option(help="Wall-clock limit per episode (seconds).")] = 600.0,
    tool_choice: Annotated[Optional[str], typer.Option(
        help="auto | required | none, or a tool's name to force that tool (default: the server's).")] = None,
    strict_tools: Annotated[bool, typer.Option(
        help="Send tool schemas with strict: true; vLLM then constrains the call arguments to them.")] = False,
    tag: Annotated[str, typer.Option(help="Label stored with each trajectory (part of its id).")] = "rollout",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: a local Ray).")] = None,
) -> None:
    """Run N instances x K seeds per family through the Ray rollout pool and report success per family."""
    import tasks
    from agents.jobs import Limits, RolloutJob
    from agents.pool import RolloutPool
    from agents.trajectory_table import write_trajectories

    if split not in ("train", "val", "test"):
        raise typer.BadParameter(f"'{split}' is not a split; use train, val or test", param_hint="--split")
    urls = list(api_base or [])
    limits = Limits(max_turns=max_turns, wall_s=wall_s, max_tokens_per_turn=max_tokens)
    jobs: list[RolloutJob] = []
    routes: dict[str, list[str]] = {}
    for fam in _families(list(family or [])):
        model_str = model.replace(FAMILY_PLACEHOLDER, fam)
        # One server: it is part of the model's identity. Several: replicas of one model, routed per episode.
        role = ModelRole(model=model_str, api_base=urls[0] if len(urls) == 1 else None, max_tokens=max_tokens,
                         temperature=temperature, strict_tools=strict_tools)
        if len(urls) > 1:
            routes[model_str] = urls
        h = _harness_for(harness_spec, fam)
        for inst in tasks.instances(fam, split)[:n]:  # type: ignore[arg-type]
            jobs += [RolloutJob(instance=inst, harness=h, model=role, seed=s, limits=limits, tag=tag,
                                tool_choice=_tool_choice(tool_choice)) for s in range(seeds)]
    if not jobs:
        console.print("[red]no jobs:[/] no family selected has instances in that split")
        raise typer.Exit(1)
    with RolloutPool(actors, address=address, concurrency_per_server=concurrency, api_bases=routes or None) as pool:
        trajectories = pool.run(jobs, progress=True)
        stats = pool.stats
    path = write_trajectories(out / "trajectories.parquet", trajectories)
    console.print(success_table(trajectories))
    console.print(f"wrote {len(trajectories)} trajectories to {path}  "
                  f"(actor deaths {stats.actor_deaths}, retries {stats.retries}, gave up {stats.gave_up})")


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
