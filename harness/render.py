"""Render a harness against an environment's tools: the system prompt and the tool list the model sees."""

from __future__ import annotations

import json
import logging

from pydantic import BaseModel, ConfigDict

from harness.helpers import SPECS as HELPER_SPECS
from harness.program import Harness
from tasks.records import ToolSpec

log = logging.getLogger(__name__)


class Rendered(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    system_prompt: str
    tools: list[ToolSpec]
    env_tools: list[str]  # exposed names the environment executes
    helper_tools: list[str]  # exposed names the runtime executes
    composite_tools: list[str] = []  # exposed composite tools (the runtime expands them into environment calls)

    def openai_tools(self) -> list[dict]:
        return [t.openai() for t in self.tools]


def system_prompt(h: Harness) -> str:
    parts = []
    for s in h.sections:
        parts.append(f"## {s.title}\n{s.text.strip()}" if s.title else s.text.strip())
    return "\n\n".join(p for p in parts if p)


def render(h: Harness, env_tools: list[ToolSpec]) -> Rendered:
    exposed: list[ToolSpec] = []
    for spec in env_tools:
        if spec.name in h.tools.hidden:
            continue
        desc = h.tools.descriptions.get(spec.name, spec.description)
        examples = h.tools.examples.get(spec.name)
        if examples:
            desc += "\nExample arguments: " + "; ".join(json.dumps(e, sort_keys=True) for e in examples)
        exposed.append(spec.model_copy(update={"description": desc}))
    env_names = [t.name for t in exposed]
    helpers = []
    for name in h.tools.helpers:
        if name in {t.name for t in env_tools}:  # the environment's own tool of that name wins
            log.warning("helper tool '%s' shadowed by an environment tool of the same name; not exposed", name)
            continue
        spec = HELPER_SPECS[name]
        if name in h.tools.descriptions:
            spec = spec.model_copy(update={"description": h.tools.descriptions[name]})
        exposed.append(spec)
        helpers.append(name)
    composites = _composites(h, {t.name for t in env_tools} | set(helpers))
    exposed += composites
    return Rendered(system_prompt=system_prompt(h), tools=exposed, env_tools=env_names, helper_tools=helpers,
                    composite_tools=[t.name for t in composites])


def _composites(h: Harness, taken: set[str]) -> list[ToolSpec]:
    """The harness's composite tools as tool specs; one named like an environment or helper tool is not shown
    (the other tool wins)."""
    out = []
    for t in h.composite_tools:
        if t.name in taken:
            log.warning("composite tool '%s' shadowed by a tool of the same name; not exposed", t.name)
            continue
        out.append(ToolSpec(name=t.name, description=t.description, parameters=t.openai_parameters()))
    return out
