"""`coevo dataset build` and `coevo train`: trajectories -> masked dataset -> LoRA adapters (-> a vLLM server).

The training and length options are generated from `training.config.TrainConfig` and `LengthRule` (one
option per field; default and help from the field), so they cannot drift from the run config's.

    coevo dataset build --trajectories runs/x/trajectories/rollout --tokenizer .cache/tiny-model --mask assistant --out D
    coevo train --data D --base .cache/tiny-model --out A --seeds 3 --serve-port 8000 --name student@r1
    coevo train --data runs/x/corr --base .cache/tiny-model --out A     # what `coevo correct --out runs/x/corr` wrote
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from flows.cli.options import existing_path, fail, first_line, model_options, read_trajectory_option, writable_dir
from training.config import LengthRule, TrainConfig

if TYPE_CHECKING:
    from training.lora import TrainSummary

console = Console()
dataset_app = typer.Typer(help="Training datasets: trajectories -> token ids + loss masks.", no_args_is_help=True)

MASK_HELP = "assistant = every assistant turn; turns = the marked turns only (e.g. the corrected t*); last = the final turn."


def _turns(path: Path) -> dict[str, list[int]]:
    """--turns: JSON {trajectory id: [turn, ...]}; anything else is one line naming the option."""
    try:
        data = json.loads(existing_path(path, "--turns", "file").read_text())
        return {str(k): [int(i) for i in v] for k, v in data.items()}
    except (ValueError, TypeError, AttributeError, RecursionError, OSError) as e:
        fail(f"--turns: {path} is not JSON {{trajectory id: [turn, ...]}} ({type(e).__name__}: {first_line(e)})")


def _build(trajectories: Path, tokenizer_dir: Path, mask: str, out: Path, turns_file: Path | None,
           length: LengthRule, chat_template: Path | None) -> Path:
    from training.dataset import build_dataset, load_tokenizer, write_dataset
    from training.render import MASK_MODES

    if mask not in MASK_MODES:
        raise typer.BadParameter(f"--mask must be one of {', '.join(MASK_MODES)}, not {mask!r}")
    existing_path(tokenizer_dir, "--tokenizer", "dir")
    writable_dir(out, "--out")
    turns = _turns(turns_file) if turns_file is not None else None
    trajs = read_trajectory_option(existing_path(trajectories, "--trajectories"), "--trajectories")
    try:
        tok = load_tokenizer(tokenizer_dir, chat_template)
    except (OSError, ValueError) as e:  # no tokenizer files there, or not a tokenizer
        fail(f"--tokenizer: {tokenizer_dir}: {first_line(e)}")
    with console.status(f"rendering {len(trajs)} trajectories"):
        built = build_dataset(trajs, tok, mask=mask, turns=turns, tokenizer_name=str(tokenizer_dir),  # type: ignore[arg-type]
                              length=length)
    write_dataset(built, out)
    s = built.manifest.stats
    table = Table(title=f"dataset {out}")
    for col in ("trajectories", "examples", "tokens", "trained tokens", "max_len", "dropped"):
        table.add_column(col)
    dropped = ", ".join(f"{k}={v}" for k, v in s.dropped.items()) or "0"
    table.add_row(str(s.trajectories), str(s.examples), str(s.tokens), str(s.trained_tokens),
                  f"{s.max_len}{' (raised)' if s.max_len_raised else ''}", dropped)
    console.print(table)
    return out


@dataset_app.command("build")
@model_options(length=LengthRule)
def dataset_build(
    trajectories: Annotated[Path, typer.Option(help="Trajectory Parquet file or directory (from `coevo rollout`).")],
    tokenizer: Annotated[Path, typer.Option(help="Student model directory: its tokenizer and chat template.")],
    out: Annotated[Path, typer.Option(help="Output directory: examples.parquet + manifest.json.")],
    length: LengthRule,
    mask: Annotated[str, typer.Option(help=MASK_HELP)] = "assistant",
    turns: Annotated[Optional[Path], typer.Option(help="JSON {trajectory id: \\[turn, ...]} for --mask turns "
                                                  "(default: turns marked with a 'train_turn' trigger).")] = None,
    chat_template: Annotated[Optional[Path], typer.Option(help="Jinja file overriding the tokenizer's template.")] = None,
) -> None:
    """Render trajectories with the student's chat template into token ids and loss masks."""
    _build(trajectories, tokenizer, mask, out, turns, length, chat_template)


