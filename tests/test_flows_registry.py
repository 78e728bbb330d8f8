"""The promotion registry: latest promotion per family is current; nightly scores compare with the night before."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from flows.ops.registry import NightlyScore, Promotion, PromotionRegistry


def _promo(family: str, round_: int, student: str = "hosted_vllm/student-r1") -> Promotion:
    return Promotion(family=family, student=student, harness_id=f"h{round_}", harness_path=f"runs/r/h{round_}.yaml",
                     run_id=f"run{round_}", round=round_, evidence={"val_delta": 0.05 * round_})


def test_current_is_the_latest_promotion_per_family_and_history_keeps_all(tmp_path: Path) -> None:
    reg = PromotionRegistry.under(tmp_path)
    assert reg.current() == []
    reg.promote(_promo("payroll", 1))
    reg.promote(_promo("stock_alert", 1))
    reg.promote(_promo("payroll", 2, student="hosted_vllm/student-r2"))
    again = PromotionRegistry(tmp_path / "registry.sqlite")  # a second process's view of the same file
    cur = {p.family: p for p in again.current()}
    assert set(cur) == {"payroll", "stock_alert"}
    assert cur["payroll"].round == 2 and cur["payroll"].student.endswith("r2")
    assert cur["payroll"].evidence == {"val_delta": 0.1}
    assert [p.round for p in again.history("payroll")] == [1, 2]
    assert again.current("stock_alert")[0].harness_id == "h1"


def test_previous_nightly_is_the_same_pair_on_an_earlier_night(tmp_path: Path) -> None:
    reg = PromotionRegistry.under(tmp_path)
    for night, mean in (("2026-11-29", 0.5), ("2026-11-30", 0.6)):
        reg.record_nightly(NightlyScore(family="payroll", student="s", harness_id="h", run_id="n", night=night,
                                        mean=mean, n=10))
    reg.record_nightly(NightlyScore(family="payroll", student="other", harness_id="h", run_id="n",
                                    night="2026-11-30", mean=0.1, n=10))
    prev = reg.previous_nightly("payroll", "s", "h", before_night="2026-12-01")
    assert prev is not None and prev.night == "2026-11-30" and prev.mean == 0.6
    assert reg.previous_nightly("payroll", "s", "h", before_night="2026-11-29") is None
    with pytest.raises(ValueError):
        NightlyScore(family="payroll", student="s", harness_id="h", run_id="n", night="x", mean=1.5, n=1)


def test_concurrent_writers_lose_no_row(tmp_path: Path) -> None:
    reg = PromotionRegistry.under(tmp_path)

    def write(family: str) -> None:
        mine = PromotionRegistry.under(tmp_path)
        for r in range(20):
            mine.promote(_promo(family, r))

    threads = [threading.Thread(target=write, args=(f,)) for f in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reg.history()) == 60 and {p.family: p.round for p in reg.current()} == {"a": 19, "b": 19, "c": 19}
    with sqlite3.connect(tmp_path / "registry.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM promotions").fetchone()[0] == 60
