"""Dataset building: masks decode to exactly the trained turns, conversion drops, prefix stability, length rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from training_helpers import SYSTEM, make_trajectory
from typer.testing import CliRunner

from agents.records import TriggerRecord
from agents.tables.trajectories import write_trajectories
from training.convert import ConversionError, to_student_messages
from training.dataset import (
    TRAIN_TURN_TRIGGER,
    LengthRule,
    build_dataset,
    load_dataset,
    load_tokenizer,
    manifest_sha256,
    write_dataset,
)
from training.render import IGNORE, PrefixStabilityError, render


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path):
    return load_tokenizer(tiny_model_dir)


def cli_app() -> typer.Typer:
    """Just this module's commands: importing flows.cli would load every other group (prefect, ray, ...)."""
    from flows.cli import train as cli_train

    app = typer.Typer()
    cli_train.register(app)
    return app


def trained_runs(tok, ids: list[int], labels: list[int]) -> list[str]:
    """Decoded text of each maximal run of trained positions (one run per trained turn)."""
    runs, cur = [], []
    for i, lab in zip(ids, labels, strict=True):
        if lab != IGNORE:
            assert lab == i
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [tok.decode(r) for r in runs]


def expected_turns(t) -> list[str]:
    """What the student generates per assistant turn, written out independently of the template code."""
    out = []
    for m in t.messages:
        if m["role"] != "assistant":
            continue
        text = m["content"]
        for c in m.get("tool_calls", []):
            args = json.dumps(json.loads(c["function"]["arguments"]))
            text += f'\n<tool_call>\n{{"name": "{c["function"]["name"]}", "arguments": {args}}}\n</tool_call>'
        out.append(text + "<|im_end|>")
    return out


def test_assistant_mask_is_exactly_the_assistant_turns(tok) -> None:
    t = make_trajectory(1, n_tool_turns=3)
    r = render(tok, to_student_messages(t.messages), t.tools, "assistant")
    assert trained_runs(tok, r.input_ids, r.labels) == expected_turns(t)
    trained = "".join(trained_runs(tok, r.input_ids, r.labels))
    context = tok.decode([i for i, lab in zip(r.input_ids, r.labels) if lab == IGNORE])
    for untrained in (SYSTEM, t.messages[1]["content"], t.messages[3]["content"], "<|im_start|>", "<tool_response>", "# Tools"):
        assert untrained not in trained
        assert untrained in context
    assert context.count("<|im_start|>assistant\n") == 4  # every generation header stays untrained


def test_turns_mask_trains_only_t_star_with_all_turns_in_context(tok) -> None:
    t = make_trajectory(2, n_tool_turns=3)
    r = render(tok, to_student_messages(t.messages), t.tools, "turns", [2])
    assert trained_runs(tok, r.input_ids, r.labels) == [expected_turns(t)[2]]
    full = tok.decode(r.input_ids)
    assert all(turn in full for turn in expected_turns(t))
    last = render(tok, to_student_messages(t.messages), t.tools, "last")
    assert trained_runs(tok, last.input_ids, last.labels) == [expected_turns(t)[-1]]


def test_turns_from_trigger_marks_and_from_mapping(tok) -> None:
    t = make_trajectory(3, n_tool_turns=2)
    from agents.records import TurnRecord

    marked = t.model_copy(update={"turns": [
        TurnRecord(index=0, assistant=t.messages[2]),
        TurnRecord(index=1, assistant=t.messages[4], triggers=[TriggerRecord(component_id="correction", turn=1, kind=TRAIN_TURN_TRIGGER)]),
    ]})
    built = build_dataset([marked], tok, mask="turns")
    e = built.examples[0]
    assert trained_runs(tok, e.input_ids, e.labels) == [expected_turns(t)[1]]
    by_map = build_dataset([t], tok, mask="turns", turns={t.id: [0]})
    assert trained_runs(tok, by_map.examples[0].input_ids, by_map.examples[0].labels) == [expected_turns(t)[0]]
    out_of_range = build_dataset([t], tok, mask="turns", turns={t.id: [7]})
    assert out_of_range.manifest.stats.dropped == {"turn_selection": 1}


