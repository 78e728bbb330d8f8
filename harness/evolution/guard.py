"""The edit guard: a reflector's proposals are data too, checked before any of them applies.

    guard = EditGuard.for_search(h0, "stock_alert", [item.instance for item in train + val])
    reasons = guard.check(parent, proposed.edit, dataset)   # [] = the edit may apply

An edit is refused, with the reason, when it

- **memorises the data**: it holds an exact value of >= `MIN_VALUE_CHARS` characters, or a run of >= `RUN_WORDS`
  words, that appears in a train or validation instance's payload or expected values but neither in h0 nor in
  the family's instructions. The family's instructions are its description, the wording shared by >=
  `SHARED_INSTRUCTIONS` of its instances' instructions (the template) and what >= `SHARED_PAYLOAD_SHARE` of its
  100 evaluation instances' payloads hold (its standing documents and vocabulary: policy text, role titles,
  multipliers), not one instance's ids, amounts or names. A single lower-case word ('approved', 'export') is
  vocabulary, not a value. A harness that states an instance's answer scores on validation and teaches nothing
  for test (gepa issue 261);
- **names a foreign tool**: a tool that is neither the family's (its h0 tools), the harness's (its tools,
  helpers and composite tools) nor a harness helper;
- **sends the student outside its task**: to fetch an address or a path outside its task, or to reveal its
  instructions, keys, secrets or credentials;
- **carries transcript**: more than `MAX_TRANSCRIPT_LINES` lines copied from the minibatch's transcripts (or
  shaped like transcript lines).

Pure: no model, no I/O past building the family's instruction wording once (`tasks` is imported lazily).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from harness.edits import HarnessEdit
from harness.evolution.records import ReflectiveDataset, edit_json
from harness.helpers import SPECS as HELPER_SPECS
from harness.program import Harness
from tasks.records import TaskInstance

MIN_VALUE_CHARS = 4
RUN_WORDS = 8
SHARED_INSTRUCTIONS = 3
SHARED_PAYLOAD_SHARE = 0.2
MAX_TRANSCRIPT_LINES = 3
MIN_COPIED_LINE_CHARS = 24

_WORD = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*")
_TOOLISH = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\s*\(|\b(?:call|calls|calling|invoke|use|using|tool)\s+"
                      r"(?:the\s+)?(?:tool\s+)?`?([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`?")
_URL = re.compile(r"\b(?:https?|ftp|file)://[^\s'\"<>)]+", re.I)
_OUTSIDE = re.compile(r"(?<![\w.])(?:/etc/|/proc/|/root/|/home/|/var/|/usr/|~/|\.ssh\b|\.aws\b|\.netrc\b)"
                      r"|\bos\.environ\b|\b(?:curl|wget)\b", re.I)
_REVEAL = re.compile(r"\b(?:reveal|disclos|print|output|repeat|show|send|e-?mail|post|upload|leak|share|copy|"
                     r"includ|tell)\w*\b[^.\n]{0,80}?\b(system prompt|(?:system|hidden|developer|secret) instructions|"
                     r"api[ _-]?keys?|secrets?|credentials?|access tokens?|environment variables?|passwords?|"
                     r"private keys?)\b", re.I)
_TRANSCRIPT_LINE = re.compile(r"^\s*(?:\[turn \d+\]|(?:user|assistant|tool|system)(?: calls \w+)?\s*[:(])", re.I)


def _leaves(value: Any) -> Iterator[str]:
    """Every string and number in a JSON-like value (booleans and None are not data worth copying)."""
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple | set):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, str):
        yield value.strip()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield repr(value)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _runs(text: str, n: int = RUN_WORDS) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i: i + n]) for i in range(len(w) - n + 1)}


def _holds(text: str, value: str) -> bool:
    """`value` in `text` as a whole token (not inside a longer word or number), case-insensitively."""
    start = text.find(value)
    while start != -1:
        end = start + len(value)
        if (start == 0 or not text[start - 1].isalnum()) and (end == len(text) or not text[end].isalnum()):
            return True
        start = text.find(value, start + 1)
    return False


def _distinctive(value: str) -> bool:
    """Long enough to be data, and not a single lower-case word (a status, a kind: vocabulary)."""
    return len(value) >= MIN_VALUE_CHARS and not (value.isalpha() and value.islower())


def _family_wording(family_instances: Sequence[TaskInstance]) -> tuple[set[tuple[str, ...]], set[str]]:
    """(word runs, values) that are the family's rather than one instance's: runs in >= SHARED_INSTRUCTIONS
    instructions, and runs and values in >= SHARED_PAYLOAD_SHARE of the instances' payloads."""
    in_instructions: Counter[tuple[str, ...]] = Counter()
    runs: Counter[tuple[str, ...]] = Counter()
    values: Counter[str] = Counter()
    for inst in family_instances:
        in_instructions.update(_runs(inst.instruction))
        leaves = {leaf.lower() for leaf in _leaves(inst.payload)}
        values.update(leaves)
        runs.update(set().union(*(_runs(leaf) for leaf in leaves)) if leaves else set())
    least = max(SHARED_INSTRUCTIONS, SHARED_PAYLOAD_SHARE * len(family_instances))
    shared = {r for r, n in in_instructions.items() if n >= SHARED_INSTRUCTIONS}
    return shared | {r for r, n in runs.items() if n >= least}, {v for v, n in values.items() if n >= least}


