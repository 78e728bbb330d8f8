"""`coevo doctor`: read the student's model and the machine (or the GPUs assumed), refuse what would fail later.

    coevo doctor --config deploy/configs/gpu_paper.yaml --assume-gpus 8x141GB
    coevo doctor --config deploy/configs/gpu_dense.yaml --weights /copy/of/Qwen3-8B-config-files

Prints one line per check (ok / finding / REFUSED: the key and the fix; flows/doctor.py lists the checks);
exit status 1 when something is refused. `coevo run --dry-run` and every run's start make the same checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from flows.cli.options import fail
from flows.config import ConfigError, RunConfig, load_config, parse_config, preflight


def with_weights(cfg: RunConfig, weights: Path) -> RunConfig:
    """The config reading the student's model from `weights` (its servers and the round's or training's base)."""
    data = cfg.model_dump(mode="json")
    old = {data["round"]["student_weights"]} if data.get("round") else set()
    old |= {data["training"]["base_model"]} if data.get("training") else set()
    for s in data["servers"]:
        if s["model"] in old or not old:
            s["model"] = str(weights)
    if data.get("round"):
        data["round"]["student_weights"] = str(weights)
    if data.get("training"):
        data["training"]["base_model"] = str(weights)
    return parse_config(data, "config (--weights)")


def doctor(
    config: Annotated[Path, typer.Option(help="Run config YAML.")],
    assume_gpus: Annotated[Optional[str], typer.Option(help="Check against these GPUs instead of the ones found "
                                                            "here: COUNTxMEMORY, e.g. 8x141GB.")] = None,
    pass_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="The student's pass rate on the train split "
                                                                    "the correction yield is estimated at (the "
                                                                    "paper's h*: 0.78).")] = 0.78,
    keep_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="The share of failing samples whose "
                                                                    "correction the keep rule keeps (1.0: every "
                                                                    "one, an upper bound; the M1 exploration kept "
                                                                    "58 of 222, 0.26: docs/results.md).")] = 1.0,
    weights: Annotated[Optional[Path], typer.Option(help="Read the student's config.json and tokenizer from this "
                                                         "directory instead of the config's (e.g. a copy of its "
                                                         "small files on a machine without the weights).")] = None,
) -> None:
    """Preflight: the model's window and rope scaling, the chat template, LoRA targets, API roles, the correction
    yield and the GPUs; one line each, exit 1 on a refusal."""
    from flows.doctor import detect_gpus, diagnose, parse_gpus

    root = Path.cwd()
    try:
        cfg = load_config(config)
        cfg = with_weights(cfg, weights.resolve()) if weights else cfg
        gpus = parse_gpus(assume_gpus) if assume_gpus else detect_gpus()
    except ConfigError as e:
        fail(f"config error: {e}")
    lines, refused = [], 0
    try:
        preflight(cfg, root, model_checks=False)
    except ConfigError as e:
        lines += [f"REFUSED {line}" for line in str(e).splitlines()]
        refused += len(lines)
    report = diagnose(cfg, root, gpus, pass_rate, keep_rate=keep_rate)
    lines += report.lines()
    for line in lines:
        typer.echo(line)
    refused += len(report.refused)
    typer.echo(f"doctor: {refused} refused, {sum(f.level == 'finding' for f in report.findings)} finding(s), "
               f"{sum(f.level == 'ok' for f in report.findings)} ok ({config})")
    if refused:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
