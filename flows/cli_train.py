"""`coevo dataset build` and `coevo train`: trajectories -> masked dataset -> LoRA adapters (-> a vLLM server).

    coevo dataset build --trajectories runs/x/trajectories/rollout --tokenizer .cache/tiny-model --mask assistant --out D
    coevo train --data D --base .cache/tiny-model --out A --seeds 3 --serve-port 8000 --name student@r1
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

console = Console()
dataset_app = typer.Typer(help="Training datasets: trajectories -> token ids + loss masks.", no_args_is_help=True)

MASK_HELP = "assistant = every assistant turn; turns = the marked turns only (e.g. the corrected t*); last = the final turn."


def _build(trajectories: Path, tokenizer_dir: Path, mask: str, out: Path, turns_file: Path | None,
           max_len: int, raised_max_len: int, raise_above: float, chat_template: Path | None) -> Path:
    from agents.trajectory_table import read_trajectories
    from training.dataset import LengthRule, build_dataset, load_tokenizer, write_dataset
    from training.render import MASK_MODES

    if mask not in MASK_MODES:
        raise typer.BadParameter(f"--mask must be one of {', '.join(MASK_MODES)}, not {mask!r}")
    trajs = read_trajectories(trajectories)
    if not trajs:
        raise typer.BadParameter(f"no trajectories under {trajectories} (expects .parquet files from `coevo rollout`)")
    turns = None
    if turns_file is not None:
        turns = {k: [int(i) for i in v] for k, v in json.loads(turns_file.read_text()).items()}
    tok = load_tokenizer(tokenizer_dir, chat_template)
    with console.status(f"rendering {len(trajs)} trajectories"):
        built = build_dataset(trajs, tok, mask=mask, turns=turns, tokenizer_name=str(tokenizer_dir),  # type: ignore[arg-type]
                              length=LengthRule(max_len=max_len, raised_max_len=raised_max_len, raise_above=raise_above))
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
def dataset_build(
    trajectories: Annotated[Path, typer.Option(help="Trajectory Parquet file or directory (from `coevo rollout`).")],
    tokenizer: Annotated[Path, typer.Option(help="Student model directory: its tokenizer and chat template.")],
    out: Annotated[Path, typer.Option(help="Output directory: examples.parquet + manifest.json.")],
    mask: Annotated[str, typer.Option(help=MASK_HELP)] = "assistant",
    turns: Annotated[Optional[Path], typer.Option(help="JSON {trajectory id: [turn, ...]} for --mask turns "
                                                  "(default: turns marked with a 'train_turn' trigger).")] = None,
    max_len: Annotated[int, typer.Option(help="Token limit per example.")] = 49152,
    raised_max_len: Annotated[int, typer.Option(help="Limit used when too many examples exceed --max-len.")] = 98304,
    raise_above: Annotated[float, typer.Option(help="Fraction over --max-len that triggers the raise.")] = 0.05,
    chat_template: Annotated[Optional[Path], typer.Option(help="Jinja file overriding the tokenizer's template.")] = None,
) -> None:
    """Render trajectories with the student's chat template into token ids and loss masks."""
    _build(trajectories, tokenizer, mask, out, turns, max_len, raised_max_len, raise_above, chat_template)


def train(
    data: Annotated[Path, typer.Option(help="A built dataset, or a trajectory directory (built with --mask).")],
    base: Annotated[Path, typer.Option(help="Base (student) model directory.")],
    out: Annotated[Path, typer.Option(help="Output directory: seed-<s>/ adapter per seed.")],
    rank: Annotated[int, typer.Option(help="LoRA rank (16 or 64).")] = 16,
    alpha: Annotated[Optional[int], typer.Option(help="LoRA alpha (default 2 x rank).")] = None,
    epochs: Annotated[int, typer.Option(help="Passes over the data.")] = 2,
    lr: Annotated[float, typer.Option(help="Peak learning rate (warmup, then cosine).")] = 1e-4,
    seeds: Annotated[int, typer.Option(help="Training seeds 0..N-1, one adapter each.")] = 3,
    max_len: Annotated[int, typer.Option(help="Token limit when building from trajectories.")] = 49152,
    mask: Annotated[str, typer.Option(help=MASK_HELP + " Only when --data holds trajectories.")] = "assistant",
    effective_batch: Annotated[int, typer.Option(help="Examples per optimizer step.")] = 8,
    micro_batch: Annotated[int, typer.Option(help="Examples per forward pass.")] = 1,
    precision: Annotated[str, typer.Option(help="auto (bf16 on capable GPUs, else fp32), bf16 or fp32.")] = "auto",
    gradient_checkpointing: Annotated[bool, typer.Option(help="Recompute activations (long sequences).")] = True,
    checkpoint_every: Annotated[int, typer.Option(help="Optimizer steps between resumable checkpoints.")] = 50,
    serve_port: Annotated[Optional[int], typer.Option(help="Load the adapters into the vLLM server on this port.")] = None,
    serve_host: Annotated[str, typer.Option(help="Host of that server.")] = "127.0.0.1",
    name: Annotated[Optional[str], typer.Option(help="Served name of seed 0, e.g. student@r1 (seed s>0: NAME.sS).")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """LoRA-SFT the base model, one adapter per seed; resumes an interrupted run in the same --out."""
    from training.config import TrainConfig
    from training.dataset import is_dataset
    from training.lora import train_seeds

    if serve_port is not None and not name:
        raise typer.BadParameter("--serve-port needs --name (e.g. student@r1)")
    try:
        config = TrainConfig(rank=rank, alpha=alpha, epochs=epochs, lr=lr, effective_batch=effective_batch,
                             micro_batch=micro_batch, precision=precision, gradient_checkpointing=gradient_checkpointing,  # type: ignore[arg-type]
                             checkpoint_every=checkpoint_every)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if not is_dataset(data):
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # every rank would write the same files at once
            raise typer.BadParameter("under accelerate launch with several processes, --data must be a built "
                                     "dataset: run `coevo dataset build` first")
        data = _build(data, base, mask, out / "dataset", None, max_len, 98304, 0.05, None)
    summaries = train_seeds(data, base, out, config, seeds=range(seeds), show_progress=progress)
    table = Table(title=f"adapters in {out}")
    for col in ("seed", "steps", "first loss", "final loss", "trained tok/s", "adapter"):
        table.add_column(col)
    for s in summaries:
        curve = s.loss_curve
        table.add_row(str(s.seed), str(s.steps), f"{curve[0].loss:.4f}", f"{curve[-1].loss:.4f}",
                      f"{s.trained_tokens_per_s:.0f}", s.adapter_dir)
    console.print(table)
    if serve_port is not None and name:
        from deploy.vllm_server import load_adapter

        api_base = f"http://{serve_host}:{serve_port}/v1"
        for s in summaries:
            served = name if s.seed == 0 else f"{name}.s{s.seed}"
            load_adapter(api_base, served, s.adapter_dir)
            console.print(f"[green]loaded[/] {s.adapter_dir} as {served} on {api_base}")


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
    app.command("train")(train)