def _correction_rows(data: Path, mask: str | None) -> tuple[Path, str]:
    """`--data` given as a `coevo correct --out` directory: its corrected trajectories (trained on their marked
    turns), not the whole directory (its Correction table and episode cache are no training rows); else as is."""
    from flows.round.correct import STAGE

    if data.name == STAGE and (data / "corrections.parquet").exists():  # the Correction records' own directory
        fail(f"--data: {data} holds Correction records, not training rows; pass the `coevo correct --out` "
             f"directory ({data.parent.parent})")
    if not (data / "datasets" / STAGE).is_dir():
        return data, mask or "assistant"
    rows = data / "trajectories" / STAGE
    if not rows.is_dir():
        fail(f"--data: {data} (a `coevo correct` directory) has no corrected trajectories: see "
             f"{data / 'datasets' / STAGE / 'card.json'}")
    if mask not in (None, "turns"):
        fail(f"--mask {mask}: corrected trajectories train on their marked turns only (--mask turns), never "
             "on the student's failing turns")
    return rows, "turns"


def _serve(summaries: list[TrainSummary], api_base: str, name: str, api_key: str | None) -> None:
    from deploy.vllm_server import load_adapter

    for s in summaries:
        served = name if s.seed == 0 else f"{name}.s{s.seed}"
        load_adapter(api_base, served, s.adapter_dir, api_key=api_key)
        console.print(f"[green]loaded[/] {s.adapter_dir} as {served} on {api_base}")


@model_options(config=TrainConfig, length=LengthRule)
def train(
    data: Annotated[Path, typer.Option(help="A built dataset, a trajectory directory (built with --mask), or the "
                                            "output directory of `coevo correct` (its corrected trajectories).")],
    base: Annotated[Path, typer.Option(help="Base (student) model directory.")],
    out: Annotated[Path, typer.Option(help="Output directory: seed-<s>/ adapter per seed.")],
    config: TrainConfig,
    length: LengthRule,
    mask: Annotated[Optional[str], typer.Option(
        help=MASK_HELP + " Only when --data holds trajectories. Default: assistant; turns for the output "
        "directory of `coevo correct`.")] = None,
    serve_port: Annotated[Optional[int], typer.Option(help="Load the adapters into the vLLM server on this port.")] = None,
    serve_host: Annotated[str, typer.Option(help="Host of that server.")] = "127.0.0.1",
    serve_api_key_env: Annotated[Optional[str], typer.Option(
        help="Environment variable holding that server's key (as given to `coevo serve start --api-key-env`).")] = None,
    name: Annotated[Optional[str], typer.Option(help="Served name of seed 0, e.g. student@r1 (seed s>0: NAME.sS).")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """LoRA-SFT the base model, one adapter per seed; resumes an interrupted run in the same --out.

    --max-len and --raise-above apply when --data holds trajectories (the dataset is built first).
    """
    from training.dataset import is_dataset
    from training.lora import train_seeds

    if serve_port is not None and not name:
        raise typer.BadParameter("--serve-port needs --name (e.g. student@r1)")
    serve_key = os.environ.get(serve_api_key_env) if serve_api_key_env else None
    if serve_api_key_env and not serve_key:
        fail(f"--serve-api-key-env: environment variable {serve_api_key_env} is not set")
    existing_path(data, "--data")
    existing_path(base, "--base", "dir")
    writable_dir(out, "--out")
    data, mask = _correction_rows(data, mask)
    if not is_dataset(data):
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # every rank would write the same files at once
            raise typer.BadParameter("under accelerate launch with several processes, --data must be a built "
                                     "dataset: run `coevo dataset build` first")
        data = _build(data, base, mask, out / "dataset", None, length, None)
    summaries = train_seeds(data, base, out, config, show_progress=progress)
    table = Table(title=f"adapters in {out}")
    for col in ("seed", "steps", "first loss", "final loss", "trained tok/s", "adapter"):
        table.add_column(col)
    for s in summaries:
        curve = s.loss_curve
        table.add_row(str(s.seed), str(s.steps), f"{curve[0].loss:.4f}", f"{curve[-1].loss:.4f}",
                      f"{s.trained_tokens_per_s:.0f}", s.adapter_dir)
    console.print(table)
    if serve_port is not None and name:
        _serve(summaries, f"http://{serve_host}:{serve_port}/v1", name, serve_key)


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
    app.command("train")(train)
