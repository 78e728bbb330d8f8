"""The micro student's training data: show-your-work policies that read their harness, renamed copies of the
rename demonstrations, and the synthetic copy curriculum (training/micro/policies.py, micro_augment.py,
micro_curriculum.py). The policies run real episodes through the rollout runtime and the real verifiers."""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest

import tasks
from agents.rollout import run_episode
from training.micro.augment import renamed_copies, resku_copies
from training.micro.curriculum import copy_examples
from training.micro.mixture import named_harness
from training.micro.policies import MISS, ShowWorkClient, has_policy, knows
from harness.baseline import baseline
from harness.render import system_prompt
from tasks.code_refactor.show_work import rename_request
from tasks.website_admin.show_work import sku_of


def _episode(family: str, index: int, harness, seed: int = 0, options: dict | None = None):
    fam = tasks.get(family)
    client = ShowWorkClient(family, options)
    env = fam.make_env(fam.generate(index))
    try:
        with env:
            return asyncio.run(run_episode(client, harness, env, seed=seed, tag="micro-demo:showwork:test"))
    finally:
        client.close()


def _commands(traj) -> list[str]:
    return [json.loads(c["function"]["arguments"])["command"] for m in traj.messages
            for c in m.get("tool_calls") or []]


def _rename_indices(n: int) -> list[int]:
    fam = tasks.get("code_refactor")
    return [i for i in range(1000, 1100) if has_policy(fam.generate(i))][:n]


def test_stated_items_are_always_applied_unstated_ones_missed_at_their_rate() -> None:
    for family, rates in MISS.items():
        stated = system_prompt(named_harness(family))
        assert all(knows(family, stated, random.Random(s)) == frozenset(rates) for s in range(20))
        plain = system_prompt(baseline(family))
        draws = [knows(family, plain, random.Random(s)) for s in range(400)]
        for key, p in rates.items():
            missed = sum(key not in d for d in draws) / len(draws)
            assert abs(missed - p) < 0.08, (family, key, missed)
        assert knows(family, plain, random.Random(7)) == knows(family, plain, random.Random(7))


@pytest.mark.parametrize("family", sorted(MISS))
def test_show_work_succeeds_when_the_harness_states_the_items(family: str) -> None:
    fam = tasks.get(family)
    index = next(i for i in range(1000, 1100) if has_policy(fam.generate(i)))
    traj = _episode(family, index, named_harness(family))
    assert traj.verdict.score == 1.0, traj.verdict


def test_website_admin_show_work_writes_only_values_the_trajectory_showed_first() -> None:
    """Each covered kind succeeds after a plain sign-in, every URL holding its values verbatim (no encoded
    `next` path); disable_product's SKU (the instruction names only the product) is written into a call only
    after a tool result showed it, and the uncovered kinds are not demonstrated."""
    fam = tasks.get("website_admin")
    first = {}
    for i in range(1000, 1030):
        inst = fam.generate(i)
        kind = inst.payload["kind"]
        assert has_policy(inst) == (kind in ("price_of", "set_price", "disable_product")), kind
        if has_policy(inst):
            first.setdefault(kind, i)
    for kind, index in sorted(first.items()):
        traj = _episode("website_admin", index, baseline("website_admin"))
        assert traj.verdict.score == 1.0, (kind, traj.verdict)
        urls = [json.loads(c["function"]["arguments"])["url"] for m in traj.messages
                for c in m.get("tool_calls") or [] if c["function"]["name"] == "goto"]
        assert urls[0] == "/login" and not any("%" in u or "next=" in u for u in urls), urls  # verbatim copies
        if kind == "disable_product":
            sku = str(traj.instance.payload["changes"][0]["key"])
            assert sku not in traj.instance.instruction
            shown = [i for i, m in enumerate(traj.messages) if m.get("role") == "tool" and sku in str(m.get("content"))]
            used = [i for i, m in enumerate(traj.messages)
                    if m.get("role") == "assistant" and sku in str(m.get("tool_calls"))]
            assert shown and used and shown[0] < used[0], (shown, used)


