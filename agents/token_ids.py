"""Prompt token ids stored by delta, and their exact reconstruction.

A multi-turn conversation re-sends the whole history each turn, so storing every turn's full prompt ids
grows with the square of the turns. A turn instead stores its prompt against the previous turn's prompt +
completion ids (the "base"):

    prompt = base[:reused] + added[:at] + base[start:start + length] + added[at:]

with `reused` = `prompt_ids_reused`, `added` = `prompt_ids_added` and `[at, start, length]` =
`prompt_ids_copy` (None: no copied run).

- a turn whose prompt extends the previous call's prompt + completion stores only the appended ids;
- a turn whose prompt was rewritten shares a shorter prefix; a context window that drops the oldest turn
  keeps the later ones, which are found in the base and stored as one copied run (`prompt_ids_copy`); what
  is new (the window's note or summary, the appended turn) is stored in `added`. With nothing shared the
  prompt is stored in full;
- a turn without ids (a provider that returns none, a prefix turn given as messages) stores None, and the
  next turn with ids is stored in full.

`turn_token_ids(turns)` gives back every turn's exact (prompt ids, completion ids) in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

_BLOCK = 256
_K = 16  # ids per k-gram when looking for a copied run
MIN_COPY = 64  # shorter runs are stored as added ids


class HasTokenIds(Protocol):
    prompt_ids_reused: int
    prompt_ids_added: list[int] | None
    prompt_ids_copy: list[int] | None
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


def _run_len(a: Sequence[int], i: int, b: Sequence[int], j: int) -> int:
    """How many ids match from a[i] and b[j] on (block-wise slice compares, then per id)."""
    n = 0
    while i + n + _BLOCK <= len(a) and j + n + _BLOCK <= len(b) and list(a[i + n:i + n + _BLOCK]) == list(b[j + n:j + n + _BLOCK]):
        n += _BLOCK
    while i + n < len(a) and j + n < len(b) and a[i + n] == b[j + n]:
        n += 1
    return n


def longest_run(base: Sequence[int], ids: Sequence[int]) -> tuple[int, int, int] | None:
    """(at, start, length): the longest run `ids[at:at+length] == base[start:start+length]` that starts with a
    k-gram of `base` (first occurrence), or None when no run reaches MIN_COPY ids."""
    if len(ids) < MIN_COPY or len(base) < MIN_COPY:
        return None
    first: dict[tuple[int, ...], int] = {}
    for x in range(len(base) - _K + 1):
        first.setdefault(tuple(base[x:x + _K]), x)
    best: tuple[int, int, int] | None = None
    j = 0
    while j <= len(ids) - _K:
        x = first.get(tuple(ids[j:j + _K]))
        if x is None:
            j += 1
            continue
        n = _K + _run_len(base, x + _K, ids, j + _K)
        if n >= MIN_COPY and (best is None or n > best[2]):
            best = (j, x, n)
        j += n
    return best


def encode_prompt(base: Sequence[int], prompt: Sequence[int]) -> tuple[int, list[int], list[int] | None]:
    """(reused, added, copy) for a prompt given the previous turn's prompt + completion ids (`base`)."""
    reused = shared_prefix_len(base, prompt)
    rest = prompt[reused:]
    run = longest_run(base, rest) if reused < len(base) else None  # only a rewritten prompt repeats older ids
    if run is None:
        return reused, list(rest), None
    at, start, length = run
    return reused, [*rest[:at], *rest[at + length:]], [at, start, length]


def decode_prompt(base: Sequence[int], reused: int, added: Sequence[int], copy: Sequence[int] | None) -> list[int]:
    if reused > len(base):
        raise ValueError(f"reuses {reused} prompt ids but the previous turn has {len(base)}")
    if copy is None:
        return [*base[:reused], *added]
    at, start, length = copy
    if start + length > len(base) or at > len(added):
        raise ValueError(f"copies base[{start}:{start + length}] into added[{at}] of {len(base)} / {len(added)} ids")
    return [*base[:reused], *added[:at], *base[start:start + length], *added[at:]]


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
        try:
            prompt = decode_prompt(base, t.prompt_ids_reused, t.prompt_ids_added, t.prompt_ids_copy)
        except ValueError as e:
            raise ValueError(f"turn {i}: {e}") from None
        out.append((prompt, t.completion_token_ids))
        base = next_base(prompt, t.completion_token_ids)
    return out
