"""`showwork/<family>[@<program>]`: a SIMULATED expert that repairs a turn in the student's own form.

The correction arm asks its expert to rewrite one failing turn t* of the student's rollout, in the student's
context. An expert asked to *solve* writes its own plan (the oracle's next move from the student's state:
`read_file policy.md`, `list_files`, one large SQL query); the micro student never learned to continue such a
plan. This provider models the paper's premise instead: an expert that, shown the student's state, takes the
action of the policy the student learned from - the family's show-your-work policy
(`tasks/<family>/show_work.py`) knowing every knowledge item (`ALL_KNOWN`) - so the student can carry on.

Where that policy does not apply, it is the oracle's action (`oracle/<family>`):
- code_refactor: rename requests only (the other refactoring kinds get the oracle), every kind under `@kinds`;
- payroll_audit: easy instances only (hard ones, with pay_rates.csv and an XLSX week, get the oracle);
- anomaly_detection and website_admin: every instance (website_admin's policy covers price_of, set_price and
  disable_product and plans the rest as the oracle does);
- budget_approval, stock_alert, browser_automation: no show-your-work policy; always the oracle.

From the student's state the policies repair rather than restart: a payroll program or an anomaly report other
than the policy's own is run or put again, a rename scoped to the package is redone over the repository. It is
a simulation: what a round shows with it is measured against a policy, not a model, and is labelled SIMULATED.
Served exactly as the oracle is (agents/providers/oracle.py: the rollout's shared environment in this process,
else a live replica).
"""

from __future__ import annotations

from agents.providers.oracle import OracleLLM
from tasks import show_work
from tasks.base import Environment, Family
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall

PROVIDER = "showwork"


def applies(instance: TaskInstance, program: str = "") -> bool:
    """Whether the family's show-your-work policy (not the oracle) acts on this instance under `program`."""
    return show_work.covers(instance, program)


def repair_action(fam: Family, env: Environment, history: list[Step], program: str = "") -> ToolCall | FinalAnswer:
    """The show-your-work policy's action knowing every item, or the oracle's where the policy does not apply.
    `program` picks the policy's program where it has several (the student's form: M0 learned the defaults, M1
    the `flag` programs); empty = the default."""
    module = show_work.module(env.instance.family)
    if module is None or not show_work.covers(env.instance, program):
        return fam.oracle_action(env, history)
    known = getattr(module, "ALL_KNOWN", frozenset())
    program = show_work.resolve(env.instance.family, program)
    if program and show_work.programs(env.instance.family):
        return module.next_action(env, history, known, program=program)
    return module.next_action(env, history, known)


class ShowWorkLLM(OracleLLM):
    """LiteLLM handler for `showwork/<family>` and `showwork/<family>@<program>` models (registered by
    agents.providers.registry with the other providers). `@<program>` names the policy's program where it has several
    (`showwork/{family}@flag` repairs in M1's form: the flag programs of anomaly_detection and code_refactor,
    payroll_audit's one program; `@kinds` in the form of an M1 extended to every refactoring kind, code_refactor's
    "kinds" and the others' "flag"); checked when the model is first called."""

    provider = PROVIDER

    def split_name(self, name: str) -> tuple[str, str]:
        family, _, program = name.partition("@")
        show_work.check_program(family, program)
        return family, program

    def action(self, fam: Family, env: Environment, history: list[Step], variant: str = "") -> ToolCall | FinalAnswer:
        return repair_action(fam, env, history, variant)
