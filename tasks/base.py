"""The task contract every family implements (the seam between tasks and everything else).

A `Family` generates seeded instances (indices 0-19 train, 20-39 val, 40-99 test, >= 1000 pretrain), builds
an `Environment` per instance, has an oracle policy and names every check its verifier can report. Every
family is one package of the same shape: `data.py` (seeded generation: `draft(index, rng)`), `env.py` (tools,
state and `snapshot()`), `oracle.py` (`next_action(env, history)`), `verify.py` (`verify(instance,
snapshot)` and `CHECK_NAMES`), and `__init__.py` declaring the `Family`.

`Environment` contract (invariants the rest of the product relies on):
- `reset()` (re)builds the initial state from the instance alone and returns the task prompt. Calling it
  again discards all state: that is what makes `replay` exact.
- `tools()` lists `ToolSpec`s; `call(name, arguments)` never raises: an unknown tool, invalid JSON,
  missing/extra/mistyped arguments, a huge string or a tool's own `ToolError` all come back as
  `ToolResult(is_error=True)` with a message the model can act on, and nothing is half-written.
- Synchronous tools run in a thread pool (`tasks.tooling.off_loop`), async tools on the caller's loop, so a
  tool never blocks the loop. Callers await one call of an environment at a time (the rollout loop does);
  calls of different environments may overlap.
- Tools are deterministic: no wall-clock time, no unseeded randomness. The same instance and the same
  call sequence give the same results and the same state (`replay`), up to the volatile parts that
  `Family.normalize_result` names (temp paths, ports, durations).
- `submit(FinalAnswer)` records the agent's final message. `snapshot()` returns the final state as the
  verifier reads it: a frozen record, a copy that shares nothing with the live environment. `verify()`
  judges it (`verify(instance, snapshot())` of the family's verify module) and never raises for a wrong or
  missing answer: it scores it.
- Each environment owns its state (temp workspace, database, browser); `close()` frees it and is safe
  to call twice. Nothing leaks between environments running in parallel.
- `steps` lists every call since the last reset with its result (what the oracle plans from when it reads a
  rollout's own environment: agents/shared_env.py).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import ModuleType
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from tasks.records import PRETRAIN_START, SPLITS, FinalAnswer, Split, Step, TaskInstance, ToolCall, ToolResult, ToolSpec, Verdict
from tasks.tooling import MAX_ARGUMENTS_JSON_CHARS, ToolError, is_tool, off_loop, spec_for, validate_arguments

log = logging.getLogger(__name__)

N_INSTANCES = 100
SPLIT_RANGES: dict[Split, range] = {"train": range(0, 20), "val": range(20, 40), "test": range(40, 100)}
MAX_RESULT_CHARS = 20_000  # the environment's own cap; harness context policy may cut further


def split_of(index: int) -> Split:
    """train 0-19, val 20-39, test 40-99, pretrain >= 1000 (100-999 are reserved and refused)."""
    for split, rng in SPLIT_RANGES.items():
        if index in rng:
            return split
    if index >= PRETRAIN_START:
        return "pretrain"
    raise ValueError(f"instance index {index} is neither 0..{N_INSTANCES - 1} (train/val/test) nor >= {PRETRAIN_START} (pretrain)")


def pretrain_indices(n: int, start: int = 0) -> range:
    """The first `n` pretrain indices after skipping `start` of them: disjoint from train/val/test by construction."""
    return range(PRETRAIN_START + start, PRETRAIN_START + start + n)


def instance_seed(family: str, index: int) -> int:
    """Process-independent seed (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(f"{family}:{index}".encode()).digest()[:4], "big")


