"""The imitation arm and the leakage guard on real rollouts: the oracle expert and the flawed student
(`flawed/stock_alert@native`, SIMULATED) on real stock_alert environments under h0 and under an edited harness.

- only score-1.0 trajectories become rows; own successes are mixed in, boundary instances first;
- rows are in the student's format under the same h (h's system prompt, h's tools, hook messages kept, the
  expert's token ids dropped), every assistant turn marked and trained (labels decoded with the tiny tokenizer);
- a trajectory under another harness, or from a val/test instance, is an error naming it (leakage guard).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

import tasks
from agents.records import ModelRole, Trajectory
from agents.rollout import Limits, run_episode
from correction.imitation import HarnessMismatch, TAG_IMITATION, TAG_SELF, build_imitation_set, successes
from correction.leakage import LeakageError, check_no_leakage
from correction.mix import MixConfig
from harness import Hook, baseline
from harness.program import Harness
from training.dataset import build_dataset, load_tokenizer
from training.render import IGNORE

FAMILY = "stock_alert"
NAG = "Reminder from the harness: check every page before you answer."


def _edited() -> Harness:
    """h0 plus a hook that injects a user message at turn 1 (a harness-injected message rows must keep)."""
    h = baseline(FAMILY)
    return h.model_copy(update={"hooks": [Hook.model_validate({"id": "nag", "when": {"on": "at_turn", "turn": 1},
                                                               "then": {"do": "inject", "message": NAG}})]})


def _rollouts(model: str, indices: list[int], seeds: int, h: Harness) -> list[Trajectory]:
    async def one(index: int, seed: int) -> Trajectory:
        env = tasks.make_env(tasks.get(FAMILY).generate(index))
        try:
            return await run_episode(ModelRole(model=model), h, env, seed=seed, limits=Limits(max_turns=40))
        finally:
            env.close()

    async def all_() -> list[Trajectory]:
        return [await one(i, s) for i in indices for s in range(seeds)]

    return asyncio.run(all_())


@pytest.fixture(scope="module")
def runs() -> dict[str, list[Trajectory]]:
    h = _edited()
    return {"expert": _rollouts(f"oracle/{FAMILY}", [0, 1, 2], 1, h),
            "student": _rollouts(f"flawed/{FAMILY}@native", [0, 1, 2], 3, h)}


def test_imitation_rows_are_successes_in_the_students_format_under_h(runs: dict[str, list[Trajectory]],
                                                                   tiny_model_dir: Path) -> None:
    h = _edited()
    expert, student = runs["expert"], runs["student"]
    own = successes(student)
    assert all(t.passed for t in expert) and 0 < len(own) < len(student)  # the simulated student fails some
    out = build_imitation_set(expert, student, lambda fam: h, MixConfig(corrections=0, self_successes=None),
                              random.Random(0))
    rows = out.trajectories
    assert out.card.mix.taken == {"correction": 0, "self_success": len(own), "imitation": 3}
    assert {out.card.sources[r.id] for r in rows} == {t.id for t in expert + own}  # lineage; failures never rows
    for r in rows:
        assert r.harness_id == h.id and r.messages[0]["content"] == expert[0].messages[0]["content"]
        assert r.tools == expert[0].tools and r.passed
        assert any(NAG in m["content"] for m in r.messages if m["role"] == "user")  # the hook's message is kept
        assert all(any(x.kind == "train_turn" for x in t.triggers) for t in r.turns)
    by_tag = {tag: [r for r in rows if r.tag == tag] for tag in (TAG_IMITATION, TAG_SELF)}
    assert all(t.completion_token_ids is None for r in by_tag[TAG_IMITATION] for t in r.turns)
    # every assistant turn is trained: the decoded labels are exactly the assistant turns' text
    tok = load_tokenizer(tiny_model_dir)
    sample = [by_tag[TAG_SELF][0], by_tag[TAG_IMITATION][0]]  # rendering is slow on 2 shared cores
    built = build_dataset(sample, tok, mask="assistant")
    turns = build_dataset(sample, tok, mask="turns")  # the marks select every turn too
    assert built.manifest.stats.examples == 2 and not built.manifest.dropped
    assert [e.labels for e in built.examples] == [e.labels for e in turns.examples]
    ex = built.examples[-1]
    trained = tok.decode([x for x in ex.labels if x != IGNORE])
    assert "<tool_call>" in trained and NAG not in trained and "## " not in trained


def test_fewer_own_successes_boundary_first(runs: dict[str, list[Trajectory]]) -> None:
    h = _edited()
    out = build_imitation_set(runs["expert"], runs["student"], lambda fam: h,
                              MixConfig(corrections=0, self_successes=1), random.Random(0))
    own = [r for r in out.trajectories if r.tag == TAG_SELF]
    rate = {i: sum(t.passed for t in runs["student"] if t.instance.id == i) / 3 for i in {t.instance.id for t in own}}
    assert len(own) == 1 and 0 < rate[own[0].instance.id] < 1


def test_a_trajectory_under_another_harness_is_an_error(runs: dict[str, list[Trajectory]]) -> None:
    with pytest.raises(HarnessMismatch, match=rf"trajectory {runs['expert'][0].id} \(stock_alert/0, oracle/stock_alert\) "
                                              rf"ran under harness {_edited().id}, not {baseline(FAMILY).id}"):
        build_imitation_set(runs["expert"], [], baseline)


def test_leakage_guard_names_the_trajectory_and_instance(runs: dict[str, list[Trajectory]]) -> None:
    h = _edited()
    val = _rollouts(f"oracle/{FAMILY}", [20], 1, h)[0]
    test = _rollouts(f"oracle/{FAMILY}", [40], 1, h)[0]
    assert (val.instance.split, test.instance.split, val.passed) == ("val", "test", True)
    with pytest.raises(LeakageError) as e:
        build_imitation_set(runs["expert"] + [val, test], runs["student"], lambda fam: h)
    msg = str(e.value)
    assert f"trajectory {val.id} on instance stock_alert/20 (split val)" in msg
    assert f"trajectory {test.id} on instance stock_alert/40 (split test)" in msg and "2 row(s)" in msg
    with pytest.raises(LeakageError, match=r"student successes.*stock_alert/40"):
        build_imitation_set(runs["expert"], runs["student"] + [test], lambda fam: h)
    # train and pretrain rows pass; the guard returns them as they are
    pre = _rollouts(f"oracle/{FAMILY}", [1000], 1, h)[0]
    assert check_no_leakage(runs["expert"] + [pre], "x") == runs["expert"] + [pre]


def test_coevo_imitate_writes_what_coevo_train_takes_and_refuses_bad_input(
        runs: dict[str, list[Trajectory]], tmp_path: Path, tiny_model_dir: Path) -> None:
    from typer.testing import CliRunner

    from agents.tables.trajectories import read_trajectories, write_trajectories
    from flows.cli import app

    h = _edited()
    hdir = tmp_path / "hstar"
    h.dump(hdir / "evolution" / FAMILY / "h_star.yaml")  # a DIR as `coevo evolve --out` writes it
    write_trajectories(tmp_path / "expert" / "t.parquet", runs["expert"][:1])
    write_trajectories(tmp_path / "student" / "t.parquet", runs["student"])
    cli = CliRunner()
    args = ["imitate", "--expert-trajectories", str(tmp_path / "expert"), "--student-trajectories",
            str(tmp_path / "student"), "--harness", str(hdir), "--self-successes", "1"]
    res = cli.invoke(app, [*args, "--out", str(tmp_path / "imit")])
    assert res.exit_code == 0, res.output
    rows = read_trajectories(tmp_path / "imit")
    assert sorted(r.tag for r in rows) == [TAG_IMITATION, TAG_SELF]
    assert "imitation 1, self_success 1" in " ".join(res.output.split())
    # `coevo train --data DIR` builds the dataset from these trajectories first: the same call, without training
    res = cli.invoke(app, ["dataset", "build", "--trajectories", str(tmp_path / "imit"), "--tokenizer",
                           str(tiny_model_dir), "--mask", "turns", "--out", str(tmp_path / "ds")])
    assert res.exit_code == 0, res.output
    from training.dataset import load_dataset

    examples, manifest = load_dataset(tmp_path / "ds")
    n_turns = {r.id: len(r.turns) for r in rows}
    assert manifest.stats.examples == 2
    assert all(s.trained_turns == list(range(n_turns[s.trajectory_id])) for s in manifest.sources)
    # bad input: one line naming the problem, exit 2, nothing written
    test_row = _rollouts(f"oracle/{FAMILY}", [40], 1, h)
    write_trajectories(tmp_path / "leaky" / "t.parquet", test_row)
    for bad, needle in [
        (["--harness", str(tmp_path / "nowhere")], "is neither 'baseline' nor an existing harness"),
        (["--harness", str(tmp_path)], f"holds no harness for family {FAMILY}"),
        (["--harness", "baseline"], "ran under harness"),
        (["--expert-trajectories", str(tmp_path / "leaky")], f"trajectory {test_row[0].id} on instance stock_alert/40"),
        (["--student-trajectories", str(tmp_path / "none")], "--student-trajectories:"),
    ]:
        res = cli.invoke(app, [*args, *bad, "--out", str(tmp_path / "bad")])
        assert res.exit_code == 2 and needle in res.output and len(res.output.strip().splitlines()) == 1, res.output
        assert not (tmp_path / "bad").exists()
