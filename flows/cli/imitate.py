"""`coevo imitate`: the imitation arm's training set from stored rollouts (correction/imitation.py).

    coevo imitate --expert-trajectories runs/x/expert --student-trajectories runs/x/student \\
        --harness runs/evo1 --out data/imit
    coevo train --data data/imit --base .cache/tiny-model --out adapters/imit

The expert's score-1.0 rollouts under h (one h per family: a harness FILE, a DIR as `coevo evolve --out`
writes, or `baseline`), in the student's format under h, mixed with the student's own successes under h
(boundary instances first). Writes DIR/imitation.parquet (every assistant turn marked trained) and
DIR/card.json (counts, mix, lineage). Bad input (a missing path, no trajectories, a row from a val/test
instance, a rollout under another harness) is one line and exit status 2; nothing is written then.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

console = Console()


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]coevo imitate[/]: {message}", soft_wrap=True)
    return typer.Exit(2)


def imitate(
    expert_trajectories: Annotated[Path, typer.Option(help="The expert's rollouts under h (Parquet file or directory).")],
    student_trajectories: Annotated[Path, typer.Option(help="The student's rollouts under h: its successes are mixed "
                                                            "in and its pass rates order them.")],
    harness: Annotated[str, typer.Option(help="h: 'baseline', a harness YAML/JSON file, or a directory with one per "
                                              "family (<family>.yaml or evolution/<family>/h_star.yaml).")],
    out: Annotated[Path, typer.Option(help="Output directory: imitation.parquet + card.json.")],
    self_successes: Annotated[int, typer.Option(min=0, help="At most this many of the student's own successes.")] = 50,
    imitation: Annotated[Optional[int], typer.Option(min=0, help="At most this many expert successes (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the mix's tie-breaking RNG.")] = 0,
) -> None:
    """Build the imitation training set: expert successes + own successes, under one harness per family."""
    from agents.tables.trajectories import read_trajectories
    from correction.imitation import build_imitation_set, write_imitation_set
    from correction.mix import MixConfig
    from harness.files import harness_source

    for opt, path in (("--expert-trajectories", expert_trajectories), ("--student-trajectories", student_trajectories)):
        if not path.exists():
            raise _fail(f"{opt}: {path} does not exist")
    try:
        harness_of = harness_source(harness)
        expert = read_trajectories(expert_trajectories)
        student = read_trajectories(student_trajectories)
        if not expert:
            raise ValueError(f"--expert-trajectories: no trajectories under {expert_trajectories}")
        config = MixConfig(corrections=0, self_successes=self_successes, imitation=imitation)
        built = build_imitation_set(expert, student, harness_of, config, random.Random(seed))
    except (ValueError, FileNotFoundError) as e:
        raise _fail(" ".join(str(e).split())) from None
    if not built.trajectories:
        raise _fail(f"no rows: none of the {len(expert)} expert and {len(student)} student rollouts scored 1.0 "
                    f"(or all were dropped: {built.card.dropped})")
    write_imitation_set(built, out)
    c = built.card
    console.print(f"expert {c.expert_successes}/{c.expert_read} passed, student {c.student_successes}/{c.student_read}; "
                  f"rows: imitation {c.mix.taken['imitation']}, self_success {c.mix.taken['self_success']} "
                  f"(boundary share {c.mix.boundary_share:.2f}, dropped {c.dropped or 0})")
    console.print(f"wrote {out / 'imitation.parquet'} and {out / 'card.json'}; train with: coevo train --data {out} ...")


def register(app: typer.Typer) -> None:
    app.command("imitate")(imitate)
