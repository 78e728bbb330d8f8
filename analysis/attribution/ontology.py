"""The failure ontology: six categories (Yang et al.'s five adaptation failures plus one for the platform).

The full definitions and the behaviours that point to each category are in `docs/attribution.md`; the short
forms here are what the judge's rubric quotes. `UNATTRIBUTED` is not a category: it marks a failure an
attributor could not place (an invalid judge answer, no rule of the heuristic matched).
"""

from __future__ import annotations

from typing import Literal

Category = Literal["tool_use", "instruction_following", "implicit_knowledge", "long_context", "planning",
                   "environment_or_harness"]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]
UNATTRIBUTED = "unattributed"
Bucket = Literal["tool_use", "instruction_following", "implicit_knowledge", "long_context", "planning",
                 "environment_or_harness", "unattributed"]
BUCKETS: tuple[str, ...] = Bucket.__args__  # type: ignore[attr-defined]

DEFINITIONS: dict[str, str] = {
    "tool_use": "The model called a tool wrongly: a malformed or mistyped argument, a tool name that does not "
                "exist, or a semantically adjacent wrong tool; the call failed or did the wrong thing and the "
                "model did not repair it.",
    "instruction_following": "The model ignored an explicit constraint of the task text: wrong output file or "
                             "sheet name, wrong or missing columns or fields, wrong format.",
    "implicit_knowledge": "The model applied a wrong domain convention the task relies on but does not spell "
                          "out step by step (an overtime threshold, an inclusive vs exclusive bound, a rounding "
                          "rule, an approval limit): the outputs exist in the right shape with wrong values.",
    "long_context": "The model lost information it had already retrieved once the conversation grew: it "
                    "re-queried unchanged information or used a stale value.",
    "planning": "The model's plan was wrong: it skipped a required subtask (a page of a listing, a thread, an "
                "output), looped on a call, ran out of turns, or finished before the work was done.",
    "environment_or_harness": "Not the model's fault: an infrastructure error (model server, timeout, tool "
                              "crash), a limit (cost, context window, truncation), or a harness component "
                              "(a hook) that blocked a valid call or stopped the episode.",
}
