"""The harness: the editable program around a model (prompt sections, tool policy, hooks, context policy).

    from harness import Harness, baseline, diff, apply_edits
    h0 = baseline("stock_alert")
    h1 = apply_edits(h0, [InsertSection(section=PromptSection(id="recipe", text="..."))])
    print(diff(h0, h1))

Imports no ray, torch or prefect; the runtime that executes a harness is `agents/rollout.py`.
"""

from harness.baseline import baseline
from harness.context import ContextPolicy
from harness.diffs import diff
from harness.edits import EditError, HarnessEdit, apply_edit, apply_edits, parse_edit
from harness.hooks import Hook
from harness.program import Harness, PromptSection, ToolPolicy
from harness.render import Rendered, render

__all__ = [
    "ContextPolicy", "EditError", "Harness", "HarnessEdit", "Hook", "PromptSection", "Rendered", "ToolPolicy",
    "apply_edit", "apply_edits", "baseline", "diff", "parse_edit", "render",
]
