"""The shape of `tasks/`: every family is one package of the same five modules, with a verifier of named checks
over a snapshot. Import rules (no circles, a verifier reaches no environment or oracle) and the function-length
limit are tests/test_shape.py's, over every room."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import tasks
from tasks.base import Environment

TASKS = Path(tasks.__file__).resolve().parent
FAMILY_MODULES = ("__init__", "data", "env", "oracle", "verify")


@pytest.mark.parametrize("family", list(tasks.FAMILY_TABLE))
def test_every_family_has_the_same_shape(family: str) -> None:
    folder = TASKS / family
    assert {p.stem for p in folder.glob("*.py")} >= set(FAMILY_MODULES)
    fam = tasks.get(family)
    verify = importlib.import_module(f"tasks.{family}.verify")
    assert fam.check_names == verify.CHECK_NAMES and len(set(fam.check_names)) == len(fam.check_names)
    assert inspect.signature(verify.verify).parameters.keys() == {"instance", "snap"}
    assert inspect.getmodule(fam.env_class) is importlib.import_module(f"tasks.{family}.env")
    assert fam.env_class.snapshot is not Environment.snapshot