def test_anomaly_values_program_copies_each_bound_not_the_file() -> None:
    """The query holds every range of the parameter file as a VALUES row and not the file's text, and the
    report it computes passes (easy and hard)."""
    fam = tasks.get("anomaly_detection")
    for index in (1000, 1001):
        traj = _episode("anomaly_detection", index, named_harness("anomaly_detection"), options={"program": "values"})
        assert traj.verdict.score == 1.0, traj.verdict
        calls = [c["function"] for m in traj.messages for c in m.get("tool_calls") or []]
        assert [c["name"] for c in calls[:3]] == ["describe_tables", "bucket_get", "sql_query"]
        sql = json.loads(calls[2]["arguments"])["sql"]
        assert '"rule"' not in sql and "VALUES (" in sql
        params = json.loads(next(m["content"] for m in traj.messages if m.get("role") == "tool"
                                 and '"rule"' in str(m.get("content"))))
        ranges = params.get("sensors") or {**params["defaults_by_kind"], **params["overrides"]}
        for key, r in ranges.items():
            assert f"('{key}', {json.dumps(r['min'])}, {json.dumps(r['max'])})" in sql, key
        assert fam.generate(index).difficulty == ("easy" if index % 2 == 0 else "hard")


def test_missing_update_every_reference_fails_the_rename_and_the_test_run_shows_it() -> None:
    # under h0 some episodes miss the item (seeded): their rename stays inside the package and the tests fail
    scores, scoped = [], 0
    for index in _rename_indices(6):
        traj = _episode("code_refactor", index, baseline("code_refactor"), seed=index)
        commands = _commands(traj)
        if not commands[0].endswith(" ."):
            scoped += 1
            recovered = any(c.endswith(" .") for c in commands[1:])
            assert (traj.verdict.score == 1.0) == recovered, commands
        scores.append(traj.verdict.score)
    assert scoped >= 1 and min(scores) < 1.0


def _kind_episode(index: int, knows: frozenset[str]):
    fam = tasks.get("code_refactor")
    client = ShowWorkClient("code_refactor", {"program": "kinds"}, knows=knows)
    env = fam.make_env(fam.generate(index))
    try:
        with env:
            return asyncio.run(run_episode(client, baseline("code_refactor"), env, seed=0, tag="micro-demo:test"))
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["add_parameter", "extract_function", "move_module"])
def test_kinds_program_solves_every_refactoring_kind_and_its_flag_decides_the_tests(kind: str) -> None:
    # "kinds" covers the three non-rename kinds (the default program renames only); knowing every item it passes
    # the verifier at both levels; `tests=0` (update_every_reference missed) leaves tests/ stale, which fails
    # add_parameter and move_module, and the recovery (run_tests_before_finishing) repairs it from the test run
    fam = tasks.get("code_refactor")
    found = [i for i in range(1000, 1040) if fam.generate(i).payload["spec"]["kind"] == kind][:2]
    assert {fam.generate(i).difficulty for i in found} == {"easy", "hard"}
    every = frozenset({"update_every_reference", "run_tests_before_finishing"})
    for index in found:
        assert not has_policy(fam.generate(index)) and has_policy(fam.generate(index), "kinds")
        traj = _kind_episode(index, every)
        assert traj.verdict.score == 1.0, (index, traj.verdict)
        assert all(c.startswith("tests=1; ") for c in _commands(traj)[:2])
    missed = _kind_episode(found[1], frozenset())
    assert _commands(missed)[0].startswith("tests=0; ")
    assert (missed.verdict.score == 1.0) == (kind == "extract_function"), missed.verdict
    recovered = _kind_episode(found[1], frozenset({"run_tests_before_finishing"}))
    assert recovered.verdict.score == 1.0 and len(_commands(recovered)) == len(_commands(missed)) + 2 - (
        kind == "extract_function") * 2


def test_m1_kinds_recipe_demonstrates_every_refactoring_kind_and_is_m1_otherwise() -> None:
    # `--recipe m1-kinds`: M1's recipe whose code_refactor demonstrations cover all four kinds (M1's: renames only)
    from training.micro.build import RECIPES, covered_indices, m1_spec

    m1, kinds = m1_spec(), RECIPES["m1-kinds"]()
    fam = tasks.get("code_refactor")
    covered = covered_indices("code_refactor", 40, kinds.programs()["code_refactor"], 1000, easy_only=False)
    assert {fam.generate(i).payload["spec"]["kind"] for i in covered} == {
        "rename", "add_parameter", "extract_function", "move_module"}
    assert {fam.generate(i).payload["spec"]["kind"]
            for i in covered_indices("code_refactor", 40, m1.programs()["code_refactor"], 1000, False)} == {"rename"}
    same = {"refactor_program", "demo_weights", "train"}
    assert kinds.model_dump(exclude=same) == m1.model_dump(exclude=same)
    assert kinds.train.model_dump(exclude={"steps"}) == m1.train.model_dump(exclude={"steps"})