def test_template_that_rewrites_earlier_turns_is_an_error_naming_the_turn(tok) -> None:
    # Like Qwen3's thinking templates: earlier assistant turns are rendered without their content.
    broken = tok.chat_template.replace(
        "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}",
        "{%- if message.content and loop.last %}{{- '\\n' + message.content }}{%- endif %}",
    )
    assert broken != tok.chat_template
    t = make_trajectory(4, n_tool_turns=2)
    with pytest.raises(PrefixStabilityError, match=r"assistant turn 1 \(message 4\) header"):
        render(tok, to_student_messages(t.messages), t.tools, "assistant", chat_template=broken)


def test_broken_examples_are_dropped_and_counted(tok) -> None:
    good = [make_trajectory(i) for i in range(3)]
    bad_args = make_trajectory(10)
    msgs = [dict(m) for m in bad_args.messages]
    msgs[2] = {**msgs[2], "tool_calls": [{"id": "call_10_0", "type": "function",
                                          "function": {"name": "list_products", "arguments": "3006625"}}]}
    bad_args = bad_args.model_copy(update={"messages": msgs, "id": "bad-args"})
    bad_json = bad_args.model_copy(update={"id": "bad-json", "messages": [
        *msgs[:2], {**msgs[2], "tool_calls": [{"id": "call_10_0", "type": "function",
                                                "function": {"name": "list_products", "arguments": "{page: 1"}}]}, *msgs[3:]]})
    no_result = make_trajectory(11)
    no_result = no_result.model_copy(update={"id": "no-result", "messages": [m for m in no_result.messages if m["role"] != "tool"]})
    built = build_dataset([*good, bad_args, bad_json, no_result], tok, mask="assistant")
    stats = built.manifest.stats
    assert stats.examples == 3 and stats.trajectories == 6
    assert stats.dropped == {"tool_arguments_not_json_object": 2, "tool_call_without_result": 1}
    assert {d.trajectory_id for d in built.manifest.dropped} == {"bad-args", "bad-json", "no-result"}
    assert [s.trajectory_id for s in built.manifest.sources] == [t.id for t in good]


def test_expert_formats_convert_to_the_student_format(tok) -> None:
    """An expert whose server left tool calls in the text (hermes JSON, Qwen3-Coder XML) trains like a parsed one."""
    t = make_trajectory(5, n_tool_turns=2)
    msgs = [dict(m) for m in t.messages]
    msgs[2] = {"role": "assistant", "content": [{"type": "text", "text": "Step 0: I will call list_products.\n"
               '<tool_call>\n{"name": "list_products", "arguments": {"page": 1}}\n</tool_call>'}],
               "reasoning_content": "thinking the student cannot render"}
    msgs[3] = {"role": "tool", "content": msgs[3]["content"]}  # no tool_call_id: answers the calls in order
    msgs[4] = {"role": "assistant", "content": "Step 1: I will call send_email.\n<tool_call>\n<function=send_email>\n"
               "<parameter=to>\norders@acme.example\n</parameter>\n<parameter=subject>\n"
               f"{json.loads(t.messages[4]['tool_calls'][0]['function']['arguments'])['subject']}\n</parameter>\n"
               "</function>\n</tool_call>"}
    msgs[5] = {**msgs[5], "tool_call_id": None}
    expert = t.model_copy(update={"messages": msgs})
    r = render(tok, to_student_messages(expert.messages), expert.tools, "assistant")
    assert trained_runs(tok, r.input_ids, r.labels) == expected_turns(t)
    with pytest.raises(ConversionError) as e:
        to_student_messages([{"role": "user", "content": "x"}, {"role": "tool", "content": "orphan"}])
    assert e.value.reason == "tool_result_without_call"


