"""`training.fit` on the tiny model (CPU): rows -> keyed dataset -> one adapter per seed; called again it finds
both, reads no row and trains nothing; another adapter in a seed's place is refused when asked to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from training_helpers import make_trajectory

from agents.records import Trajectory
from training.config import LengthRule, TrainConfig
from training.fit import fit
from training.lora import SUMMARY_FILE, TrainSummary

# 4 short examples, one optimizer step per seed: seconds on one core
FAST = TrainConfig(epochs=1, effective_batch=4, micro_batch=4, seeds=2, gradient_checkpointing=False)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()  # two cores shared with other test workers
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _rows() -> list[Trajectory]:
    return [make_trajectory(i, n_tool_turns=1, with_tools=False) for i in range(4)]


def _unread() -> list[Trajectory]:
    raise AssertionError("a found dataset must not read its rows")


def test_fit_twice_trains_once_and_returns_the_same_adapters(tiny_model_dir: Path, tmp_path: Path) -> None:
    kw = dict(key=("imit", "set-1"), datasets=tmp_path / "datasets", prefix="imit-")
    first = fit(_rows, tiny_model_dir, tmp_path / "adapters", FAST, LengthRule(max_len=4096), **kw)
    assert first.dataset_built and first.rows == 4 and first.stats.examples == 4 and not first.reason
    assert Path(first.dataset_dir).parent == tmp_path / "datasets" and Path(first.dataset_dir).name.startswith("imit-")
    assert first.seeds_trained == [0, 1] and first.seeds_reused == [] and set(first.final_loss) == {0, 1}
    assert first.adapters == {s: str(tmp_path / "adapters" / f"seed-{s}") for s in (0, 1)}
    summary = TrainSummary.model_validate_json((tmp_path / "adapters" / "seed-0" / SUMMARY_FILE).read_text())
    assert summary.data_manifest_sha256 == first.manifest_sha256

    again = fit(_unread, tiny_model_dir, tmp_path / "adapters", FAST, LengthRule(max_len=4096), **kw)
    assert not again.dataset_built and again.rows == 0 and again.dataset_dir == first.dataset_dir
    assert again.seeds_trained == [] and again.seeds_reused == [0, 1]
    assert again.adapters == first.adapters and again.final_loss == first.final_loss
    assert again.manifest_sha256 == first.manifest_sha256

    # other settings, same place: trained over by default, refused with the caller's hint when asked
    other = FAST.model_copy(update={"lr": 5e-4})
    with pytest.raises(ValueError, match=r"seed-0 already holds an adapter trained on other data or settings; bump it"):
        fit(_unread, tiny_model_dir, tmp_path / "adapters", other, LengthRule(max_len=4096), conflict_hint="bump it", **kw)


def test_fit_reports_why_there_is_no_adapter_and_writes_no_dataset(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = fit(_rows(), tiny_model_dir, tmp_path / "adapters", FAST, LengthRule(max_len=8, raise_above=1.0),
                 key=("x",), datasets=tmp_path / "datasets")
    assert result.reason == "all 4 rows dropped ({'over_max_len': 4})" and result.adapters == {}
    assert result.stats.examples == 0 and not (tmp_path / "datasets").exists()
    built_only = fit(_rows(), tiny_model_dir, tmp_path / "adapters", FAST, LengthRule(max_len=4096), seeds=(),
                     key=("x",), datasets=tmp_path / "datasets")
    assert built_only.dataset_built and built_only.adapters == {} and not (tmp_path / "adapters").exists()
