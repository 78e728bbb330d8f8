"""Keys never reach what a run writes: every key a model client sends is remembered in its process, and text that
may quote it (a provider error echoing the request's headers, LiteLLM's debug log, a traceback) has it replaced.

    remember(key)          # ModelClient does this for the key of each call
    redact(text)           # '... Authorization: Bearer [redacted] ...'

`remember` also installs, once per process, a log-record factory that redacts every record as it is created
(message, arguments, and the traceback text), whichever logger or handler it goes to: Prefect's run logs, Ray's
worker logs, LiteLLM's debug output, the terminal.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

MASK = "[redacted]"
MIN_KEY_CHARS = 8  # shorter values ('EMPTY', test stand-ins) are not secrets worth a scan of every log line
_KEYS: set[str] = set()
_FORMS: list[str] = []  # the keys, longest first (a key that contains another is replaced whole)
_LOCK = threading.Lock()
_INSTALLED = False


def remember(key: str | None) -> None:
    """Redact `key` from now on in this process (a no-op for short or empty values)."""
    global _FORMS
    if not key or len(key) < MIN_KEY_CHARS or key in _KEYS:
        return
    with _LOCK:
        _KEYS.add(key)
        _FORMS = sorted(_KEYS, key=len, reverse=True)
        _install()


def redact(text: str) -> str:
    """`text` with every remembered key replaced by [redacted]."""
    for form in _FORMS:
        if form in text:
            text = text.replace(form, MASK)
    return text


def _install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if not _FORMS:
            return record
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record whose arguments do not format stays as the logger made it
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
    _INSTALLED = True
