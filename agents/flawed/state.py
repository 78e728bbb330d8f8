"""One conversation's student state, and the store that keeps it (and its environment) between calls.

The student keeps ONE environment per conversation: its belief. While it holds no slip, the belief is the
real state (it executes exactly the calls the rollout executed). After a slip it executes what the student
meant instead of what it emitted, so the two differ until the student re-syncs (replays the real calls).

A call continues a stored conversation when it has the same key (model string, instance, episode seed,
system prompt) and its assistant messages are the ones the student emitted: all of them, or, when the
harness's context policy shows only the last turns, the last ones of them (the turn number and the episode seed
come with the call: agents/flawed/provider.py). Anything else (a prefix written by another
model, a first call) starts a fresh state from the conversation: every executed call in it is replayed.
States are small and kept in a large LRU; environments (browsers, sandboxes) in a small one, and an evicted
environment is rebuilt by replaying the belief's calls, so eviction never changes what the student does.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.flawed.menu import Belief, FamilyMenu
from agents.flawed.profiles import Profile
from agents.records import InjectedFault, parse_tool_calls
from tasks.base import Environment
from tasks.records import Step, ToolCall

Signature = tuple[str, tuple[tuple[str, str], ...]]
BLOCKED = ("[harness] call blocked: ", "[harness] not executed")  # agents.rollout BLOCKED_PREFIX / NOT_RUN


class FlawedError(RuntimeError):
    """The conversation cannot be served (unknown family or profile, a windowed view of an unknown one)."""


@dataclass
class Latch:
    """A fault the student still holds (until feedback that names one of its cues makes it let go)."""

    fault: InjectedFault
    mode: Literal["belief", "slip", "loop", "finish"]
    cues: tuple[str, ...]
    belief: tuple[Belief, str] | None = None


@dataclass
class Conversation:
    key: tuple[str, str, int, str]
    menu: FamilyMenu
    profile: Profile
    stated: frozenset[str]  # knowledge keys the system prompt states
    example_tools: frozenset[str]  # tools whose description shows argument examples
    emitted: list[Signature] = field(default_factory=list)
    n_calls: int = 0  # tool calls in the conversation (call ids are call_<n>, as the oracle's)
    actual: list[ToolCall] = field(default_factory=list)  # calls the real environment executed
    belief_calls: list[ToolCall] = field(default_factory=list)  # calls the belief executed
    history: list[Step] = field(default_factory=list)  # the belief's steps: what the oracle is given
    pending: list[tuple[ToolCall, ToolCall | None]] = field(default_factory=list)  # last turn: (emitted, meant)
    last_final: bool = False
    latches: list[Latch] = field(default_factory=list)
    settled: set[str] = field(default_factory=set)  # once-per-episode faults already drawn
    loop_call: ToolCall | None = None
    n_faults: int = 0

    def beliefs(self) -> list[tuple[Belief, str]]:
        return [lt.belief for lt in self.latches if lt.belief is not None]

    @property
    def diverged(self) -> bool:
        return any(lt.mode == "slip" for lt in self.latches)

    @property
    def finishing(self) -> bool:
        return any(lt.mode == "finish" for lt in self.latches)


def signature(message: dict[str, Any]) -> Signature:
    calls = parse_tool_calls(message.get("tool_calls"))
    return str(message.get("content") or ""), tuple((c.name, c.arguments_json()) for c in calls)


class ConversationStore:
    """Conversations between calls (take removes one, so concurrent callers never share it; put returns it)."""

    def __init__(self, max_envs: int = 16, max_states: int = 4096) -> None:
        self.max_envs, self.max_states = max_envs, max_states
        self._states: OrderedDict[int, Conversation] = OrderedDict()
        self._envs: OrderedDict[int, Environment] = OrderedDict()
        self._next = 0

    def take(self, key: tuple[str, str, int, str], visible: list[Signature],
             turn: int) -> tuple[Conversation, Environment | None] | None:
        for sid, conv in self._states.items():
            if conv.key != key or len(conv.emitted) != turn:
                continue
            full = len(visible) == turn and conv.emitted == visible
            window = 0 < len(visible) < turn and conv.emitted[-len(visible):] == visible
            if full or window:
                del self._states[sid]
                return conv, self._envs.pop(sid, None)
        return None

    def put(self, conv: Conversation, env: Environment | None) -> None:
        sid = self._next
        self._next += 1
        self._states[sid] = conv
        while len(self._states) > self.max_states:
            old, _ = self._states.popitem(last=False)
            self._close(self._envs.pop(old, None))
        if env is not None:
            self._envs[sid] = env
            while len(self._envs) > self.max_envs:
                _, old_env = self._envs.popitem(last=False)
                self._close(old_env)

    def close(self) -> None:
        self._states.clear()
        while self._envs:
            self._close(self._envs.popitem()[1])

    @staticmethod
    def _close(env: Environment | None) -> None:
        if env is not None:
            env.close()
