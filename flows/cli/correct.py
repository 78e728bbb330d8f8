"""`coevo correct ...`: the student's failing rollouts -> expert-corrected trajectories (only t* trained).

    coevo correct --trajectories runs/x/student --harness runs/x/hstar.yaml --student 'flawed/{family}@uniform_single' \\
        --expert 'flawed/{family}@expert' --locator counterfactual --selector verifier_replay --n 3 --replays 2 --out runs/x/corr

Reads every trajectory table under --trajectories and corrects the failing ones (a view each). --harness is
'baseline' (h0 per family), a harness file, or a directory of them (one h* per family): each trajectory is
matched to the harness it ran under by content hash. Episodes run in this process (no Ray). Writes, under
--out (a run directory, resumable: a rerun repeats no finished episode):
  trajectories/correction_data/*.parquet   the corrected trajectories (`coevo train --data OUT` trains on them,
                                           their marked turns only)
  datasets/correction_data/corrections.parquet and card.json   the Correction records and the dataset card
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

console = Console()


def _harnesses(spec: str, families: set[str]) -> dict:  # -> {harness id: Harness}
    from harness import baseline
    from harness.program import Harness

    if spec == "baseline":
        return {h.id: h for h in (baseline(f) for f in families)}
    path = Path(spec)
    if not path.exists():
        raise typer.BadParameter(f"{spec} is neither 'baseline' nor an existing harness file or directory",
                                 param_hint="--harness")
    files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json")) if path.is_dir() else [path]
    out = {}
    for f in files:
        try:
            h = Harness.load(f)
        except Exception as e:  # a bad file: name it
            raise typer.BadParameter(f"{f}: not a harness ({type(e).__name__}: {str(e)[:200]})", param_hint="--harness") from None
        out[h.id] = h
    return out


def _check(locator: str, selector: str, trajectories: Path) -> None:
    from correction.locators.base import parse_locator
    from correction.selectors.base import parse_selector

    try:
        parse_locator(locator)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--locator") from None
    try:
        parse_selector(selector)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--selector") from None
    if not trajectories.exists():
        raise typer.BadParameter(f"{trajectories} does not exist", param_hint="--trajectories")


def correct(
    trajectories: Annotated[Path, typer.Option(help="A trajectory Parquet file or a directory of them (the student's rollouts).")],
    student: Annotated[str, typer.Option(help="The student's LiteLLM model string ('{family}' filled per instance).")],
    out: Annotated[Path, typer.Option(help="Output run directory (resumable).")],
    harness_spec: Annotated[str, typer.Option("--harness", help="'baseline', a harness file, or a directory of them.")] = "baseline",
    api_base: Annotated[Optional[str], typer.Option(help="Server URL ending in /v1 for a hosted_vllm student.")] = None,
    expert: Annotated[str, typer.Option(help="The expert that rewrites t*.")] = "flawed/{family}@expert",
    locator: Annotated[str, typer.Option(help="counterfactual | divergence | mle_agent:MODEL.")] = "counterfactual",
    locator_api_base: Annotated[Optional[str], typer.Option(help="Server URL ending in /v1 for a hosted_vllm "
                                                                 "mle_agent model.")] = None,
    locator_expert: Annotated[str, typer.Option(help="The expert of the locator's continuations.")] = "oracle/{family}",
    selector: Annotated[str, typer.Option(help="verifier_replay | judge:MODEL.")] = "verifier_replay",
    judge: Annotated[Optional[str], typer.Option(help="Also rank the candidates with this judge model and "
                                                      "record the selectors' agreement.")] = None,
    judge_api_base: Annotated[Optional[str], typer.Option(help="Server URL ending in /v1 for a hosted_vllm judge.")] = None,
    n: Annotated[int, typer.Option(min=1, help="Expert candidates per t*.")] = 3,
    replays: Annotated[int, typer.Option(min=1, help="Student continuations per candidate.")] = 2,
    mode: Annotated[str, typer.Option(help="single_turn | suffix (repair t*..t*+m when one turn is not enough).")] = "single_turn",
    max_suffix: Annotated[int, typer.Option(min=0, help="Suffix mode: rewrite at most t*..t*+M.")] = 4,
    row_suffix: Annotated[str, typer.Option("--suffix", help="After t* the row holds: none | replay (the student's "
                                            "continuation in the chosen replay) | original (the failing rollout's "
                                            "own turns).")] = "none",
    loss_on: Annotated[str, typer.Option(help="corrected (t* only) | all_student (t* and every student turn kept).")] = "corrected",
    keep: Annotated[str, typer.Option(help="controlled (keep a correction only when its decision replays beat the "
                                           "student's own turn resampled from the same prefix, same seeds) | "
                                           "improved (when its replays beat the failing rollout's score) | "
                                           "any.")] = "controlled",
    allow_split: Annotated[Optional[list[str]], typer.Option(
        help="Also accept rollouts of this split (val/test: measurement only, never train on them).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Correct at most this many failing rollouts.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Failing rollouts corrected at once.")] = 2,
) -> None:
    """Localize t* in each failing rollout, let the expert rewrite only it, select by the verifier, write rows."""
    from agents.records import ModelRole
    from agents.tables.trajectories import read_trajectories
    from flows.round.correct import CorrectionConfig, correct_run
    from flows.store import RunStore

    _check(locator, selector, trajectories)
    if mode not in ("single_turn", "suffix"):
        raise typer.BadParameter(f"unknown mode {mode!r}; use single_turn or suffix", param_hint="--mode")
    try:
        trajs = read_trajectories(trajectories)
    except Exception as e:
        raise typer.BadParameter(f"{trajectories}: {type(e).__name__}: {str(e)[:200]}", param_hint="--trajectories") from None
    failing = [t for t in trajs if not t.passed]
    if not failing:
        raise typer.BadParameter(f"no failing rollouts under {trajectories} ({len(trajs)} read)", param_hint="--trajectories")
    harnesses = _harnesses(harness_spec, {t.family for t in failing})
    unknown = sorted({t.harness_id for t in failing} - set(harnesses))
    if unknown:
        raise typer.BadParameter(f"no harness with id {', '.join(unknown)} (the trajectories' harness) in {harness_spec}",
                                 param_hint="--harness")
    try:
        config = CorrectionConfig(student=ModelRole(model=student, api_base=api_base), expert=ModelRole(model=expert),
                                  locator_expert=ModelRole(model=locator_expert), locator=locator, locator_api_base=locator_api_base, selector=selector,
                                  judge=judge, judge_api_base=judge_api_base, n=n, mode=mode,  # type: ignore[arg-type]
                                  max_suffix=max_suffix, replays=replays, concurrency=concurrency,
                                  suffix=row_suffix, loss_on=loss_on, keep=keep,  # type: ignore[arg-type]
                                  splits=["train", "pretrain", *(allow_split or [])])
    except ValueError as e:
        raise typer.BadParameter(str(e).replace("\n", " ")[:300]) from None
    leaked = sorted({t.instance.split for t in failing} - set(config.splits))
    if leaked:
        raise typer.BadParameter(f"rollouts of split(s) {', '.join(leaked)} would become training rows (leakage); "
                                 "pass --allow-split for a measurement run", param_hint="--trajectories")
    chosen = {t.id for t in failing[:limit]}
    result = correct_run(RunStore(out.parent, out.name), [t for t in trajs if t.passed or t.id in chosen], harnesses, config)
    card = result.card
    console.print(f"{card['corrections']} corrections from {card['sources']} failing rollouts "
                  f"({result.reused} reused); per family: {card['per_family']}; mean t* {card['mean_t_star']}")
    console.print(f"kept / dropped (keep '{keep}') per family and locator: {card['kept']}")
    rate = card["kept_rate"]
    console.print(f"kept {rate['kept']} of {rate['decided']} that reached the keep decision; the rule before the "
                  f"control would have kept {rate['kept_without_control']}")
    console.print(f"episodes run: {result.calls}; wrote {out / 'trajectories'} and {out / 'datasets' / 'correction_data'}")


def register(app: typer.Typer) -> None:
    app.command("correct")(correct)
