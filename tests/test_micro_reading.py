"""The harness-reading recipe (M1): the harness generator, decision points of real show-your-work episodes, the
weighted minimal pairs, the weighted loss, and a test-scale build of the same code path as `coevo model micro
--recipe m1` (deterministic, with its harness-dependence probe)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

import tasks
from harness.baseline import baseline
from harness.evolution.cards import load_card, section_id, stated_keys
from harness.render import system_prompt
from training.micro.build import BUILD_RECORD, MicroSpec, build_micro_model, m1_spec, weights_digest
from training.micro.extend import ExtendSpec, extend_micro_model
from training.micro.decisions import decision_points, pair_batch, render_choices
from training.micro.mixture import named_harness
from training.micro.prompts import generate, minimal_pair
from training.micro.reading import M1_MISS, ReadingSpec, episode
from training.micro.wording import load_bank
from training.pretrain import PretrainConfig

FAMILIES = ("payroll_audit", "code_refactor", "anomaly_detection")


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_harnesses_state_what_they_say_and_vary_around_it(family: str) -> None:
    rng = random.Random(0)
    draws = [generate(family, rng, extras=True) for _ in range(300)]
    card, bank = load_card(family), load_bank(family)
    for h, stated in draws:
        assert stated_keys(h) == set(stated)  # the ground truth is the sections present
        assert h.tools == baseline(family).tools
    item = sorted(M1_MISS[family])[0]
    texts = {h.section(section_id(item)).text for h, s in draws if item in s}
    assert card.item(item).text in texts  # the card's wording (what the search writes) is among them ...
    assert len(texts & set(bank.items[item].texts)) >= 5  # ... beside many paraphrases
    sizes = {len(stated) for _, stated in draws}
    assert 0 in sizes and len(card.items) in sizes  # from h0's length to hK's
    assert any(h.hooks for h, _ in draws) and any(h.context.max_tool_result_chars for h, _ in draws)
    again = generate(family, random.Random(0), extras=True)
    assert again[0].id == draws[0][0].id  # seeded


@pytest.mark.parametrize("family", FAMILIES)
def test_a_minimal_pair_differs_in_the_one_item_only(family: str) -> None:
    rng = random.Random(1)
    for key in sorted(M1_MISS[family]):
        for _ in range(20):
            stating, not_stating = minimal_pair(family, key, rng)
            assert key in stated_keys(stating) and key not in stated_keys(not_stating)
            assert [s for s in stating.sections if s.id != section_id(key)] == not_stating.sections
            assert stating.sections[0].kind == "role" or not_stating.sections[0].kind != "role"


def _demo(family: str, knows: frozenset[str], index: int = 1000):
    fam = tasks.get(family)
    index = next(i for i in range(index, index + 40) if fam.generate(i).difficulty == "easy"
                 and (family != "code_refactor" or "Rename" in fam.generate(i).instruction))
    options = {"program": "values"} if family == "anomaly_detection" else {}
    return asyncio.run(episode(family, index, baseline(family), knows, 0, "test", options)), options


def _first_sql_or_command(traj) -> str:
    args = [json.loads(c["function"]["arguments"]) for m in traj.messages for c in m.get("tool_calls") or []]
    return next(a.get("sql") or a["command"] for a in args if "sql" in a or "command" in a)


@pytest.mark.parametrize("index", [1000, 1001])  # easy, hard
def test_anomaly_flag_program_opens_with_the_decision_and_reports_only_what_the_item_allows(index: int) -> None:
    """M1's anomaly_detection program: the query's first line is the flag the item decides; applied, the report
    passes (both difficulties); missed, the readings planted at a bound are reported and the report fails."""
    flag = {"program": "flag"}
    known = asyncio.run(episode("anomaly_detection", index, baseline("anomaly_detection"),
                                frozenset({"bounds_are_normal"}), 0, "test", flag))
    missed = asyncio.run(episode("anomaly_detection", index, baseline("anomaly_detection"), frozenset(), 0, "test",
                                 flag))
    assert _first_sql_or_command(known).startswith("WITH k(bounds_normal) AS (VALUES (1)), ")
    assert _first_sql_or_command(missed).startswith("WITH k(bounds_normal) AS (VALUES (0)), ")
    flipped = _first_sql_or_command(known).replace("(VALUES (1))", "(VALUES (0))", 1)
    assert flipped == _first_sql_or_command(missed)  # the flag is the only difference
    assert known.verdict.score == 1.0 and missed.verdict.score < 1.0, (known.verdict, missed.verdict)


def test_code_refactor_flag_program_opens_with_the_decision() -> None:
    index = next(i for i in range(1000, 1040) if "Rename" in tasks.get("code_refactor").generate(i).instruction)
    flag = {"program": "flag"}
    known = asyncio.run(episode("code_refactor", index, baseline("code_refactor"),
                                frozenset({"update_every_reference"}), 0, "test", flag))
    missed = asyncio.run(episode("code_refactor", index, baseline("code_refactor"), frozenset(), 0, "test", flag))
    assert _first_sql_or_command(known).startswith("tests=1; grep -rnw $([ $tests = 1 ] || echo --exclude-dir")
    assert _first_sql_or_command(known).replace("tests=1;", "tests=0;", 1) == _first_sql_or_command(missed)
    assert known.verdict.score == 1.0 and missed.verdict.score < 1.0, (known.verdict, missed.verdict)


@pytest.mark.parametrize("family", FAMILIES)
def test_decision_points_are_the_turns_where_the_item_changes_the_action(family: str) -> None:
    items = sorted(M1_MISS[family])
    traj, options = _demo(family, frozenset())  # every item missed
    points = decision_points(traj, frozenset(), items, options)
    assert {p.item for p in points} == set(items)  # code_refactor: the scope, then the recovery after failing tests
    for p in points:
        assert p.applied != p.missed
        assert p.prefix == traj.messages[:len(p.prefix)]  # the demonstration's own history
        played = traj.messages[len(p.prefix)]  # the demonstration missed the item: it played `missed`
        if p.missed.get("tool_calls"):
            assert [c["function"] for c in played["tool_calls"]] == [c["function"] for c in p.missed["tool_calls"]]
        else:
            assert played["content"] == p.missed["content"]


def test_pair_batches_weight_the_differing_tokens_and_the_policys_draw(tiny_model_dir: Path) -> None:
    from training.dataset import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    traj, options = _demo("payroll_audit", frozenset())
    point = decision_points(traj, frozenset(), ["break_deduction_over_six_hours"], options)[0]
    stating, not_stating = minimal_pair("payroll_audit", point.item, random.Random(0))
    applied, missed = render_choices(tok, point, stating)
    assert "True" in tok.decode(applied.ids[applied.first:applied.end])
    assert "False" in tok.decode(missed.ids[missed.first:missed.end])
    ids, labels, weights = pair_batch(tok, point, stating, not_stating, 0.65, 8.0, tok.pad_token_id)
    assert len(ids) == 3 and len({len(r) for r in ids}) == 1 and len({len(r) for r in weights}) == 1
    for row, (lab, w), scale in zip(ids, zip(labels, weights), (1.0, 0.35, 0.65)):
        trained = [i for i, x in enumerate(lab) if x != -100]
        assert trained and all(w[i] > 0 for i in trained)
        assert all(w[i] == 0 for i in range(len(w)) if i not in trained)
        assert max(w) == pytest.approx(8.0 * scale) and min(w[i] for i in trained) == pytest.approx(scale)
    assert system_prompt(stating) in tok.decode(ids[0]) and system_prompt(not_stating) in tok.decode(ids[1])


def test_weighted_loss_with_unit_weights_is_the_plain_loss() -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from training.pretrain import _loss

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=1, num_key_value_heads=1, head_dim=64))
    x = torch.randint(0, 50, (2, 12))
    y = x.clone()
    y[:, :5] = -100
    plain = model(input_ids=x, labels=y).loss.detach()
    ones = torch.ones_like(x, dtype=torch.float)
    assert float(_loss(model, x, y, ones, 1.0)) == pytest.approx(float(plain), rel=1e-5)
    w = torch.ones_like(x, dtype=torch.float)
    w[:, 8] = 9.0
    heavy = float(_loss(model, x, y, w, 1.0))
    assert heavy != pytest.approx(float(plain))
    assert float(_loss(model, x, y, w, 0.0)) == pytest.approx(float(plain), rel=1e-5)  # annealed away


# (not code_refactor: its test runs print their duration, so its demonstrations differ from run to run)
SPEC = m1_spec().model_copy(update={
    "families": ("payroll_audit", "anomaly_detection"), "demos_per_family": 2, "demo_weights": {}, "vocab_size": 800,
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2,
    "num_key_value_heads": 2, "copy_examples": 1, "copy_tokens": 64, "copy_phase_steps": 2, "copy_phase_batch": 2,
    "copy_phase_len": 32, "copy_phase_stop_loss": None,
    "reading": ReadingSpec(pairs=3, phase_pairs=2, phase_demos=1, probe_instances=1,
                           blocks=("payroll_audit:2", "mixed:3")),
    "train": PretrainConfig(steps=6, threads=1, checkpoint_every=3)})


def test_reading_blocks_are_validated_with_the_offending_block_named() -> None:
    with pytest.raises(ValueError, match="reading block 'payroll:5'"):
        ReadingSpec(blocks=("payroll:5",))
    with pytest.raises(ValueError, match="reading block 'mixed'"):
        ReadingSpec(blocks=("mixed",))
    assert ReadingSpec(blocks=("mixed:4", "code_refactor:2")).parsed_blocks() == [("mixed", 4), ("code_refactor", 2)]


def test_m1_build_at_test_scale_is_deterministic_and_probes_its_harness_dependence(tmp_path: Path) -> None:
    spec = MicroSpec.model_validate(SPEC.model_dump())
    a = build_micro_model(tmp_path / "a", spec, progress=False)
    b = build_micro_model(tmp_path / "b", spec, progress=False)
    assert weights_digest(a) == weights_digest(b)
    record = json.loads((a / BUILD_RECORD).read_text())
    assert record["spec"]["reading"]["pairs"] == 3 and record["training"]["steps"] == 6
    assert record["reading_phase"]["steps"] == 3  # 2 pairs + 1 demonstration, before the main phase
    assert record["demonstrations"]["by_family"]["anomaly_detection"]["n"] == 4  # 2 + 2 fresh-sensor-id copies
    blocks = record["reading_blocks"]  # after the main phase, each probed
    assert [(b["block"], b["pairs"]) for b in blocks] == [("payroll_audit:2", 2), ("mixed:3", 2)]
    assert all(set(b["probe"]["apply_probability"]) == set(spec.families) for b in blocks)
    assert blocks[-1]["probe"]["apply_probability"] == record["probe"]["apply_probability"]  # the last block's
    probe = record["probe"]["apply_probability"]
    assert set(probe) == set(spec.families) and record["probe"]["points"] == 2
    for family, p in probe.items():
        assert 0.0 <= p["h0"] <= 1.0 and 0.0 <= p["hK"] <= 1.0
        assert p["dependence"] == pytest.approx(p["hK"] - p["h0"], abs=1e-3)
    assert sorted(x.stem for x in (a / "harness_hK").glob("*.yaml")) == sorted(spec.families)
    assert named_harness("payroll_audit").id == type(named_harness("payroll_audit")).load(
        a / "harness_hK" / "payroll_audit.yaml").id
    # the build extended from its own weights with code_refactor's "kinds" program (every refactoring kind)
    ext = ExtendSpec(demos={"code_refactor": 8, "payroll_audit": 1}, demo_steps=3, blocks=("code_refactor:2",))
    c = extend_micro_model(a, tmp_path / "c", ext, progress=False)
    grown = json.loads((c / BUILD_RECORD).read_text())
    assert grown["base_weights_sha256"] == weights_digest(a) != grown["weights_sha256"] == weights_digest(c)
    assert grown["demonstrations"] >= 9 and grown["demo_phase"]["steps"] == 3  # (+ fresh-name rename copies)
    assert [b["block"] for b in grown["reading_blocks"]] == ["code_refactor:2"]
    assert set(grown["probe_before"]["apply_probability"]) == set(grown["probe"]["apply_probability"])
    assert 0.0 <= grown["success"]["code_refactor"] <= 1.0 and grown["decision_points"] >= 4  # 4 kinds in 8
    assert (c / "harness_hK" / "code_refactor.yaml").exists()
    assert MicroSpec.model_validate_json((c / "micro_model_spec.json").read_text()).refactor_program == "kinds"


def test_committed_m1_is_the_recipe_in_the_code_and_its_recorded_bits() -> None:
    """deploy/micro1 was built by `m1_spec` (seed 0) as it stands, and its weights are the recorded ones."""
    root = Path(__file__).resolve().parents[1] / "deploy" / "micro1"
    assert MicroSpec.model_validate_json((root / "micro_model_spec.json").read_text()) == m1_spec()
    record = json.loads((root / BUILD_RECORD).read_text())
    assert weights_digest(root) == record["weights_sha256"]
    assert record["weights_sha256"] in (root / "README.md").read_text()
    assert sorted(x.stem for x in (root / "harness_hK").glob("*.yaml")) == sorted(m1_spec().families)
