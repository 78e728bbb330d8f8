"""A synthetic copy curriculum for the micro student, interleaved with its demonstrations.

A small model trained on demonstrations alone learns the plan and the call format but writes values typical
of its training set instead of copying them from its context (docs/students.md): in a demonstration only a
few tokens per thousand are copies. These examples are dense in copies and cheap (short segments packed into
one sequence), so the attention circuits that copy (a previous-token head feeding an induction head) form
early, and the demonstrations then teach where to copy from. Two kinds of segment, both made of the same
identifiers as the rename copies (training/micro/augment.WORDS) and digits, tokenised by M0's own tokenizer:

- span repeat: `copy: <random identifiers and numbers>` then `again: <the same span>`; loss on the repeat;
- key lookup: `facts: <key> = `<value>`; ...` then `<key>? `<value>`` for a few keys in random order; loss on
  the values after the question (associative recall: find the key, copy what follows it);
- record rows (only with `records` > 0, the harness-reading recipe): a pretty-printed JSON object of records
  (`"QZX-07": {"min": 12.3, "max": 45.6}`, fresh ids and numbers) then `rows: ('QZX-07', 12.3, 45.6), ...`,
  each record as one row in the file's order; loss on the rows (the copy the anomaly_detection program makes
  from its parameter file into SQL VALUES rows: find the id, then the numbers a few tokens after it).

Everything is drawn from a seeded `random.Random`; the loss covers only the copied tokens (labels -100
elsewhere).
"""

from __future__ import annotations

import random
from typing import Any

from training.micro.augment import WORDS

KEYS = ("old", "new", "source", "target", "file", "name", "path", "function", "from", "to", "sensor", "sku",
        "report", "table", "column", "id")


def _value(rng: random.Random) -> str:
    u = rng.random()
    if u < 0.6:
        return "_".join(rng.sample(WORDS, rng.choice((1, 2, 2, 3))))
    if u < 0.8:
        return str(rng.randint(0, 10 ** rng.randint(1, 6)))
    return f"{rng.choice(WORDS)}/{'_'.join(rng.sample(WORDS, 2))}.py"


def _span_segment(rng: random.Random) -> tuple[str, str]:
    span = " ".join(_value(rng) for _ in range(rng.randint(4, 16)))
    return f"copy: {span}\nagain: ", f"{span}\n"


def _lookup_segment(rng: random.Random) -> list[tuple[str, str]]:
    keys = rng.sample(KEYS, rng.randint(2, 6))
    facts = {k: _value(rng) for k in keys}
    parts = [("facts: " + "; ".join(f"{k} = `{v}`" for k, v in facts.items()) + "\n", "")]
    for k in rng.sample(keys, rng.randint(1, len(keys))):
        parts.append((f"{k}? `", f"{facts[k]}`\n"))
    return parts


def _record_segment(rng: random.Random) -> list[tuple[str, str]]:
    import json
    import string

    records = {}
    for _ in range(rng.randint(2, 6)):
        lo = round(rng.uniform(0, 120), 1)
        key = "".join(rng.choices(string.ascii_uppercase, k=3)) + f"-{rng.randint(1, 12):02d}"
        records[key] = {"min": lo, "max": round(lo + rng.uniform(0.5, 60), 1)}
    text = json.dumps({"version": rng.randint(1, 3), rng.choice(("sensors", "ranges", "limits")): records}, indent=2)
    rows = ", ".join(f"('{k}', {r['min']}, {r['max']})" for k, r in records.items())
    return [(f"params: {text}\nrows: ", f"{rows}\n")]


def copy_example(tokenizer: Any, rng: random.Random, target_tokens: int,
                 records: float = 0.0) -> tuple[list[int], list[int]]:
    """One packed sequence of copy segments, about `target_tokens` long: (input_ids, labels); `records`: the
    share of record-row segments (the rest: span repeats and key lookups, half each)."""
    ids: list[int] = []
    labels: list[int] = []
    while len(ids) < target_tokens:
        if records and rng.random() < records:
            parts = _record_segment(rng)
        else:
            parts = [_span_segment(rng)] if rng.random() < 0.5 else _lookup_segment(rng)
        for prompt, answer in parts:
            p = tokenizer.encode(prompt, add_special_tokens=False)
            a = tokenizer.encode(answer, add_special_tokens=False) if answer else []
            ids += p + a
            labels += [-100] * len(p) + a
    return ids, labels


def copy_examples(tokenizer: Any, n: int, seed: int, target_tokens: int = 1024,
                  records: float = 0.0) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(f"copy-curriculum:{seed}")
    return [copy_example(tokenizer, rng, target_tokens, records) for _ in range(n)]


def copy_batches(tokenizer: Any, steps: int, batch: int, length: int, seed: int,
                 records: float = 0.0) -> list[tuple[list[list[int]], list[list[int]]]]:
    """`steps` batches of `batch` copy sequences cut to exactly `length` tokens (the copy phase that runs before
    the demonstrations: short sequences in batches form the copying circuits in minutes)."""
    rng = random.Random(f"copy-phase:{seed}")
    out = []
    for _ in range(steps):
        rows = [copy_example(tokenizer, rng, length, records) for _ in range(batch)]
        out.append(([ids[:length] for ids, _ in rows], [labels[:length] for _, labels in rows]))
    return out
