"""The volatile parts of tool results: what may differ between two executions of the same call sequence on
the same instance, replaced by fixed placeholders (`Environment.normalize_output` of the workspace and
browser runtimes, which `Family.normalize_result` uses). Replaying a recorded prefix compares results after this normalisation, so each pattern here
is narrow: it must not hide a real difference in state.

- temp directories we create (`mkdtemp` names: `/tmp/coevo-payroll_audit-k3j9x0qa`), seen in command
  output under the `rlimit` sandbox backend and in pytest reports;
- durations (`Ran 9 tests in 0.004s`, `5 passed in 1.23s`, `real 0m0.012s`);
- clock readings (`2025-12-03 14:05:06`, `date`'s `14:05:06`), and the modification time, owner and
  group columns of `ls -l` (files a command creates carry the current time; the sandbox's uid is derived
  from the workspace path, so it differs between two workspaces), and `id`'s numbers;
- memory addresses in Python reprs (`<object at 0x7f3a5c2b1d90>`);
- the port of an instance's own shop server (`http://127.0.0.1:41327/lab`).
"""

from __future__ import annotations

import re

_TMP_DIR = re.compile(r"(?:/[\w.+-]+)*/\.?coevo-(?:[a-z_]+-)(?:\d+-)?[a-z0-9_]{8}")
_DURATIONS = (
    (re.compile(r"\b(Ran \d+ tests?) in \d+(?:\.\d+)?s\b"), r"\1 in <t>s"),
    (re.compile(r"\b(passed|failed|error|errors|skipped|warnings?|deselected) in \d+(?:\.\d+)?s\b"), r"\1 in <t>s"),
    (re.compile(r"\b\d+m\d+(?:\.\d+)?s\b"), "<t>"),
)
_CLOCK = (
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<datetime>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
)
# `ls -l`: mode, links, owner, group, size, mtime (`Dec  3 14:05` or `Jan  1  2024`), name
_LS_LINE = re.compile(r"^([-bcdlps][rwxsStT-]{9}[.+@]?\s+\d+\s+)\S+(\s+)\S+(\s+\d+\s+)[A-Z][a-z]{2}\s+\d{1,2}\s+"
                      r"(?:\d{1,2}:\d{2}|\d{4})(?=\s)", re.MULTILINE)
_IDS = re.compile(r"\b(uid|gid|euid|egid|groups)=[\d,()\w-]+")
_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,16}\b")
_PORT = re.compile(r"\b(127\.0\.0\.1|localhost):\d{2,5}\b")


def normalize_command_output(text: str) -> str:
    """Workspace tools (shell, python and the file tools that may show what a command wrote)."""
    text = _TMP_DIR.sub("<tmp>", text)
    for pattern, repl in _DURATIONS + _CLOCK:
        text = pattern.sub(repl, text)
    text = _LS_LINE.sub(r"\1<owner>\2<group>\3<mtime>", text)
    text = _IDS.sub(r"\1=<id>", text)
    return _ADDRESS.sub("0x<addr>", text)


def normalize_browser_output(text: str) -> str:
    """Browser tools and the test runner of the shop families: the server's port, temp paths, durations."""
    text = _PORT.sub(r"\1:<port>", text)
    text = _TMP_DIR.sub("<tmp>", text)
    for pattern, repl in _DURATIONS:
        text = pattern.sub(repl, text)
    return _ADDRESS.sub("0x<addr>", text)


__all__ = ["normalize_browser_output", "normalize_command_output"]
