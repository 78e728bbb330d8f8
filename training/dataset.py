"""Trajectories -> a tokenized, loss-masked SFT dataset on disk (Parquet) + a JSON manifest (lineage, stats).

    built = build_dataset(trajectories, tokenizer, mask="assistant")
    write_dataset(built, out_dir)            # out_dir/examples.parquet + out_dir/manifest.json
    examples, manifest = load_dataset(out_dir)

Per example: convert the conversation to the student's format (training/convert.py), render it with the
student's chat template and mask it (training/render.py). An example that cannot be converted or masked is
dropped and counted under its reason; a template that is not prefix-stable is a systemic error and raises.

Sequence length rule (`training.config.LengthRule`, whose defaults are the recipe's): when more than
`raise_above` of the examples would be cut at `max_len`, the limit is raised to 2 x max_len (logged and
recorded in the manifest). Examples still over the limit are dropped and counted (`over_max_len`), never
truncated mid-turn.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from training.config import RAISE_FACTOR, LengthRule
from training.convert import ConversionError, to_student_messages
from training.render import IGNORE, MaskMode, MaskSelectionError, render

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: the length rule's raised limit is 2 x max_len, no longer stored
EXAMPLES_FILE = "examples.parquet"
MANIFEST_FILE = "manifest.json"
REASON_OVER_MAX_LEN = "over_max_len"
REASON_NO_TRAINED_TOKENS = "no_trained_tokens"
REASON_BAD_TURNS = "turn_selection"
# A turn record carrying a trigger of this kind marks the turn `turns` mode trains on (e.g. the expert-
# corrected turn t*), when no explicit {trajectory id: [turn, ...]} mapping is given.
TRAIN_TURN_TRIGGER = "train_turn"

EXAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "example_id": pl.String(),
    "trajectory_id": pl.String(),
    "family": pl.String(),
    "tag": pl.String(),
    "input_ids": pl.List(pl.Int32()),
    "labels": pl.List(pl.Int32()),
    "attention_mask": pl.List(pl.Int8()),
    "n_tokens": pl.Int64(),
    "n_trained": pl.Int64(),
}


class DatasetStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectories: int = Field(description="Trajectories read.")
    examples: int = Field(description="Examples kept.")
    tokens: int = Field(description="Tokens in the kept examples.")
    trained_tokens: int = Field(description="Tokens with a loss (labels != -100).")
    dropped: dict[str, int] = Field(description="Dropped examples per reason.")
    max_len: int = Field(description="The limit applied (after any raise).")
    max_len_raised: bool
    over_default_fraction: float = Field(description="Fraction of renderable examples longer than the default limit.")
    longest: int = Field(description="Longest renderable example, in tokens.")


class SourceRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    family: str
    tag: str
    model_id: str
    n_tokens: int
    n_trained: int
    trained_turns: list[int]


class DropRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    reason: str
    detail: str


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    tokenizer: str = Field(description="Tokenizer directory the ids were made with.")
    tokenizer_sha256: str = Field(description="Hash of the vocabulary and chat template used.")
    mask: str
    length_rule: LengthRule
    stats: DatasetStats
    sources: list[SourceRecord] = Field(description="Kept examples' source trajectories, in row order (lineage).")
    dropped: list[DropRecord]
    examples_sha256: str = ""


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid")

    example_id: str
    trajectory_id: str
    family: str
    tag: str
    input_ids: list[int]
    labels: list[int]
    attention_mask: list[int]
    n_tokens: int
    n_trained: int


class BuiltDataset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    examples: list[Example]
    manifest: Manifest


def load_tokenizer(model_dir: str | Path, chat_template: str | Path | None = None,
                   template_kwargs: Mapping[str, bool | int | str] | None = None) -> Any:
    """The tokenizer with the template the server renders with; `template_kwargs` are the variables the server
    fixes for every request (vLLM --default-chat-template-kwargs, e.g. enable_thinking=False), written into the
    template as defaults so every rendering here uses them (and the tokenizer fingerprint covers them)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if chat_template is not None:
        tok.chat_template = Path(chat_template).read_text()
    if template_kwargs and tok.chat_template:
        defaults = "".join(f"{{%- if {k} is not defined %}}{{%- set {k} = {json.dumps(v)} %}}{{%- endif %}}"
                           for k, v in sorted(template_kwargs.items()))
        tok.chat_template = defaults + tok.chat_template
    if not tok.chat_template:
        raise ValueError(f"{model_dir} has no chat template; pass chat_template=PATH (a .jinja file)")
    return tok


