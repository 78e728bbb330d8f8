"""The environments rollouts of this process are running, shared by key with our own in-process providers.

`oracle/<family>` used to reach a conversation's state by replaying its tool calls on its own copy of the
environment: every tool call ran twice, and on the browser families the copy was a second browser context
(about half of a browser rollout's time, benchmarks/README.md). A rollout now shares its environment for the
length of the episode (`share`), passes the key with each model call (`context={"env_key": ...}`, which only
our own providers receive), and the oracle reads the state where it already is: `env.steps` is every tool
call the environment executed since its last reset, with its result.

Only the process that runs the episode can look the key up (a plain dict, no pickling), so a provider in
another process, or a caller without a rollout (`oracle_reply`, a correction's rewrite call), falls back to
replaying. Readers must not call the environment's tools: the rollout owns it, and it is between two of its
own calls only while it awaits the model.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from tasks.base import Environment

_SHARED: dict[str, Environment] = {}
_COUNTER = itertools.count()


@contextmanager
def share(env: Environment) -> Iterator[str]:
    """Register `env` under a fresh key for the duration of the block."""
    key = f"env-{next(_COUNTER)}-{id(env):x}"
    _SHARED[key] = env
    try:
        yield key
    finally:
        _SHARED.pop(key, None)


def lookup(key: object, instance_id: str) -> Environment | None:
    """The environment shared under `key` if it is alive in this process and runs `instance_id`, else None."""
    env = _SHARED.get(key) if isinstance(key, str) else None
    return env if env is not None and env.instance.id == instance_id else None


def n_shared() -> int:
    return len(_SHARED)
