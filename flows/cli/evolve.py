"""`coevo evolve`: the harness search for one family, from the command line.

    coevo evolve --family stock_alert --student 'oracle/{family}' --reflector library --seeds 3 \\
        --budget-rollouts 200 --out runs/evo1
    coevo evolve --family payroll_audit --student hosted_vllm/tiny --api-base http://127.0.0.1:8123/v1 \\
        --reflector llm:hosted_vllm/tiny --reflector-api-base http://127.0.0.1:8123/v1 --budget-rollouts 60 \\
        --out runs/evo2
    coevo evolve ... --out runs/evo1 --resume          # continue a stopped or killed search, no rollout repeated

`--out DIR` is a run directory: the search writes DIR/evolution/<family>/ (h_star.yaml, lineage.jsonl, the
diff, validation_curve.png, summary) and stores its trajectories under DIR/trajectories/evolve/<family>/.
Budgets are per search seed. Strategy flags follow `name` or `name:MODEL`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from flows.cli.options import check_harness, fail, writable_dir
from flows.local import configure_prefect_env

console = Console(soft_wrap=True)


def _tool_choice(value: str | None) -> str | dict[str, object] | None:
    if value is None or value in ("auto", "required", "none"):
        return value
    return {"type": "function", "function": {"name": value}}


def _settings(family: str, student: str, api_base: str | None, reflector: str, reflector_api_base: str | None,
              harness: str, search: dict[str, object], data: dict[str, object],
              keys: tuple[str | None, str | None] = (None, None)):  # -> EvolveSettings; keys: api_key_env names
    from agents.records import ModelRole
    from flows.evolution import EvolveSettings
    from harness.evolution import SearchConfig, parse_strategy

    name, model = parse_strategy(reflector)
    for option, var in zip(("--api-key-env", "--reflector-api-key-env"), keys):
        if var and not os.environ.get(var):
            raise ValueError(f"{option}: environment variable {var} is not set")
    reflector_role = (ModelRole(model=model, api_base=reflector_api_base, api_key_env=keys[1], max_tokens=1024)
                      if name == "llm" else None)
    return EvolveSettings(family=family, student=ModelRole(model=student, api_base=api_base, api_key_env=keys[0],
                                                           max_tokens=int(data.pop("max_tokens")),
                                                           temperature=float(data.pop("temperature"))),
                          reflector=reflector, reflector_role=reflector_role, harness=harness,
                          search=SearchConfig(family=family, **search), **data)


def evolve(
    family: Annotated[str, typer.Option(help="Task family to evolve a harness for.")],
    student: Annotated[str, typer.Option(help="Student model (LiteLLM string); '{family}' is filled, e.g. 'oracle/{family}'.")],
    out: Annotated[Path, typer.Option(help="Run directory (created; the search goes to DIR/evolution/FAMILY).")],
    budget_rollouts: Annotated[int, typer.Option(min=1, help="Evaluations per search seed (GEPA's max_metric_calls).")],
    api_base: Annotated[Optional[str], typer.Option(help="Student server URL ending in /v1.")] = None,
    reflector: Annotated[str, typer.Option(help="library | llm:MODEL (a LiteLLM model string).")] = "library",
    reflector_api_base: Annotated[Optional[str], typer.Option(help="Server URL of an llm:MODEL reflector.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="Environment variable holding the student's key.")] = None,
    reflector_api_key_env: Annotated[Optional[str], typer.Option(
        help="Environment variable holding the llm:MODEL reflector's key.")] = None,
    reflector_prompt_chars: Annotated[int, typer.Option(min=4000, help="Prompt size cap of llm:MODEL (characters).")] = 40_000,
    seeds: Annotated[int, typer.Option(min=1, help="Search seeds; h* is the best validation score over them.")] = 3,
    resume: Annotated[bool, typer.Option(help="Continue the search stored under --out (same settings).")] = False,
    harness: Annotated[str, typer.Option(help="Start harness: 'baseline' (h0) or a harness YAML/JSON file.")] = "baseline",
    minibatch: Annotated[int, typer.Option(min=1, help="Train items per reflection minibatch.")] = 3,
    minibatch_sampler: Annotated[str, typer.Option(
        help="epoch (GEPA's epoch-shuffled minibatches) | informative (weighted toward train instances whose "
             "score the search has seen vary; use with --train-seeds > 1).")] = "epoch",
    proposals: Annotated[int, typer.Option(min=1, help="Proposals per iteration (their rollouts run as one batch).")] = 1,
    train_n: Annotated[Optional[int], typer.Option(min=1, help="First N train instances (default all 20).")] = None,
    train_seeds: Annotated[int, typer.Option(min=1, help="Rollout seeds per train instance.")] = 1,
    val_n: Annotated[int, typer.Option(min=1, max=20, help="First N val instances.")] = 20,
    val_seeds: Annotated[int, typer.Option(min=1, help="Rollout seeds per val instance.")] = 1,
    budget_usd: Annotated[Optional[float], typer.Option(help="Reflector dollars per search seed.")] = None,
    budget_wall_s: Annotated[Optional[float], typer.Option(help="Wall seconds per search seed.")] = None,
    max_edits: Annotated[int, typer.Option(min=1, help="Edits per proposal.")] = 2,
    max_turns: Annotated[int, typer.Option(min=1, help="Turn limit per episode.")] = 30,
    max_tokens: Annotated[int, typer.Option(min=1, help="Generated tokens per student turn.")] = 512,
    temperature: Annotated[float, typer.Option(min=0.0, max=2.0, help="Student sampling temperature.")] = 0.0,
    wall_s: Annotated[float, typer.Option(help="Wall-clock limit per episode (seconds).")] = 600.0,
    tool_choice: Annotated[Optional[str], typer.Option(help="auto | required | none, or a tool name.")] = None,
    actors: Annotated[int, typer.Option(min=1, help="Ray rollout actors.")] = 2,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight per model server.")] = 8,
    ray_address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: a local Ray).")] = None,
) -> None:
    """Evolve a harness for one family (GEPA over typed edits), write h*, its lineage, diff and curve."""
    configure_prefect_env()
    import tasks
    from agents.jobs import Limits
    from flows.store import RunStore

    if family not in tasks.families():
        raise typer.BadParameter(f"unknown family '{family}'; available: {', '.join(tasks.families())}",
                                 param_hint="--family")
    if wall_s <= 0:
        fail(f"--wall-s: must be greater than 0, got {wall_s}")
    check_harness(harness, "--harness")
    search = {"seeds": seeds, "minibatch_size": minibatch, "proposals_per_iteration": proposals,
              "budget_rollouts": budget_rollouts, "minibatch_sampler": minibatch_sampler,
              "budget_reflector_usd": budget_usd, "budget_wall_s": budget_wall_s, "max_edits": max_edits}
    data: dict[str, object] = {"train_instances": train_n, "train_seeds": train_seeds, "val_instances": val_n,
                               "val_seeds": val_seeds, "temperature": temperature,
                               "limits": Limits(max_turns=max_turns, wall_s=wall_s, max_tokens_per_turn=max_tokens),
                               "tool_choice": _tool_choice(tool_choice), "actors": actors,
                               "concurrency_per_server": concurrency, "max_tokens": max_tokens,
                               "reflector_prompt_chars": reflector_prompt_chars}
    try:
        settings = _settings(family, student, api_base, reflector, reflector_api_base, harness, search, data,
                             (api_key_env, reflector_api_key_env))
    except ValueError as e:
        fail(f"bad option: {' '.join(str(e).split())[:500]}")
    out = out.resolve()
    writable_dir(out, "--out")
    if resume and not (out / "state.json").exists():
        fail(f"--resume: {out} holds no run")
    store = RunStore(out.parent, out.name)
    from flows.evolution import evolution_flow

    t0 = time.monotonic()
    try:
        summary = evolution_flow(settings, str(store.root), str(Path.cwd()), resume=resume, ray_address=ray_address)
    except (FileExistsError, ValueError) as e:
        console.print(f"[red]cannot start[/]: {e}")
        raise typer.Exit(2) from None
    except Exception as e:  # the flow's logs have the traceback; say how to continue
        console.print(f"[red]search failed[/]: {type(e).__name__}: {e}")
        console.print(f"finished rollouts are kept; continue with the same command and --resume --out {out}")
        raise typer.Exit(1) from None
    _print(summary, time.monotonic() - t0)


def _print(summary, seconds: float) -> None:  # summary: EvolutionSummary
    s = summary.search
    console.print(f"[bold]{summary.family}[/] ({s.reflector}): h0 {s.h0_val_mean:.3f} -> h* {s.best_val_mean:.3f} "
                  f"(seed {s.best_seed}, harness {s.best_id})")
    for seed in s.seeds:
        c = seed.counts
        console.print(f"  seed {seed.search_seed}: {seed.candidates} candidates, {seed.iterations} iterations, "
                      f"{seed.evaluations} evaluations, proposals {c.get('proposals', 0)} (children "
                      f"{c.get('children', 0)}, failed {c.get('failed_proposals', 0) + c.get('reflector_errors', 0)}), "
                      f"edits rejected {c.get('edits_rejected', 0)}, reflector ${seed.reflector_cost_usd:.4f}")
    console.print(f"accepted edits: {len(summary.accepted_edits)}; rollouts run {s.evaluations_run}, "
                  f"from the cache {s.evaluations_cached}; {seconds:.0f} s")
    console.print(f"h*: {s.out_dir}/h_star.yaml")
    console.print(f"lineage: {s.out_dir}/lineage.jsonl; curve: {summary.curve_png}")


def register(app: typer.Typer) -> None:
    app.command("evolve")(evolve)