def tokenizer_fingerprint(tokenizer: Any) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(tokenizer.get_vocab(), sort_keys=True).encode())
    h.update((tokenizer.chat_template or "").encode())
    return h.hexdigest()


def marked_turns(t: Trajectory) -> list[int]:
    return sorted({turn.index for turn in t.turns if any(x.kind == TRAIN_TURN_TRIGGER for x in turn.triggers)})


def build_dataset(
    trajectories: Iterable[Trajectory],
    tokenizer: Any,
    *,
    mask: MaskMode = "assistant",
    turns: Mapping[str, Sequence[int]] | None = None,
    length: LengthRule = LengthRule(),
    tokenizer_name: str = "",
) -> BuiltDataset:
    """Render, mask and length-filter; see the module docstring. `turns` maps trajectory id -> turn indices."""
    drops: list[DropRecord] = []
    rendered: list[tuple[Trajectory, Any]] = []
    trajs = list(trajectories)
    for t in trajs:
        try:
            messages = to_student_messages(t.messages)
            chosen = list(turns.get(t.id, [])) if turns is not None else marked_turns(t)
            r = render(tokenizer, messages, t.tools, mask, chosen if mask == "turns" else None)
        except ConversionError as e:
            drops.append(DropRecord(trajectory_id=t.id, reason=e.reason, detail=e.detail))
            continue
        except MaskSelectionError as e:
            drops.append(DropRecord(trajectory_id=t.id, reason=REASON_BAD_TURNS, detail=str(e)))
            continue
        if not any(x != IGNORE for x in r.labels):
            drops.append(DropRecord(trajectory_id=t.id, reason=REASON_NO_TRAINED_TOKENS, detail="nothing to train on"))
            continue
        rendered.append((t, r))

    lengths = [len(r.input_ids) for _, r in rendered]
    over = sum(n > length.max_len for n in lengths) / len(lengths) if lengths else 0.0
    limit, raised = length.max_len, False
    if over > length.raise_above and length.raised_max_len > length.max_len:
        limit, raised = length.raised_max_len, True
        log.warning("%.1f%% of examples exceed %d tokens (> %.0f%%): max_len raised to %d",
                    100 * over, length.max_len, 100 * length.raise_above, limit)

    examples: list[Example] = []
    sources: list[SourceRecord] = []
    for t, r in rendered:
        if len(r.input_ids) > limit:
            drops.append(DropRecord(trajectory_id=t.id, reason=REASON_OVER_MAX_LEN,
                                    detail=f"{len(r.input_ids)} tokens > max_len {limit}"))
            continue
        n_trained = sum(x != IGNORE for x in r.labels)
        examples.append(Example(
            example_id=f"{t.id}:{len(examples)}", trajectory_id=t.id, family=t.instance.family, tag=t.tag,
            input_ids=r.input_ids, labels=r.labels, attention_mask=[1] * len(r.input_ids),
            n_tokens=len(r.input_ids), n_trained=n_trained,
        ))
        sources.append(SourceRecord(trajectory_id=t.id, family=t.instance.family, tag=t.tag, model_id=t.model_id,
                                    n_tokens=len(r.input_ids), n_trained=n_trained, trained_turns=list(r.trained_turns)))

    stats = DatasetStats(
        trajectories=len(trajs), examples=len(examples), tokens=sum(e.n_tokens for e in examples),
        trained_tokens=sum(e.n_trained for e in examples), dropped=dict(sorted(Counter(d.reason for d in drops).items())),
        max_len=limit, max_len_raised=raised, over_default_fraction=over, longest=max(lengths, default=0),
    )
    manifest = Manifest(tokenizer=tokenizer_name or str(getattr(tokenizer, "name_or_path", "")),
                        tokenizer_sha256=tokenizer_fingerprint(tokenizer), mask=mask, length_rule=length,
                        stats=stats, sources=sources, dropped=drops)
    return BuiltDataset(examples=examples, manifest=manifest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_dataset(built: BuiltDataset, out_dir: str | Path) -> Path:
    """Atomic writes: examples first, the manifest (with the examples' hash) last, so a manifest means done."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame([e.model_dump() for e in built.examples], schema=EXAMPLE_SCHEMA)
    tmp = out / (EXAMPLES_FILE + ".tmp")
    frame.write_parquet(tmp)
    os.replace(tmp, out / EXAMPLES_FILE)
    manifest = built.manifest.model_copy(update={"examples_sha256": _sha256(out / EXAMPLES_FILE)})
    tmp = out / (MANIFEST_FILE + ".tmp")
    tmp.write_text(manifest.model_dump_json(indent=2))
    os.replace(tmp, out / MANIFEST_FILE)
    return out


def is_dataset(path: str | Path) -> bool:
    return (Path(path) / MANIFEST_FILE).exists() and (Path(path) / EXAMPLES_FILE).exists()


def manifest_sha256(path: str | Path) -> str:
    return _sha256(Path(path) / MANIFEST_FILE)


def read_manifest(path: str | Path) -> Manifest:
    """A dataset's manifest. Schema 1 stored the raised limit (`raised_max_len`); it is read as schema 2 when
    that limit was 2 x max_len, and refused with one line otherwise."""
    file = Path(path) / MANIFEST_FILE
    raw = json.loads(file.read_text())
    version = raw.get("schema_version", 1)
    if version == 1 and isinstance(raw.get("length_rule"), dict):
        rule = dict(raw["length_rule"])
        raised = rule.pop("raised_max_len", None)
        if raised is not None and raised != RAISE_FACTOR * rule.get("max_len", 0):
            raise ValueError(f"{file}: a schema-1 dataset raised its limit to {raised}, not {RAISE_FACTOR} x max_len; "
                             "rebuild it with `coevo dataset build`")
        raw = {**raw, "length_rule": rule, "schema_version": SCHEMA_VERSION}
    elif version != SCHEMA_VERSION:
        raise ValueError(f"{file}: dataset schema_version {version}, this code reads {SCHEMA_VERSION}; "
                         "rebuild it with `coevo dataset build`")
    return Manifest.model_validate(raw)


def load_dataset(path: str | Path) -> tuple[list[Example], Manifest]:
    """Read a dataset written by write_dataset; checks the examples file against the manifest's hash."""
    path = Path(path)
    if not is_dataset(path):
        raise FileNotFoundError(f"{path} is not a dataset (needs {EXAMPLES_FILE} and {MANIFEST_FILE}); "
                                "build one with `coevo dataset build`")
    manifest = read_manifest(path)
    if manifest.examples_sha256 and manifest.examples_sha256 != _sha256(path / EXAMPLES_FILE):
        raise ValueError(f"{path / EXAMPLES_FILE} does not match its manifest's hash; rebuild the dataset")
    frame = pl.read_parquet(path / EXAMPLES_FILE)
    if dict(frame.schema) != EXAMPLE_SCHEMA:
        raise ValueError(f"{path / EXAMPLES_FILE} does not have the dataset schema: {dict(frame.schema)}")
    return [Example.model_validate(row) for row in frame.iter_rows(named=True)], manifest
