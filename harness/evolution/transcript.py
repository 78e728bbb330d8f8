"""Trimmed text views of a conversation, for reflection (a reflector reads evidence, not whole logs)."""

from __future__ import annotations

from typing import Any


def clip(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars` (head and tail kept, the middle replaced by a note)."""
    if len(text) <= max_chars:
        return text
    head = max(0, max_chars * 2 // 3)
    tail = max(0, max_chars - head - 30)
    return f"{text[:head]} ...[{len(text) - head - tail} chars cut]... {text[len(text) - tail:] if tail else ''}"


def _lines(m: dict[str, Any], per_message: int) -> list[str]:
    role = m.get("role", "?")
    out = []
    if m.get("content"):
        out.append(f"{role}: {clip(str(m['content']), per_message)}")
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {}
        out.append(f"{role} calls {fn.get('name')}({clip(str(fn.get('arguments') or ''), per_message)})")
    return out


def render_transcript(messages: list[dict[str, Any]], max_chars: int = 4000, per_message: int = 300) -> str:
    """The conversation after the system prompt, one line per message or call, each clipped to `per_message`
    characters; the whole clipped to `max_chars` keeping the start and the end (where failures show)."""
    lines = [line for m in messages if m.get("role") != "system" for line in _lines(m, per_message)]
    return clip("\n".join(lines), max_chars)
