"""The `attribute` stage of a round that evaluates configured pairs, offline: the simulated flawed student and the
oracle expert.

- `attribution:` in a config without `round:` -> the round [evaluate_pairs, attribute, report]: every failing rollout
  of every pair is attributed (views only), stored under <round>/attributions/, and the report gains the
  composition (with the shift from the first pair to each other) and trigger sections;
- `coevo run --resume` of the finished run re-attributes nothing (content-keyed files, same mtimes);
- `attribution.enabled: false` -> no attribute stage; a bad attributor is a config error naming the key.
No vLLM server: `flawed/{family}@...` (SIMULATED) and `oracle/{family}` are LiteLLM providers in-process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from agents.tables.trajectories import read_frame
from flows.config import ConfigError, parse_config
from flows.store import RunStore, new_run_id
from tests.prefect_helpers import prefect_server

FAMILIES = ["budget_approval"]  # the flawed student fails it often, quickly (no browser, no sandbox)
CATEGORIES = {"tool_use", "instruction_following", "implicit_knowledge", "long_context", "planning",
              "environment_or_harness", "unattributed"}


@pytest.fixture(scope="module", autouse=True)
def prefect_harness() -> Iterator[None]:
    with prefect_server():
        yield


def _config(tmp_path: Path, **attribution: object) -> dict:
    return {
        "name": "attrflow",
        "runs_dir": str(tmp_path / "runs"),
        "models": {"student": {"model": "flawed/{family}@uniform"},
                   "drifted": {"model": "flawed/{family}@native"},
                   "expert": {"model": "oracle/{family}"}},
        "families": FAMILIES,
        "evaluation": {"n_instances": 4, "seeds": 2, "bootstrap_samples": 200,
                       "pairs": [{"model": "student"}, {"model": "drifted"}, {"model": "expert"}]},
        "limits": {"max_turns": 40, "wall_s": 120},
        "ray": {"num_cpus": 2, "actors": 1},
        "attribution": {"bootstrap_samples": 200, **attribution},
    }


def test_attribute_stage_in_the_round_then_resume_reuses(tmp_path: Path, ray_local: None) -> None:
    from flows.round.flow import coevolution_run

    config = parse_config(_config(tmp_path))
    assert config.round.stages == ["evaluate_pairs", "attribute", "report"]
    res = coevolution_run(config, new_run_id(config.name), base_dir=str(tmp_path))
    store = RunStore.open_existing(Path(res.run_dir) / "rounds", "r0")
    rec = store.done("round")["attribute"]["output"]
    assert rec["attributor"] == "heuristic"
    assert set(rec["files"]) == {"pairs.student", "pairs.drifted", "pairs.expert"}
    frame = pl.read_parquet(rec["files"]["pairs.student"])
    rollouts = read_frame(store.root / "trajectories" / "eval" / "pairs.student")
    failing = rollouts.filter(~pl.col("passed")).height
    assert frame.height == rec["failing"]["pairs.student"] == failing > 0
    assert set(frame["category"].to_list()) <= CATEGORIES
    md = Path(res.rounds[0].report_path).read_text()
    assert "## Failure composition" in md and "Shift `pairs.student` -> `pairs.drifted`" in md, md[-3000:]
    assert "## Component trigger rates" in md, md[-3000:]
    mtimes = {p: Path(f).stat().st_mtime_ns for p, f in rec["files"].items()}

    again = coevolution_run(config, res.run_id, base_dir=str(tmp_path))
    assert [s["status"] for s in again.rounds[0].stages] == ["skipped (finished earlier)"] * 3
    assert {p: Path(f).stat().st_mtime_ns for p, f in rec["files"].items()} == mtimes


def test_attribution_off_and_a_bad_attributor(tmp_path: Path) -> None:
    off = parse_config(_config(tmp_path, enabled=False))
    assert off.attribution is not None and not off.attribution.enabled
    assert off.round.stages == ["evaluate_pairs", "report"]  # no attribute stage
    explicit = {**_config(tmp_path, enabled=False), "round": {"stages": ["evaluate_pairs", "attribute", "report"]}}
    with pytest.raises(ConfigError, match=r"attribution\.enabled: false, but round\.stages runs 'attribute'"):
        parse_config(explicit)
    with pytest.raises(ConfigError, match=r"attribution\.attributor: unknown attributor 'judgement'"):
        parse_config(_config(tmp_path, attributor="judgement"))
    with pytest.raises(ConfigError, match=r"attribution\.attributor: 'judge' needs a `judge` role"):
        parse_config(_config(tmp_path, attributor="judge"))
    with pytest.raises(ConfigError, match=r"attribution\.base_pair: unknown key"):
        parse_config(_config(tmp_path, base_pair="student"))
