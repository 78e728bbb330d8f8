"""The `attribute` stage inside the evaluation flow, offline: the simulated flawed student and the oracle expert.

- `attribution:` in the run config -> after `evaluate`, every failing rollout of every pair is attributed
  (views only), stored under <run>/attributions/, and the report gains the composition, trigger and fit sections;
- `coevo run --resume` of the finished run re-attributes nothing (content-keyed files, same mtimes);
- `attribution.enabled: false` -> no stage, no sections; a pair name the section does not know is a config error.
No vLLM server: `flawed/{family}@...` (SIMULATED) and `oracle/{family}` are LiteLLM providers in-process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from flows.config import ConfigError, parse_config
from flows.reporting import evaluation_frame
from flows.store import RunStore

FAMILIES = ["budget_approval"]  # the flawed student fails it often, quickly (no browser, no sandbox)


@pytest.fixture(scope="module", autouse=True)
def prefect_harness() -> Iterator[None]:
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=240):
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
        "attribution": {"base_pair": "student", "expert_pair": "expert", "shifts": [["student", "drifted"]],
                        "bootstrap_samples": 200, **attribution},
    }


def test_attribute_stage_in_the_flow_then_resume_reuses(tmp_path: Path, ray_local: None) -> None:
    from flows.evaluation.flow import evaluation_flow

    config = parse_config(_config(tmp_path))
    res = evaluation_flow(config, base_dir=str(tmp_path))
    rec = res.attribution
    assert rec is not None and rec.attributor == "heuristic" and rec.reused == []
    store = RunStore.open_existing(tmp_path / "runs", res.run_id)
    assert set(store.done("attribute")) == {"student", "drifted", "expert"}
    frame = pl.read_parquet(rec.files["student"])
    rollouts, _ = evaluation_frame(store)
    failing = rollouts.filter((pl.col("pair") == "student") & ~pl.col("passed")).height
    assert frame.height == rec.failing["student"] == failing > 0
    assert set(frame["category"].to_list()) <= {"tool_use", "instruction_following", "implicit_knowledge",
                                                  "long_context", "planning", "environment_or_harness", "unattributed"}
    md = Path(res.report.report_path).read_text()
    assert "## Failure composition" in md and "Shift `student` -> `drifted`" in md, md[-3000:]
    assert "## Model-harness fit" in md and "| drifted | overall |" in md, md[-3000:]
    mtimes = {p: Path(f).stat().st_mtime_ns for p, f in rec.files.items()}

    again = evaluation_flow(config, run_id=res.run_id, base_dir=str(tmp_path))
    assert again.attribution is not None and sorted(again.attribution.reused) == sorted(mtimes)
    assert {p: Path(f).stat().st_mtime_ns for p, f in again.attribution.files.items()} == mtimes


def test_attribution_off_and_bad_pair(tmp_path: Path) -> None:
    off = parse_config(_config(tmp_path, enabled=False))
    assert off.attribution is not None and not off.attribution.enabled
    with pytest.raises(ConfigError, match=r"attribution\.base_pair: 'base' is not an evaluation pair"):
        parse_config(_config(tmp_path, base_pair="base"))
    with pytest.raises(ConfigError, match=r"attribution\.shifts\.0: 'nope'"):
        parse_config(_config(tmp_path, shifts=[["student", "nope"]]))
    with pytest.raises(ConfigError, match=r"attribution\.attributor: unknown attributor 'judgement'"):
        parse_config(_config(tmp_path, attributor="judgement"))
    with pytest.raises(ConfigError, match=r"attribution\.attributor: 'judge' needs a `judge` role"):
        parse_config(_config(tmp_path, attributor="judge"))