def test_length_rule_drops_and_auto_raises(tok) -> None:
    short = [make_trajectory(i, n_tool_turns=1) for i in range(19)]
    long = [make_trajectory(100 + i, n_tool_turns=6) for i in range(4)]
    huge = [make_trajectory(200 + i, n_tool_turns=20) for i in range(4)]
    lens = {t.id: len(build_dataset([t], tok).examples[0].input_ids) for t in (*short, *long, *huge)}
    limit = (max(lens[t.id] for t in short) + min(lens[t.id] for t in long)) // 2
    assert max(lens[t.id] for t in long) <= 2 * limit < min(lens[t.id] for t in huge)  # the premise of the checks
    rule = LengthRule(max_len=limit)
    assert rule.raised_max_len == 2 * limit  # the raise is always 2x the configured limit
    # 1 of 20 over the limit (5%, not more than 5%): no raise, the long one is dropped and counted.
    kept = build_dataset([*short, long[0]], tok, length=rule)
    s = kept.manifest.stats
    assert (s.examples, s.dropped, s.max_len, s.max_len_raised) == (19, {"over_max_len": 1}, limit, False)
    assert s.over_default_fraction == pytest.approx(0.05)
    # 4 of 23 over (17%): the limit is raised to 2x and everything fits.
    raised = build_dataset([*short, *long], tok, length=rule)
    assert (raised.manifest.stats.examples, raised.manifest.stats.max_len_raised, raised.manifest.stats.max_len) == (23, True, 2 * limit)
    # Raised, but the raised limit is still too small for the huge ones: they are dropped, never truncated.
    still = build_dataset([*short, *huge], tok, length=rule)
    assert (still.manifest.stats.examples, still.manifest.stats.dropped, still.manifest.stats.max_len) == (19, {"over_max_len": 4}, 2 * limit)
    assert all(e.n_tokens <= 2 * limit for e in still.examples)
    # raise_above is a parameter: at 20% the same 17% over does not raise
    assert build_dataset([*short, *long], tok, length=LengthRule(max_len=limit, raise_above=0.2)).manifest.stats.examples == 19


def test_schema_1_manifest_is_converted_or_refused_in_one_line(tok, tmp_path: Path) -> None:
    built = build_dataset([make_trajectory(i) for i in range(2)], tok, length=LengthRule(max_len=4096))
    write_dataset(built, tmp_path / "ds")
    manifest = tmp_path / "ds" / "manifest.json"
    raw = json.loads(manifest.read_text())
    assert raw["schema_version"] == 2 and "raised_max_len" not in raw["length_rule"]
    old = {**raw, "schema_version": 1, "length_rule": {**raw["length_rule"], "raised_max_len": 8192}}
    manifest.write_text(json.dumps(old))
    examples, converted = load_dataset(tmp_path / "ds")
    assert len(examples) == 2 and converted.length_rule == LengthRule(max_len=4096) and converted.schema_version == 2
    manifest.write_text(json.dumps({**old, "length_rule": {**old["length_rule"], "raised_max_len": 5000}}))
    with pytest.raises(ValueError, match=r"schema-1 dataset raised its limit to 5000, not 2 x max_len; rebuild it"):
        load_dataset(tmp_path / "ds")
    manifest.write_text(json.dumps({**raw, "schema_version": 9}))
    with pytest.raises(ValueError, match=r"dataset schema_version 9, this code reads 2; rebuild it"):
        load_dataset(tmp_path / "ds")


def test_write_load_roundtrip_and_cli(tok, tiny_model_dir: Path, tmp_path: Path) -> None:
    trajs = [make_trajectory(i) for i in range(4)]
    built = build_dataset(trajs, tok, mask="last", tokenizer_name=str(tiny_model_dir))
    write_dataset(built, tmp_path / "ds")
    examples, manifest = load_dataset(tmp_path / "ds")
    assert [e.model_dump() for e in examples] == [e.model_dump() for e in built.examples]
    assert manifest.stats == built.manifest.stats and manifest.examples_sha256
    assert len(manifest_sha256(tmp_path / "ds")) == 64

    app = cli_app()
    write_trajectories(tmp_path / "traj" / "part.parquet", trajs)
    res = CliRunner().invoke(app, ["dataset", "build", "--trajectories", str(tmp_path / "traj"), "--tokenizer",
                                   str(tiny_model_dir), "--mask", "last", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    cli_examples, cli_manifest = load_dataset(tmp_path / "cli")
    assert [e.input_ids for e in cli_examples] == [e.input_ids for e in examples]
    assert [s.trajectory_id for s in cli_manifest.sources] == [t.id for t in trajs]
    bad = CliRunner().invoke(app, ["dataset", "build", "--trajectories", str(tmp_path / "traj"), "--tokenizer",
                                   str(tiny_model_dir), "--mask", "everything", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "--mask must be one of" in bad.output
