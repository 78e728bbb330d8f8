"""Entry points for Prefect deployments (deploy/prefect.yaml) that need parameters turned into a config.

`evaluation_deployment`: an on-demand evaluation of the student (optionally an adapter of it, under a
harness) next to the expert. A deployment's parameters are plain values (what the UI form and `prefect
deployment run -p` take); this flow turns them into a `RunConfig` (the config file plus overrides, its round
replaced by the round [evaluate_pairs, attribute, report]) and runs it as a subflow. The nightly evaluation of the promoted pairs is `flows/ops/nightly.py`; the
co-evolution round is `flows/round/flow.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.config import parse_config, preflight
from flows.config import load_config as _load
from flows.store import new_run_id


def apply_overrides(data: dict[str, Any], *, model: str | None = None, api_base: str | None = None,
                    adapter: str | None = None, adapter_path: str | None = None, harness: str | None = None,
                    n_instances: int | None = None, full: bool = False) -> dict[str, Any]:
    """Override the student's model/server, add an adapter to evaluate, swap the harness of every pair; the
    round becomes the one that evaluates the pairs."""
    data = {**data, "models": {k: dict(v) for k, v in data["models"].items()},
            "evaluation": {**data["evaluation"], "pairs": [dict(p) for p in data["evaluation"]["pairs"]]}}
    student = data["models"].setdefault("student", {})
    if model:
        student["model"] = model
    if api_base:
        student["api_base"] = api_base
    if adapter:
        if adapter_path:
            server = data["servers"][0]["name"] if data.get("servers") else "student"
            data["adapters"] = [*data.get("adapters", []), {"name": adapter, "path": adapter_path, "server": server}]
        pairs = data["evaluation"]["pairs"]
        if not any(p.get("adapter") == adapter for p in pairs):
            pairs.insert(1, {"model": "student", "adapter": adapter})
    if harness:
        for p in data["evaluation"]["pairs"]:
            p["harness"] = harness
    data["round"] = None  # the round that evaluates `evaluation.pairs` (flows.config.RunConfig._pairs_round)
    if full:
        data["evaluation"]["n_instances"] = None
    elif n_instances is not None:
        data["evaluation"]["n_instances"] = n_instances
    return data


@flow(name="evaluation-on-demand", log_prints=True)
def evaluation_deployment(
    config_path: str = "deploy/configs/local.yaml",
    model: str | None = None,
    api_base: str | None = None,
    adapter: str | None = None,
    adapter_path: str | None = None,
    harness: str | None = None,
    n_instances: int | None = None,
    full: bool = False,
) -> dict[str, Any]:
    """Evaluate the student (optionally an adapter of it, under a harness) next to the expert; returns the table."""
    base = _load(config_path).model_dump(mode="json")
    config = parse_config(apply_overrides(base, model=model, api_base=api_base, adapter=adapter, adapter_path=adapter_path,
                                          harness=harness, n_instances=n_instances, full=full), config_path)
    preflight(config, Path.cwd())
    from flows.round.flow import coevolution_run

    result = coevolution_run(config, new_run_id(config.name), base_dir=str(Path.cwd()))
    (done,) = result.rounds
    print(f"report: {done.report_path}")
    return {"run_id": result.run_id, "report": done.report_path, "table": done.table}
