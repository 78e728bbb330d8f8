"""CLI options generated from the settings records: every field is an option with the field's default and
help, bad values are usage errors naming the option, and the command receives the records (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
import typer
from pydantic import BaseModel, model_validator
from typer.core import TyperOption
from typer.testing import CliRunner

from agents.jobs import Limits
from flows.cli.options import model_options, option_name, record_args
from training.config import LengthRule, TrainConfig


def _options(app: typer.Typer, command: str) -> dict[str, TyperOption]:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {p.name: p for p in cmd.params if isinstance(p, TyperOption) and p.name}


@pytest.mark.parametrize(("command", "records", "aliases"), [
    ("train", (TrainConfig, LengthRule), {}),
    ("rollout", (Limits,), {"max_tokens_per_turn": "--max-tokens"}),  # the rollout command's short name stays
])
def test_every_field_is_an_option_with_its_default_and_help(command: str, records: tuple[type[BaseModel], ...],
                                                            aliases: dict[str, str]) -> None:
    from flows.cli import rollout as cli_rollout
    from flows.cli import train as cli_train

    app = typer.Typer()
    cli_train.register(app)
    cli_rollout.register(app)
    opts = _options(app, command)
    for record in records:
        for name, field in record.model_fields.items():
            opt = opts[name]
            assert option_name(name) in opt.opts + opt.secondary_opts
            assert field.description and field.description in (opt.help or "")
            if isinstance(field.default, tuple):  # a repeatable option; unset keeps the field's default
                assert opt.default is None and opt.multiple
            else:
                assert opt.default == field.default, name
    for name, alias in aliases.items():
        assert alias in opts[name].opts


class Knobs(BaseModel):
    steps: int = 3
    ratio: float = 0.5
    names: tuple[str, ...] = ("a", "b")
    fast: bool = False


class Limit(BaseModel):
    size: int = 10

    @model_validator(mode="after")
    def _even(self) -> "Limit":
        if self.size % 2:
            raise ValueError("size must be even")
        return self


def test_command_receives_the_records_and_bad_values_name_the_option(tmp_path: Path) -> None:
    got: list[tuple[str, Knobs, Limit]] = []
    app = typer.Typer()

    @app.command()
    @model_options(knobs=Knobs, limit=Limit)
    def go(label: Annotated[str, typer.Option(help="A label.")], knobs: Knobs, limit: Limit) -> None:
        got.append((label, knobs, limit))

    app.command("other")(lambda: None)  # two commands: `go` is a subcommand
    ok = CliRunner().invoke(app, ["go", "--label", "x", "--steps", "5", "--names", "c", "--names", "d", "--fast"])
    assert ok.exit_code == 0, ok.output
    assert got == [("x", Knobs(steps=5, names=("c", "d"), fast=True), Limit())]
    defaults = CliRunner().invoke(app, ["go", "--label", "y"])
    assert defaults.exit_code == 0 and got[-1] == ("y", Knobs(), Limit())
    bad = CliRunner().invoke(app, ["go", "--label", "z", "--steps", "x"])
    assert bad.exit_code == 2 and "--steps" in bad.output
    odd = CliRunner().invoke(app, ["go", "--label", "z", "--size", "3"])
    assert odd.exit_code == 2 and "size must be even" in " ".join(odd.output.split())
    assert len(got) == 2  # a bad value never reached the command


def test_record_args_give_the_command_the_same_record() -> None:
    """`record_args` is the inverse of the generated options (the round's `accelerate launch` of `coevo train`
    passes its LoRA settings so): every non-default value, switches both ways, repeated options, None left out."""
    got: list[TrainConfig] = []
    app = typer.Typer()

    @app.command()
    @model_options(config=TrainConfig)
    def go(config: TrainConfig) -> None:
        got.append(config)

    app.command("other")(lambda: None)
    chosen = TrainConfig(rank=4, alpha=None, dropout=0.0, target_modules=("q_proj", "v_proj"), epochs=3, lr=2e-3,
                         gradient_checkpointing=False, precision="fp32", effective_batch=8, micro_batch=2, seeds=2)
    for record in (chosen, TrainConfig(), chosen.model_copy(update={"alpha": 32, "gradient_checkpointing": True})):
        args = record_args(record)
        ok = CliRunner().invoke(app, ["go", *args])
        assert ok.exit_code == 0, (args, ok.output)
        assert got[-1] == record
    assert "--no-gradient-checkpointing" in record_args(chosen) and "--alpha" not in record_args(chosen)


def test_train_rejects_invalid_settings_before_any_work(tmp_path: Path) -> None:
    from flows.cli import train as cli_train

    app = typer.Typer()
    cli_train.register(app)
    res = CliRunner().invoke(app, ["train", "--data", str(tmp_path / "none"), "--base", str(tmp_path), "--out",
                                   str(tmp_path / "o"), "--rank", "0", "--max-len", "-1", "--effective-batch", "6",
                                   "--micro-batch", "4"])
    out = " ".join(res.output.split())
    assert res.exit_code == 2
    assert "--rank: Input should be greater than or equal to 1" in out and "--max-len: Input should be greater than 0" in out
    assert not (tmp_path / "o").exists()


def test_two_records_may_not_declare_the_same_option() -> None:
    class Other(BaseModel):
        steps: int = 1

    with pytest.raises(TypeError, match="--steps of Other is declared twice"):
        model_options(a=Knobs, b=Other)(lambda a, b: None)
