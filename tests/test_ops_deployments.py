"""deploy/prefect.yaml: every deployment's entry point imports as a Prefect flow that takes its parameters.

(Moved here from tests/test_flows_config.py and extended for the round and the nightly deployments.)
The round's entry point `flows/round/flow.py` is written by the round issue; where it has not landed in this
checkout, its deployment is checked for its declared shape only and the import is reported as skipped.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SPEC = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}


def _flow(entrypoint: str) -> Any:
    module, attr = entrypoint.split(":")
    return getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), attr)


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_entrypoint_is_a_flow_taking_the_deployments_parameters(name: str) -> None:
    from prefect import Flow

    d = DEPLOYMENTS[name]
    module = d["entrypoint"].split(":")[0]
    if not (REPO / module).exists():
        assert name == "coevolution-round", f"{name}: entry point file {module} does not exist"
        pytest.skip(f"{module} (the round flow) has not landed in this checkout; its import is checked once it has")
    fl = _flow(d["entrypoint"])
    assert isinstance(fl, Flow), d["entrypoint"]
    params = inspect.signature(fl.fn).parameters
    assert set(d.get("parameters", {})) <= set(params), name
    assert (REPO / d["parameters"]["config_path"]).exists()
    assert d["work_pool"]["name"] == "coevo"


def test_the_round_is_manual_with_a_weekly_schedule_commented_and_the_nightly_is_nightly() -> None:
    round_ = DEPLOYMENTS["coevolution-round"]
    assert round_["entrypoint"] == "flows/round/flow.py:coevolution_round"
    assert set(round_["parameters"]) == {"config_path", "rounds", "run_id", "from_stage"}
    assert round_["parameters"]["rounds"] == 1 and round_["parameters"]["run_id"] is None
    assert not round_.get("schedules")  # started by hand
    text = (REPO / "deploy" / "prefect.yaml").read_text()
    assert '#   - cron: "0 3 * * 0"' in text  # the weekly schedule, one uncomment away
    nightly = DEPLOYMENTS["nightly-evaluation"]
    assert nightly["entrypoint"] == "flows/ops/nightly.py:nightly_evaluation"
    assert nightly["schedules"][0]["cron"] == "0 2 * * *" and nightly["schedules"][0]["active"]
    assert _flow(nightly["entrypoint"]).name == "nightly-evaluation"
    names = [_flow(d["entrypoint"]).name for d in SPEC["deployments"] if (REPO / d["entrypoint"].split(":")[0]).exists()]
    assert len(names) == len(set(names)), f"two deployments' flows share a name: {names}"