class Environment(ABC):
    """Base environment: subclasses declare tools with `@tool` methods and implement the hooks below."""

    def __init__(self, instance: TaskInstance) -> None:
        self.instance = instance
        self.final_answer: FinalAnswer | None = None
        self.steps: list[Step] = []  # every tool call executed since the last reset, with its result

    # --- to implement -------------------------------------------------------------------------
    @abstractmethod
    def _setup(self) -> None:
        """Build the initial state from `self.instance` (called by reset; must discard earlier state)."""

    @abstractmethod
    def verify(self) -> Verdict:
        """Judge the current state: families implement it as `verify(self.instance, self.snapshot())`."""

    def snapshot(self) -> BaseModel:
        """The state the verifier reads, as a frozen record that shares nothing with this environment."""
        raise NotImplementedError(f"{type(self).__name__} does not provide a snapshot()")

    def _teardown(self) -> None:
        """Free resources (temp dirs, browsers). Must tolerate being called when setup never ran."""

    @staticmethod
    def normalize_output(text: str) -> str:
        """A tool result with the volatile parts this runtime's tools print (temp paths, ports, durations:
        tasks/runtime/volatile.py) replaced by placeholders. Identity here; the workspace and browser
        runtimes override it."""
        return text

    # --- provided -----------------------------------------------------------------------------
    def reset(self) -> str:
        self._teardown()
        self.final_answer = None
        self.steps = []
        self._setup()
        return self.instance.instruction

    def tools(self) -> list[ToolSpec]:
        return [spec_for(getattr(self, name)) for name in self._tool_names()]

    def _tool_names(self) -> list[str]:
        return list(_tool_names_of(type(self)))

    async def call(self, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
        result = await self._call(name, arguments)
        recorded = arguments if isinstance(arguments, (dict, str)) else {} if arguments is None else repr(arguments)
        self.steps.append(Step(call=ToolCall(name=name, arguments=recorded), result=result))
        return result

    async def _call(self, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
        try:
            if name not in self._tool_names():
                raise ToolError(f"unknown tool '{name}'; available tools: {', '.join(self._tool_names())}")
            args = parse_arguments(arguments)
            fn = getattr(self, name)
            kwargs = validate_arguments(fn, args)
            # Synchronous tools (SQL, parsing, spreadsheets) run off the event loop: the episode's wall-clock
            # limit keeps working and the other episodes on this loop keep running meanwhile.
            out = await fn(**kwargs) if inspect.iscoroutinefunction(fn) else await off_loop(fn, **kwargs)
            if inspect.isawaitable(out):
                out = await out
            return ToolResult(content=_truncate(out if isinstance(out, str) else json.dumps(out, default=str)))
        except ToolError as e:
            return ToolResult(content=f"Error: {e}", is_error=True)
        except Exception as e:  # a tool bug must not kill the rollout; the model sees it as an error
            log.warning("tool %s raised %s: %s", name, type(e).__name__, e)
            return ToolResult(content=f"Error: {type(e).__name__}: {_truncate(str(e), 2000)}", is_error=True)

    async def submit(self, answer: FinalAnswer) -> None:
        self.final_answer = answer

    async def replay(self, tool_calls: Sequence[ToolCall]) -> list[Step]:
        """Reset, then re-execute `tool_calls` in order: the state after a trajectory prefix."""
        self.reset()
        for c in tool_calls:
            await self.call(c.name, c.arguments)
        return [Step(call=c, result=s.result) for c, s in zip(tool_calls, self.steps, strict=True)]

    def close(self) -> None:
        self._teardown()

    def __enter__(self) -> "Environment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_arguments(arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str) and len(arguments) > MAX_ARGUMENTS_JSON_CHARS:
        raise ToolError(f"the arguments are {len(arguments)} characters of JSON; the limit is {MAX_ARGUMENTS_JSON_CHARS} "
                        "(send less per call)")
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, TypeError) as e:
        raise ToolError(f"arguments are not valid JSON ({e}); send a JSON object") from None
    except RecursionError:
        raise ToolError("arguments are nested too deeply to parse; send a flat JSON object") from None
    if not isinstance(parsed, dict):
        raise ToolError(f"arguments must be a JSON object, got {type(parsed).__name__}")
    return parsed


def _truncate(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


class Draft(BaseModel):
    """What a family's `data.draft(index, rng)` returns: the instance minus the fields `Family` fills in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instruction: str
    difficulty: str
    payload: dict[str, Any]


class Family:
    """A task family, declared in its package's `__init__.py` (`tasks/<family>/__init__.py`). The declaration
    states `name`, `description` and `env_class` (`env.<Family>Env`, built per instance: cheaply, heavy work
    belongs in `_setup`), and only what differs from these defaults, taken from the package's own modules:

    - `draft(index, rng)`: `data.draft`, drawing only from the seeded `rng` it is given;
    - `oracle_action(env, history)`: `oracle.next_action` on the family's own environment, the reference policy;
    - `check_names`: `verify.CHECK_NAMES`, every check name a verdict of this family can contain;
    - `difficulties`: easy and hard;
    - `normalize_result(tool, content)`: its environment's `normalize_output(content)`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    env_class: ClassVar[type[Environment]]
    difficulties: ClassVar[tuple[str, ...]] = ("easy", "hard")
    check_names: ClassVar[tuple[str, ...]]
    data_module: ClassVar[ModuleType]
    oracle_module: ClassVar[ModuleType]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The defaults from the declaring package's `data`, `oracle` and `verify` modules (imported now)."""
        super().__init_subclass__(**kwargs)
        missing = [k for k in ("name", "description", "env_class") if not hasattr(cls, k)]
        if missing:
            raise TypeError(f"family {cls.__name__} must state {', '.join(missing)} (tasks.base.Family)")
        package = cls.__module__
        cls.data_module = importlib.import_module(f"{package}.data")
        cls.oracle_module = importlib.import_module(f"{package}.oracle")
        if not hasattr(cls, "check_names"):
            cls.check_names = importlib.import_module(f"{package}.verify").CHECK_NAMES

    def draft(self, index: int, rng: random.Random) -> Draft:
        """The instance's text, difficulty and payload; `rng` is seeded by (family, index)."""
        return self.data_module.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        """Next action of the reference policy from the current state of `env` (privileged access allowed).

        Must solve the instance from any reachable state where that is still possible.
        """
        return self.oracle_module.next_action(self.own_env(env), history)

    def generate(self, index: int) -> TaskInstance:
        """Deterministic in (family, index); an index that is in no split is refused before any work."""
        split = split_of(index)
        seed = instance_seed(self.name, index)
        d = self.draft(index, random.Random(seed))
        return TaskInstance(id=f"{self.name}/{index}", family=self.name, index=index, split=split,
                            instruction=d.instruction, difficulty=d.difficulty, seed=seed, payload=d.payload)

    def make_env(self, instance: TaskInstance) -> Environment:
        return self.env_class(instance)

    def own_env(self, env: Environment) -> Any:
        """`env`, checked to be this family's environment (the oracle reads its state)."""
        if not isinstance(env, self.env_class):
            raise TypeError(f"{self.name} oracle needs a {self.env_class.__name__}, got {type(env).__name__}")
        return env

    def normalize_result(self, tool: str, content: str) -> str:
        """A tool result with its volatile parts (e.g. timestamps, generated ids) replaced by placeholders.

        Replaying a recorded prefix compares each replayed result with the recorded one after this
        normalisation (`agents.prefix`). By default the environment's runtime says what is volatile
        (`Environment.normalize_output`); a family whose own tools print more overrides this.
        """
        return self.env_class.normalize_output(content)

    def instances(self, split: Split | None = None, n: int | None = None) -> list[TaskInstance]:
        """A split's instances (all 100 evaluation instances when None); `pretrain` needs `n` (it is unbounded)."""
        if split == "pretrain":
            if n is None:
                raise ValueError("the pretrain split is unbounded: pass n")
            return [self.generate(i) for i in pretrain_indices(n)]
        indices = SPLIT_RANGES[split] if split else range(N_INSTANCES)
        return [self.generate(i) for i in (indices if n is None else indices[:n])]


__all__ = [
    "SPLITS",
    "SPLIT_RANGES",
    "Draft",
    "Environment",
    "Family",
    "FinalAnswer",
    "Step",
    "TaskInstance",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "ToolSpec",
    "Verdict",
    "instance_seed",
    "pretrain_indices",
    "split_of",
]


@functools.cache
def _tool_names_of(cls: type) -> tuple[str, ...]:
    """The `@tool` methods of an environment class (a class's tools never change, and `call` asks every time)."""
    return tuple(sorted(n for n in dir(cls) if not n.startswith("_") and is_tool(getattr(cls, n))))
