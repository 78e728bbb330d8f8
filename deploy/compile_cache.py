"""vLLM's torch.compile cache: the entry a killed compile left broken, found from a failed server's log.

vLLM compiles the model once per configuration and keeps the result under `~/.cache/vllm/torch_compile_cache/`
(`VLLM_CACHE_ROOT`). A server killed while it compiles (a session's end, Ctrl-C, `coevo serve stop` during the
start) can leave a shared object written halfway: every later server of that configuration then dies at start with

    ImportError: .../torch_compile_cache/torch_aot_compile/<key>/inductor_cache/ho/c....main.so: file too short

(seen 2026-12-06 here: a benchmark's server stopped mid-compile, the next start of the same configuration failed
within 4 minutes). `broken_entry(log)` names the cache entry such a log points at, `<cache>/<kind>/<key>` (or
`<cache>/<key>` for a layout without a kind level); the server's start removes it and compiles again once.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_TRUNCATED = re.compile(r"(/\S*?/torch_compile_cache/\S+?): file too short")
_KINDS = ("torch_aot_compile",)  # cache levels above the per-configuration key


def broken_entry(log_text: str) -> Path | None:
    """The compile-cache entry whose truncated file the log reports, or None when the log reports none."""
    m = _TRUNCATED.search(log_text)
    if m is None:
        return None
    path = Path(m.group(1))
    parts = path.parts
    root = parts.index("torch_compile_cache")
    depth = root + 2 + (1 if len(parts) > root + 1 and parts[root + 1] in _KINDS else 0)
    if len(parts) <= depth:  # the file sits at the cache's top: nothing narrower to remove
        return None
    return Path(*parts[:depth])


def remove_broken_entry(log_text: str) -> Path | None:
    """Remove the entry `broken_entry` names (it recompiles at the next start); the path removed, or None."""
    entry = broken_entry(log_text)
    if entry is None or not entry.is_dir():
        return None
    shutil.rmtree(entry, ignore_errors=True)
    return entry
