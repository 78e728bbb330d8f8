"""An in-memory store of named text objects: the simulated file store / storage bucket of the service-style
families (budget_approval's files, anomaly_detection's bucket).

Keys are checked before anything is written, so a bad key or an oversized object never half-writes.
The store is plain data (a dict), so replaying the same calls gives the same contents.
"""

from __future__ import annotations

import re

from tasks.tooling import ToolError

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]*$")
MAX_KEY_CHARS = 200


class TextStore:
    """Key -> text. `kind` ('file', 'object') only shapes the error messages the model reads."""

    def __init__(self, *, kind: str = "file", max_chars: int = 200_000, max_items: int = 200) -> None:
        self.kind = kind
        self.max_chars = max_chars
        self.max_items = max_items
        self._items: dict[str, str] = {}

    def check_key(self, key: str) -> str:
        key = key.strip()
        if not key or len(key) > MAX_KEY_CHARS:
            raise ToolError(f"{self.kind} name must be 1..{MAX_KEY_CHARS} characters")
        if not _KEY_RE.match(key) or ".." in key.split("/") or key.endswith("/") or "//" in key:
            raise ToolError(
                f"invalid {self.kind} name '{key[:80]}': use letters, digits, '.', '_', '-' and '/' separators "
                "(relative, no '..')"
            )
        return key

    def put(self, key: str, content: str) -> str:
        key = self.check_key(key)
        if len(content) > self.max_chars:
            raise ToolError(f"{self.kind} content is {len(content)} characters; the limit is {self.max_chars}")
        if key not in self._items and len(self._items) >= self.max_items:
            raise ToolError(f"the store is full ({self.max_items} {self.kind}s); overwrite an existing one")
        self._items[key] = content
        return key

    def get(self, key: str) -> str:
        key = self.check_key(key)
        if key not in self._items:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise ToolError(f"no {self.kind} named '{key}'; existing: {known}")
        return self._items[key]

    def peek(self, key: str) -> str | None:
        """Privileged read for verifiers and oracles: no key validation, None when absent."""
        return self._items.get(key.strip())

    def list(self, prefix: str = "") -> list[dict[str, object]]:
        return [{"name": k, "chars": len(v)} for k, v in sorted(self._items.items()) if k.startswith(prefix)]

    def snapshot(self) -> dict[str, str]:
        return dict(sorted(self._items.items()))
