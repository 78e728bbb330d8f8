"""Decision points of the show-your-work demonstrations, and the weighted minimal-pair examples built on them.

A decision point is an assistant turn of a demonstration whose action depends on one knowledge item: the
family's show-your-work policy (tasks/<family>/show_work.py) does one thing when it applies the item and another
when it misses it (payroll_audit: the program's first line `deduct_break = True|False`; code_refactor: the
rename's scope `.` or the package directory, or M1's first-word flag `tests=1|0`, and after a failing test run
the recovery or the end; anomaly_detection: `<`/`>` or `<=`/`>=` in the report query, or M1's first-line flag
`WITH k(bounds_normal) AS (VALUES (1|0))`). `decision_points` finds them by asking the policy
for both actions on the demonstration's own history (the policies decide from the instance and the history
only), so nothing here knows a family's program text.

A decision example is the demonstration up to that turn under a generated system prompt (training/micro/
prompts.py), then the turn's tokens up to a few tokens past the part that differs between the two actions; the
tokens that differ carry `weight` (the loss on them counts `weight` times). `pair_batch` makes the minimal pair
the recipe trains on: the same prefix under a harness that states the item (target: applied) and under the same
harness without it (targets: applied and missed, weighted by the policy's probabilities), in one batch.

`apply_probability` is the teacher-forced probe the build scores a model with: the probability the model puts
on the applied action against the missed one, from the first differing token to the end of the differing part.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from harness.program import Harness
from harness.render import system_prompt
from tasks.records import Step
from training.convert import to_student_messages
from training.render import IGNORE, render
from training.micro.policies import action_message, policy

TAIL_TOKENS = 8  # tokens kept (weight 1) after the differing part of a decision turn


@dataclass(frozen=True)
class DecisionPoint:
    family: str
    item: str
    prefix: list[dict[str, Any]]  # the messages before the decision turn (system first)
    tools: list[dict[str, Any]]
    applied: dict[str, Any]  # the assistant message when the item is applied
    missed: dict[str, Any]  # ... when it is missed


def _history(trajectory: Any, upto: int) -> list[Step]:
    return [Step(call=c, result=r) for turn in trajectory.turns[:upto]
            for c, r in zip(turn.tool_calls, turn.tool_results)]


def decision_points(trajectory: Any, knows: frozenset[str], items: Sequence[str],
                    options: Mapping[str, Any] | None = None) -> list[DecisionPoint]:
    """For each of `items` (the family's harness-dependent items), the first turn of a show-your-work
    demonstration played with `knows` where applying or missing the item changes the policy's action."""
    family = trajectory.instance.family
    act = policy(family, options)
    env = SimpleNamespace(instance=trajectory.instance)
    out, found = [], set()
    for i, turn in enumerate(trajectory.turns):
        if turn.context_messages is None:
            continue
        history = _history(trajectory, i)
        for item in (k for k in items if k not in found):
            applied = act(env, history, knows | {item})
            missed = act(env, history, knows - {item})
            if applied != missed:  # the first turn only: later ones follow the demonstration's own choice
                found.add(item)
                out.append(DecisionPoint(family, item, list(trajectory.messages[:turn.context_messages]),
                                         list(trajectory.tools or []), action_message(applied, len(history)),
                                         action_message(missed, len(history))))
    return out


def with_system(prefix: list[dict[str, Any]], harness: Harness) -> list[dict[str, Any]]:
    """The prefix with its system message replaced by `harness`'s system prompt."""
    if not prefix or prefix[0].get("role") != "system":
        raise ValueError("a decision prefix starts with the system message")
    return [{"role": "system", "content": system_prompt(harness)}, *prefix[1:]]


def _turn(tokenizer: Any, prefix: list[dict[str, Any]], tools: list[dict[str, Any]],
          message: dict[str, Any]) -> tuple[list[int], int, int]:
    """Token ids of prefix + message, and the [start, end) span of the message's generated tokens."""
    answers = [{"role": "tool", "tool_call_id": c["id"], "content": ""} for c in message.get("tool_calls") or []]
    messages = to_student_messages([*prefix, message, *answers])  # (a call must be answered to convert)
    r = render(tokenizer, messages[:len(messages) - len(answers)], tools, "last")
    start, end = r.turn_spans[-1]
    return r.input_ids, start, end


def _differing(a: list[int], b: list[int]) -> tuple[int, int, int]:
    """(first differing index, end of the differing block in a, in b) of two token lists."""
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    match = difflib.SequenceMatcher(None, a[first:], b[first:], autojunk=False).get_matching_blocks()
    block = next((m for m in match if m.size >= 3), match[-1])
    # at least the first differing token on each side: where one side inserts tokens, the other side's next
    # token is its choice not to (`<` then ` lo` against `<=`)
    return first, first + max(1, block.a), first + max(1, block.b)


@dataclass(frozen=True)
class Choice:
    """One side of a decision rendered under one system prompt."""

    ids: list[int]  # prefix + the turn up to its differing part + TAIL_TOKENS
    start: int  # first token of the turn
    first: int  # first differing token
    end: int  # end of the differing part


def render_choices(tokenizer: Any, point: DecisionPoint, harness: Harness) -> tuple[Choice, Choice]:
    """(applied, missed) rendered under `harness`'s system prompt."""
    prefix = with_system(point.prefix, harness)
    a_ids, a_start, a_end = _turn(tokenizer, prefix, point.tools, point.applied)
    m_ids, m_start, m_end = _turn(tokenizer, prefix, point.tools, point.missed)
    first, a_stop, m_stop = _differing(a_ids[a_start:a_end], m_ids[m_start:m_end])
    cut = lambda ids, start, stop, end: ids[:min(end, start + stop + TAIL_TOKENS)]  # noqa: E731
    return (Choice(cut(a_ids, a_start, a_stop, a_end), a_start, a_start + first, a_start + a_stop),
            Choice(cut(m_ids, m_start, m_stop, m_end), m_start, m_start + first, m_start + m_stop))


def example(choice: Choice, weight: float) -> tuple[list[int], list[int], list[float]]:
    """(input_ids, labels, weights): the turn's tokens trained, the differing ones `weight` times."""
    labels = [IGNORE] * choice.start + choice.ids[choice.start:]
    weights = [0.0] * choice.start + [weight if choice.first <= i < choice.end else 1.0
                                      for i in range(choice.start, len(choice.ids))]
    return choice.ids, labels, weights


def pair_batch(tokenizer: Any, point: DecisionPoint, stating: Harness, not_stating: Harness, miss: float,
               weight: float, pad_id: int) -> tuple[list[list[int]], list[list[int]], list[list[float]]]:
    """The minimal pair as one right-padded batch of three rows: under `stating` the applied action; under
    `not_stating` the applied action with weight 1 - `miss` and the missed one with weight `miss` (the expected
    loss of the policy's draw, not one draw: the two sides differ by the prompt line and its effect only)."""
    applied, _ = render_choices(tokenizer, point, stating)
    a2, m2 = render_choices(tokenizer, point, not_stating)
    rows = [example(applied, weight), example(a2, weight), example(m2, weight)]
    scale = [1.0, 1.0 - miss, miss]
    width = max(len(ids) for ids, _, _ in rows)
    return ([ids + [pad_id] * (width - len(ids)) for ids, _, _ in rows],
            [labels + [IGNORE] * (width - len(labels)) for _, labels, _ in rows],
            [[x * k for x in w] + [0.0] * (width - len(w)) for (_, _, w), k in zip(rows, scale)])


def _logprob(model: Any, choice: Choice) -> float:
    """Sum of the model's log-probabilities of the choice's tokens [first, end)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([choice.ids[:choice.end]])).logits[0].float()
    logp = torch.log_softmax(logits[choice.first - 1:choice.end - 1], dim=-1)
    targets = torch.tensor(choice.ids[choice.first:choice.end])
    return float(logp.gather(1, targets[:, None]).sum())


def apply_probability(model: Any, tokenizer: Any, point: DecisionPoint, harness: Harness) -> float:
    """P(applied) / (P(applied) + P(missed)) under `harness`, teacher-forced over the differing tokens."""
    applied, missed = render_choices(tokenizer, point, harness)
    la, lm = _logprob(model, applied), _logprob(model, missed)
    return 1.0 / (1.0 + math.exp(max(-60.0, min(60.0, lm - la))))
