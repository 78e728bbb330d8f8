"""correction/mix.py: capability-boundary instances first, then the hardest; round robin inside a tier; dedup by
(instance, t*, corrected call); per-kind counts, the own-success ratio and the presets; the injected RNG."""

from __future__ import annotations

import random

import pytest

from correction.mix import MixConfig, call_key, correction_item, mix, order, pass_rates, tier
from tasks.records import ToolCall


def _corr(iid: str, t_star: int, call: str, tag: str = "") -> object:
    return correction_item(f"{iid}|{t_star}|{call}|{tag}", iid, t_star, call)


RATES = {"a": 0.5, "b": 0.0, "c": 1.0, "d": 0.25, "e": 0.75}


def test_boundary_first_then_hardest_then_solved_then_unknown() -> None:
    assert sorted(["a", "b", "c", "d", "x"], key=lambda i: tier(RATES.get(i))) == ["d", "a", "b", "c", "x"]
    items = [_corr(i, 1, "call") for i in ["x", "c", "b", "a", "d"]]
    got = [it.instance_id for it in order(items, RATES, random.Random(0))]
    assert got == ["d", "a", "b", "c", "x"]


def test_instances_take_turns_within_a_tier() -> None:
    # "a" has 5 corrections, "d" 1, "b" 2: with 3 taken, both boundary instances and then the next "a" come first
    items = [_corr("a", t, "c") for t in range(5)] + [_corr("d", 0, "c")] + [_corr("b", t, "c") for t in range(2)]
    mixed = mix(items, RATES, MixConfig(corrections=3, self_successes=0), random.Random(1))
    assert [it.instance_id for it in mixed.items] == ["d", "a", "a"]
    assert mixed.card.taken["correction"] == 3 and mixed.card.available["correction"] == 8
    assert mixed.card.boundary_share == 1.0 and mixed.card.instances == 2
    # with room for all boundary items, the hardest non-boundary instance ("b", p = 0) comes next
    mixed = mix(items, RATES, MixConfig(corrections=7, self_successes=0), random.Random(1))
    assert [it.instance_id for it in mixed.items][6] == "b"


def test_dedup_by_instance_t_star_and_corrected_call() -> None:
    same = call_key([ToolCall(id="x1", name="set_price", arguments={"sku": "A", "price": 3})])
    also_same = call_key([{"id": "other", "type": "function",
                           "function": {"name": "set_price", "arguments": '{"price": 3, "sku": "A"}'}}])
    other = call_key([{"name": "set_price", "arguments": {"sku": "A", "price": 4}}])
    assert same == also_same and same != other
    items = [_corr("a", 2, same, "first"), _corr("a", 2, also_same, "second"), _corr("a", 3, same),
             _corr("a", 2, other), _corr("d", 2, same)]
    mixed = mix(items, RATES, MixConfig(corrections=None, self_successes=0), random.Random(0))
    assert mixed.card.duplicates["correction"] == 1 and len(mixed.items) == 4
    kept = [it.value for it in mixed.items if it.dedup_key == ("a", 2, same)]
    assert kept == [f"a|2|{same}|first"]  # the first of a key (in the caller's order) wins


class _Traj:
    """Any record with `.id`, `.instance.id` and `.passed` mixes (the mix does not know trajectories)."""

    def __init__(self, tid: str, iid: str, passed: bool) -> None:
        self.id, self.passed = tid, passed
        self.instance = type("I", (), {"id": iid})()


def test_counts_ratio_presets_and_pass_rates() -> None:
    from correction.mix import success_item

    rollouts = [_Traj(f"s{k}", i, ok) for k, (i, ok) in enumerate(
        [("a", True), ("a", False), ("b", False), ("b", False), ("c", True), ("c", True), ("d", True), ("d", False)])]
    rates = pass_rates(rollouts)
    assert rates == {"a": 0.5, "b": 0.0, "c": 1.0, "d": 0.5}
    own = [success_item(t, "self_success") for t in rollouts if t.passed]
    corrections = [_corr(i, t, "c") for i in "abd" for t in range(4)]
    cfg = MixConfig(corrections=8, self_successes=50, self_success_ratio=0.25)
    mixed = mix(corrections + own, rates, cfg, random.Random(0))
    assert mixed.card.taken == {"correction": 8, "self_success": 2, "imitation": 0}  # round(0.25 x 8) = 2
    assert {it.instance_id for it in mixed.items if it.kind == "self_success"} == {"a", "d"}  # boundary successes
    assert MixConfig.preset("paper") == MixConfig(corrections=400, self_successes=50)
    emb = MixConfig.preset("embedded")
    assert emb.corrections < 400 and emb.corrections / emb.self_successes == 400 / 50
    with pytest.raises(ValueError, match="unknown mix preset 'huge'"):
        MixConfig.preset("huge")
    with pytest.raises(ValueError, match="corrections is 0"):
        MixConfig(corrections=0, self_success_ratio=0.1)


def test_the_injected_rng_decides_ties_reproducibly() -> None:
    items = [_corr(i, 0, "c") for i in ("p", "q", "r", "s", "t", "u")]  # all unknown rate: one tier, ties only
    cfg = MixConfig(corrections=3, self_successes=0)
    runs = [[it.instance_id for it in mix(items, {}, cfg, random.Random(s)).items] for s in (7, 7, 8, 9, 10)]
    assert runs[0] == runs[1]
    assert len({tuple(r) for r in runs}) > 1
