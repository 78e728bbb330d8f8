"""`coevo`: the one entry point. Each command group lives in its own `flows/cli/<group>.py` module."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price map at import

import typer


class _GuardedTyper(typer.Typer):
    """`coevo` (the `app` the entry point calls) with a last net under the commands: no input ends in a traceback.

    Commands report their own bad input (one line naming the option or key, exit 2) and their own failures
    (exit 1); usage errors are click's (exit 2). What still escapes is caught here: an input error (a file
    missing or not what it should be, a value a record refuses) is one line on stderr and exit 2, anything
    else one line and exit 1. COEVO_TRACEBACK=1 shows the traceback instead (debugging). Tests that invoke
    the app through typer's CliRunner see the exception itself.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the last net; see the docstring
            if os.environ.get("COEVO_TRACEBACK"):
                raise
            code = 2 if _is_input_error(e) else 1
            print(f"coevo: {'error' if code == 2 else 'failed'}: {_one_line(e)}", file=sys.stderr)
            sys.exit(code)


app = _GuardedTyper(
    name="coevo",
    help="Co-evolve agent harnesses and small open models (harness search, on-policy correction, LoRA-SFT).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# (module, attribute): either a typer.Typer added as a group or a function registered as a command.
_COMMAND_MODULES: tuple[str, ...] = (
    "flows.cli.model",
    "flows.cli.tasks",
    "flows.cli.rollout",
    "flows.cli.train",
    "flows.cli.run",
    "flows.cli.compare",
    "flows.cli.config",
    "flows.cli.attribute",
    "flows.cli.evolve",
    "flows.cli.imitate",
    "flows.cli.correct",
    "flows.cli.ops",
    "flows.cli.doctor",
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


def _is_input_error(e: BaseException) -> bool:
    import json

    import yaml

    return isinstance(e, (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
                          yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:500]}"

