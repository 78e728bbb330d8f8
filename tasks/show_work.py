"""The families' show-your-work policies behind one literal table (the policies the micro student learned from).

    module = tasks.show_work.module("payroll_audit")      # None for a family without one
    if module is not None and module.applies(instance):
        action = module.next_action(env, history, module.ALL_KNOWN)

Each module `tasks/<family>/show_work.py` has `applies(instance)`, `ALL_KNOWN` (every knowledge item) and
`next_action(env, history, knows)`: a policy that writes only values derivable from what the trajectory shows.
A policy with several programs lists them in `PROGRAMS` (default first) and takes `program=` in `next_action`
and in `applies` (a program may cover more instances than another: `covers`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# family -> module of its show-your-work policy. A literal table, not a mutable registry.
SHOW_WORK_TABLE: dict[str, str] = {
    "anomaly_detection": "tasks.anomaly_detection.show_work",
    "code_refactor": "tasks.code_refactor.show_work",
    "payroll_audit": "tasks.payroll_audit.show_work",
    "website_admin": "tasks.website_admin.show_work",
}


def module(family: str) -> ModuleType | None:
    """The family's show-your-work module, or None when the family has none."""
    name = SHOW_WORK_TABLE.get(family)
    return importlib.import_module(name) if name else None


def programs(family: str) -> tuple[str, ...]:
    """The programs of the family's policy where it has several (`PROGRAMS`, the default first); () otherwise."""
    return tuple(getattr(module(family), "PROGRAMS", ()))


# program -> the program it extends: a family whose policy lacks the first acts under the second (code_refactor's
# "kinds" is its "flag" program extended to every refactoring kind; the other families' "flag" is their form of it)
EXTENDS: dict[str, str] = {"kinds": "flag"}


def resolve(family: str, program: str) -> str:
    """The program the family's policy acts under when asked for `program` (itself, or what it extends)."""
    own = programs(family)
    if program and own and program not in own and EXTENDS.get(program) in own:
        return EXTENDS[program]
    return program


def covers(instance: object, program: str = "") -> bool:
    """Whether the family's policy acts on `instance` under `program` (a policy with several programs may cover
    more instances under one: code_refactor's "kinds" covers every refactoring kind, its others renames only)."""
    mod = module(instance.family)  # type: ignore[attr-defined]
    if mod is None:
        return False
    program = resolve(instance.family, program)  # type: ignore[attr-defined]
    if program and program in programs(instance.family):  # type: ignore[attr-defined]
        return bool(mod.applies(instance, program=program))
    return bool(mod.applies(instance))


def check_program(family: str, program: str) -> None:
    """Raise ValueError when `program` is no policy's program, or when the family's policy has several programs
    and this is not one of them. A family whose policy has one program (payroll_audit) or none acts the same
    under every program name, so one name (`flag`) serves every family of a round; a name in `EXTENDS` serves a
    family whose policy lacks it under the program it extends. Empty = the default."""
    program = resolve(family, program)
    if not program:
        return
    known = sorted({p for f in SHOW_WORK_TABLE for p in programs(f)})
    if program not in known:
        raise ValueError(f"showwork/{family}@{program}: unknown program (the policies' programs: {', '.join(known)})")
    if programs(family) and program not in programs(family):
        raise ValueError(f"showwork/{family}@{program}: {family}'s policy has no program {program!r} "
                         f"(its programs: {', '.join(programs(family))})")
