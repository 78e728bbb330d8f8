"""`coevo`: the one entry point. Each command group lives in its own `flows/cli_<group>.py` module."""

from __future__ import annotations

import importlib
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map at import

import typer

app = typer.Typer(
    name="coevo",
    help="Co-evolve agent harnesses and small open models (harness search, on-policy correction, LoRA-SFT).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# (module, attribute): either a typer.Typer added as a group or a function registered as a command.
_COMMAND_MODULES: tuple[str, ...] = (
    "flows.cli_model",
    "flows.cli_tasks",
    "flows.cli_rollout",
    "flows.cli_train",
    "flows.cli_run",
    "flows.cli_attribute",
    "flows.cli_evolve",
    "flows.cli_correct",
)


def _register(module_name: str) -> None:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            return  # that command group has not landed in this checkout
        raise
    module.register(app)


for _m in _COMMAND_MODULES:
    _register(_m)


if __name__ == "__main__":
    app()