def test_kind_copies_replace_the_names_the_program_copies_with_fresh_ones_everywhere() -> None:
    # the kinds' names come from small pools (8 packages, 4 subpackages, 5 currencies): a copy with fresh values
    # leaves reading them from the instruction as the only way to write the program's first line
    from training.micro.augment import substituted_copies
    from training.micro.reading import augmentable

    every = frozenset({"update_every_reference", "run_tests_before_finishing"})
    for index, kind in ((1002, "add_parameter"), (1007, "move_module")):
        traj = _kind_episode(index, every)
        assert traj.instance.payload["spec"]["kind"] == kind
        olds, drawers = augmentable(traj)
        copy = substituted_copies(traj, olds, drawers, 1, random.Random(3), "renamed")[0]
        text, commands = json.dumps(copy.messages), _commands(copy)
        assert all(re.search(rf"\b{re.escape(old)}\b", text) is None for old in olds), olds
        request = copy.messages[1]["content"]
        if kind == "add_parameter":
            fn, cur = re.search(r"to `(\w+)\(value\)`.*currency=\"(\w+)\"", request, re.S).groups()
            assert re.fullmatch(r"[A-Z]{3}", cur) and commands[1].startswith(f"tests=1; python3 - {fn} {cur} ")
        else:
            pkg, sub = re.search(r"`(\w+)/(\w+)/helpers\.py`", request).groups()
            assert commands[1].startswith(f"tests=1; p={pkg}; s={sub}; ")


def test_renamed_copies_rewrite_both_names_everywhere_consistently() -> None:
    index = _rename_indices(1)[0]
    traj = _episode("code_refactor", index, named_harness("code_refactor"))
    old, new = rename_request(traj.instance)
    copies = renamed_copies(traj, old, new, 3, random.Random(0))
    assert len({c.id for c in copies}) == 3 and all(c.id != traj.id for c in copies)
    for copy in copies:
        text = json.dumps(copy.messages)
        assert not re.search(rf"(?<![A-Za-z0-9_]){old}(?![A-Za-z0-9_])", text.replace("\\\\b", " "))
        assert not re.search(rf"(?<![A-Za-z0-9_]){new}(?![A-Za-z0-9_])", text.replace("\\\\b", " "))
        user = next(m["content"] for m in copy.messages if m["role"] == "user")
        a, b = re.search(r"Rename the function `(\w+)` .* to `(\w+)`", user).groups()
        sed = json.loads(copy.messages[4]["tool_calls"][0]["function"]["arguments"])["command"]
        assert f"s/\\b{a}\\b/{b}/g" in sed  # the sed escape before the name is a boundary too
    assert renamed_copies(traj, old, new, 3, random.Random(0))[0].messages == copies[0].messages  # seeded


def test_resku_copies_replace_the_sku_in_the_instruction_the_calls_and_the_pages() -> None:
    """A website_admin demonstration copied with a fresh SKU: the old one appears nowhere, the new one wherever
    the old one was (the result row, the goto URL, the pages' addresses), and the copy is seeded."""
    traj = _episode("website_admin", 1002, baseline("website_admin"))  # disable_product: SKU read off a page
    sku = sku_of(traj.instance)
    copies = resku_copies(traj, sku, 2, random.Random(0))
    assert len({c.id for c in copies}) == 2 and all(c.tag.endswith(":resku") for c in copies)
    for copy in copies:
        text = json.dumps(copy.messages)
        assert sku not in text
        new = re.search(r"/products/([A-Z]{3}-\d+)", text).group(1)
        assert new != sku and len(new) == len(sku) and text.count(new) == json.dumps(traj.messages).count(sku)
    assert resku_copies(traj, sku, 2, random.Random(0))[1].messages == copies[1].messages


def test_copy_curriculum_trains_only_the_copied_tokens() -> None:
    from training.micro.augment import WORDS
    from training.micro.build import MicroSpec, build_tokenizer

    tok = build_tokenizer([" ".join(WORDS) + " 0123456789 `x` = ; ? /a.py"], MicroSpec(vocab_size=700))
    examples = copy_examples(tok, 3, seed=0, target_tokens=256)
    assert examples == copy_examples(tok, 3, seed=0, target_tokens=256)
    for ids, labels in examples:
        assert len(ids) == len(labels) >= 256
        trained = [(i, x) for i, x in zip(ids, labels) if x != -100]
        assert trained and all(i == x for i, x in trained) and len(trained) < len(ids)
        text = tok.decode(ids)
        for line in text.splitlines():
            if line.startswith("again: "):
                assert f"copy: {line.removeprefix('again: ')}" in text  # a repeat copies its span verbatim
