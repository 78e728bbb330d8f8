"""Prompt token ids stored by delta, and their exact reconstruction.

A multi-turn conversation re-sends the whole history each turn, so storing every turn's full prompt ids
grows with the square of the turns. A turn instead stores how many leading ids it shares with the previous
turn's prompt + completion (`prompt_ids_reused`) and only the ids after those (`prompt_ids_added`):

- a turn whose prompt extends the previous call's prompt + completion stores only the appended ids;
- a turn whose prompt was rewritten (a context window, a summary, a chat template that re-renders the last
  reply differently) shares a shorter prefix and stores the rest; with nothing shared it is stored in full;
- a turn without ids (a provider that returns none, a prefix turn given as messages) stores None, and the
  next turn with ids is stored in full.

`turn_token_ids(turns)` gives back every turn's exact (prompt ids, completion ids) in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

_BLOCK = 256


class HasTokenIds(Protocol):
    prompt_ids_reused: int
    prompt_ids_added: list[int] | None
    completion_token_ids: list[int] | None


def shared_prefix_len(base: Sequence[int], ids: Sequence[int]) -> int:
    """Length of the longest common prefix of `base` and `ids` (block-wise slice compares, then per id)."""
    n = min(len(base), len(ids))
    if list(base[:n]) == list(ids[:n]):
        return n
    i = 0
    while i + _BLOCK <= n and list(base[i:i + _BLOCK]) == list(ids[i:i + _BLOCK]):
        i += _BLOCK
    while i < n and base[i] == ids[i]:
        i += 1
    return i


def encode_prompt(base: Sequence[int], prompt: Sequence[int]) -> tuple[int, list[int]]:
    """(reused, added) for a prompt given the previous turn's prompt + completion ids (`base`)."""
    reused = shared_prefix_len(base, prompt)
    return reused, list(prompt[reused:])


def next_base(prompt: list[int] | None, completion: list[int] | None) -> list[int]:
    """What the next turn's prompt is compared with: this turn's prompt + completion ([] without prompt ids)."""
    return [] if prompt is None else [*prompt, *(completion or [])]


def turn_token_ids(turns: Sequence[HasTokenIds]) -> list[tuple[list[int], list[int] | None] | None]:
    """Every turn's exact (prompt ids, completion ids), or None for a turn without prompt ids."""
    out: list[tuple[list[int], list[int] | None] | None] = []
    base: list[int] = []
    for i, t in enumerate(turns):
        if t.prompt_ids_added is None:
            out.append(None)
            base = []
            continue
        if t.prompt_ids_reused > len(base):
            raise ValueError(f"turn {i} reuses {t.prompt_ids_reused} prompt ids but the previous turn has {len(base)}")
        prompt = [*base[: t.prompt_ids_reused], *t.prompt_ids_added]
        out.append((prompt, t.completion_token_ids))
        base = next_base(prompt, t.completion_token_ids)
    return out