def harness_text(h: Harness) -> str:
    """Every string of a harness (sections, tool descriptions and examples, hooks, composite tools)."""
    return "\n".join(_leaves(h.model_dump(mode="json")))


class EditGuard:
    """See the module docstring. Build with `for_search` (or directly, for tests with their own wording)."""

    def __init__(self, family: str, instances: Sequence[TaskInstance], allowed_text: str,
                 family_instances: Sequence[TaskInstance], family_tools: Iterable[str],
                 expected: Mapping[str, Any] | None = None) -> None:
        self.family = family
        self.family_tools = set(family_tools) | set(HELPER_SPECS)
        self.allowed = allowed_text.lower()
        self.allowed_runs, self.allowed_values = _family_wording(family_instances)
        self.allowed_runs |= _runs(allowed_text)
        self.values: dict[str, str] = {}  # lowercased value -> the instance it comes from (first seen)
        self.runs: dict[tuple[str, ...], str] = {}
        for inst in instances:
            for leaf in _leaves([inst.payload, (expected or {}).get(inst.id)]):
                low = leaf.lower()
                if _distinctive(low) and low not in self.values and low not in self.allowed_values:
                    self.values[low] = inst.id
                for run in _runs(leaf) - self.allowed_runs:
                    self.runs.setdefault(run, inst.id)
        self.instructions = [i.instruction.lower() for i in family_instances]
        self._allowed_value: dict[str, bool] = {}

    @classmethod
    def for_search(cls, h0: Harness, family: str, instances: Sequence[TaskInstance],
                   expected: Mapping[str, Any] | None = None) -> EditGuard:
        """The guard of one family's search: h0 = the search's start harness plus the family's baseline; the
        family's instructions = its description and its 100 evaluation instances' instructions."""
        from harness.baseline import baseline

        texts = [harness_text(h0)]
        tools = set(h0.tools.known_tools())
        every: Sequence[TaskInstance] = instances
        try:
            import tasks

            fam = tasks.get(family)
            base = baseline(family)
            texts += [harness_text(base), fam.description]
            tools |= base.tools.known_tools()
            every = fam.instances()
        except KeyError:  # a family outside the suite (tests' own): its start harness is all there is
            pass
        if expected is None:
            expected = expected_values(family, instances)
        return cls(family, instances, "\n".join(texts), every, tools, expected)

    # --- the checks ---------------------------------------------------------------------------------
    def check(self, parent: Harness, edit: HarnessEdit, dataset: ReflectiveDataset | None = None) -> list[str]:
        """Why `edit` must not apply to `parent` ([] when it may)."""
        data = json.loads(edit_json(edit))
        strings = [s for s in _leaves(data) if s]
        reasons = [*self.copied(strings), *self.foreign_tools(parent, data, strings),
                   *self.outside_task(strings)]
        lines = self.transcript_lines(strings, dataset)
        if len(lines) > MAX_TRANSCRIPT_LINES:
            reasons.append(f"carries {len(lines)} lines of transcript (at most {MAX_TRANSCRIPT_LINES}): "
                           f"{lines[0][:120]!r} ...")
        return reasons

    def _value_allowed(self, value: str) -> bool:
        if value not in self._allowed_value:
            shared = sum(_holds(t, value) for t in self.instructions)
            self._allowed_value[value] = _holds(self.allowed, value) or shared >= SHARED_INSTRUCTIONS
        return self._allowed_value[value]

    def copied(self, strings: Sequence[str]) -> list[str]:
        """One reason per copied value or word run, naming it and the instance it comes from."""
        out: list[str] = []
        for s in strings:
            low = s.lower()
            for value, inst in self.values.items():
                if value in low and _holds(low, value) and not self._value_allowed(value):
                    out.append(f"memorises the data: copies the value {value!r} of {inst}")
            for run in sorted(_runs(s) & self.runs.keys()):
                out.append(f"memorises the data: copies the words {' '.join(run)!r} of {self.runs[run]}")
        return list(dict.fromkeys(out))

    def foreign_tools(self, parent: Harness, data: Any, strings: Sequence[str]) -> list[str]:
        known = self.family_tools | parent.tools.known_tools() | {c.name for c in parent.composite_tools}
        known |= {c["name"] for c in _adds_composites(data)}
        named = set(_tool_fields(data))
        for s in strings:
            named |= {a or b for a, b in _TOOLISH.findall(s)}
        return [f"names the tool '{t}', which is neither the {self.family} family's nor the harness's"
                for t in sorted(named - known)]

    def outside_task(self, strings: Sequence[str]) -> list[str]:
        out = []
        for s in strings:
            out += [f"tells the student to fetch {u!r}, outside its task" for u in _URL.findall(s)
                    if u.lower() not in self.allowed]
            out += [f"tells the student to reach {m.group(0)!r}, outside its task" for m in _OUTSIDE.finditer(s)]
            out += [f"tells the student to reveal {m.group(1)!r}" for m in _REVEAL.finditer(s)]
        return list(dict.fromkeys(out))

    def transcript_lines(self, strings: Sequence[str], dataset: ReflectiveDataset | None) -> list[str]:
        seen = {ln.strip() for r in (dataset.records if dataset else []) for ln in r.transcript.splitlines()
                if len(ln.strip()) >= MIN_COPIED_LINE_CHARS}
        return [ln.strip() for s in strings for ln in s.splitlines()
                if _TRANSCRIPT_LINE.match(ln) or ln.strip() in seen]


def _tool_fields(data: Any) -> Iterator[str]:
    """Plain tool names under a `tool` key (exposed/hidden tools, examples, composite steps, `require`);
    a regex (`write_.*`) is not a name."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            if k == "tool" and isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
                yield v
            else:
                yield from _tool_fields(v)
    elif isinstance(data, list):
        for v in data:
            yield from _tool_fields(v)


def _adds_composites(data: Any) -> list[dict[str, Any]]:
    tool = data.get("tool") if isinstance(data, Mapping) and data.get("op") == "add_composite_tool" else None
    return [tool] if isinstance(tool, Mapping) and isinstance(tool.get("name"), str) else []


def expected_values(family: str, instances: Sequence[TaskInstance]) -> dict[str, Any]:
    """What each instance's verifier expects, where the family says (an optional `expected_values(instance)` on
    its `Family`); {} otherwise (the payload, which the guard always reads, then carries the data)."""
    try:
        import tasks

        fn = getattr(tasks.get(family), "expected_values", None)
    except KeyError:
        return {}
    return {i.id: fn(i) for i in instances} if fn else {}
