"""Canonical messages -> token ids + loss labels, rendered with the student tokenizer's own chat template.

Labels follow the standard causal-LM convention: `labels[i] = input_ids[i]` where position i is trained,
-100 elsewhere (the model shifts them). A trained assistant turn is its content and tool calls plus the
end-of-turn token (`<|im_end|>` for Qwen-style templates); its generation-prompt header
(`<|im_start|>assistant\\n`), whatever the template writes after the end-of-turn token, and all system,
user and tool text stay untrained.

How: for every assistant message i, render `messages[:i]` with the generation prompt (ends with the header)
and `messages[:i+1]` (ends after the turn). The token ids of each rendering must be a prefix of the next
one; then the tokens between the two renderings of turn k are exactly what the model generated in turn k.
A template that breaks this (e.g. one that rewrites earlier turns) raises `PrefixStabilityError` naming the
turn instead of mislabelling silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# End-of-turn tokens a model writes to end its turn, besides the tokenizer's eos (Gemma 4's <turn|>, and the
# <|tool_response> its tool-calling turns end with): training trains through the last one in a turn.
END_OF_TURN = ("<|im_end|>", "<turn|>", "<|tool_response>", "<end_of_turn>", "<|eot_id|>")
MaskMode = Literal["assistant", "turns", "last"]
MASK_MODES: tuple[str, ...] = ("assistant", "turns", "last")
IGNORE = -100


class PrefixStabilityError(ValueError):
    """The chat template re-renders an earlier part of the conversation differently (names the turn)."""


class MaskSelectionError(ValueError):
    """`turns` mode asked for an assistant turn the conversation does not have."""


@dataclass(frozen=True)
class Rendered:
    input_ids: list[int]
    labels: list[int]
    n_assistant_turns: int
    trained_turns: tuple[int, ...]
    # Token span [start, end) of each assistant turn's generated part (header excluded, end token included).
    turn_spans: tuple[tuple[int, int], ...]


def _ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
         generation_prompt: bool, chat_template: str | None) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt,
        chat_template=chat_template,
    )
    # The template writes every special token itself; the tokenizer must not add a BOS on top.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _check_prefix(prev: list[int], nxt: list[int], what: str, tokenizer: Any) -> None:
    if nxt[: len(prev)] == prev:
        return
    at = next((j for j, (a, b) in enumerate(zip(prev, nxt)) if a != b), min(len(prev), len(nxt)))
    context = tokenizer.decode(prev[max(0, at - 8): at + 8])
    raise PrefixStabilityError(
        f"chat template is not prefix-stable at {what}: token {at} differs (near {context!r}); "
        "use a template that renders earlier turns identically (e.g. training/micro/chat_template.jinja) "
        "or pass chat_template=..."
    )


def end_of_turn_ids(tokenizer: Any) -> set[int]:
    """The eos id and the ids of the END_OF_TURN tokens this tokenizer holds as added tokens."""
    added = getattr(tokenizer, "added_tokens_encoder", None) or {}
    return {tokenizer.eos_token_id, *(added[t] for t in END_OF_TURN if t in added)}


def select_turns(mode: MaskMode, n_turns: int, turns: list[int] | tuple[int, ...] | None) -> tuple[int, ...]:
    if mode == "assistant":
        return tuple(range(n_turns))
    if mode == "last":
        return (n_turns - 1,)
    if mode == "turns":
        if not turns:
            raise MaskSelectionError("mask 'turns' needs the assistant turn indices to train on")
        bad = [t for t in turns if not 0 <= t < n_turns]
        if bad:
            raise MaskSelectionError(f"assistant turn(s) {bad} out of range: the conversation has {n_turns}")
        return tuple(sorted(set(turns)))
    raise ValueError(f"unknown mask mode {mode!r}; choose one of {', '.join(MASK_MODES)}")


def render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    mode: MaskMode = "assistant",
    turns: list[int] | tuple[int, ...] | None = None,
    *,
    chat_template: str | None = None,
) -> Rendered:
    """Token ids and labels for canonical `messages` (see training/convert.py).

    Messages after the last assistant turn are left out: no loss could reach them (causal attention).
    """
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos_token: cannot find the end-of-turn token to train on")
    ends = end_of_turn_ids(tokenizer)
    positions = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not positions:
        raise MaskSelectionError("no assistant turn to train on")
    selected = set(select_turns(mode, len(positions), turns))

    spans: list[tuple[int, int]] = []
    prev: list[int] = []
    prev_what = "the start"
    for k, i in enumerate(positions):
        where = f"assistant turn {k} (message {i})"
        head = _ids(tokenizer, messages[:i], tools, True, chat_template)
        _check_prefix(prev, head, f"{where} header, after {prev_what}", tokenizer)
        full = _ids(tokenizer, messages[: i + 1], tools, False, chat_template)
        _check_prefix(head, full, f"{where} body", tokenizer)
        body = full[len(head):]
        last = max((j for j, x in enumerate(body) if x in ends), default=None)
        if last is None:
            raise PrefixStabilityError(f"{where}: the template wrote no end-of-turn token {tokenizer.eos_token!r}")
        # Train through the last end-of-turn token; a trailing newline the template adds is not generated.
        end = len(head) + last + 1
        spans.append((len(head), end))
        prev, prev_what = full, where

    labels = [IGNORE] * len(prev)
    for k in sorted(selected):
        start, end = spans[k]
        labels[start:end] = prev[start:end]
    return Rendered(input_ids=prev, labels=labels, n_assistant_turns=len(positions),
                    trained_turns=tuple(sorted(selected)), turn_spans=tuple(spans))
