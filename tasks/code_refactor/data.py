"""code_refactor data: the seeded package spec and the refactoring request.

The generator draws a small package (names, tax rate, caller modules and their import style) and one of
four refactoring kinds, chosen by index so every split holds every kind at both levels; `package.py`
renders the package's files before and after the refactoring from this spec.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tasks.base import Draft

Kind = Literal["rename", "add_parameter", "extract_function", "move_module"]
KINDS: tuple[Kind, ...] = ("rename", "add_parameter", "extract_function", "move_module")
TEST_COMMAND = "python3 -m unittest discover -s tests -t ."

PACKAGES = ["ledger", "billing", "shop", "orders", "invoicing", "storefront", "checkout", "accounts"]
SYNONYMS = {
    "total": ["compute_total", "order_total", "line_total", "sum_lines"],
    "discount": ["apply_discount", "net_price", "reduce_price", "take_discount"],
    "invoice": ["invoice_amount", "amount_due", "final_amount", "bill_total"],
    "fmt": ["format_amount", "money_text", "render_amount", "as_money"],
    "label": ["labelled", "label_line", "tagged_amount", "caption"],
}
NEW_NAMES = {
    "total": ["calculate_total", "total_price", "gross_total"],
    "discount": ["discount_amount", "apply_percent_off", "price_after_discount"],
    "fmt": ["format_money", "money_string", "amount_text"],
}
TAX_FNS = ["compute_tax", "tax_due", "tax_for", "sales_tax"]
SUBPACKAGES = ["utils", "common", "text", "shared"]
CALLER_MODULES = ["reports", "service", "export", "audit", "summary", "checkout_flow"]
CURRENCIES = ["EUR", "USD", "GBP", "CHF", "JPY"]
# caller function templates: (suffix, parameters, sample arguments as Python literals)
TEMPLATES = {
    "total_line": ("prices, quantities", "[2.5, 4.0, 1.25], [2, 3, 4]"),
    "invoice_text": ("prices, quantities, percent", "[10.0, 3.5], [1, 2], 10"),
    "discount_text": ("amount, percent", "80.0, 15"),
    "summary": ("orders", "[([1.5, 2.0], [2, 1]), ([9.99], [3])]"),
}


class Caller(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    module: str
    module_style: bool  # True: `from pkg import core` + `core.f()`; False: `from pkg.core import f`
    templates: list[str]


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    pkg: str
    names: dict[str, str]
    tax_rate: float
    callers: list[Caller]
    init_reexport: bool
    kind: Kind
    target: str = ""  # rename: key of names
    new_name: str = ""  # rename: new function name; extract_function: the new function
    currency: str = ""  # add_parameter
    subpackage: str = ""  # move_module

    def fn(self, key: str, after: bool) -> str:
        if after and self.kind == "rename" and key == self.target:
            return self.new_name
        return self.names[key]

    @property
    def old_helpers(self) -> str:
        return f"{self.pkg}/helpers.py"

    def helpers_path(self, after: bool) -> str:
        moved = after and self.kind == "move_module"
        return f"{self.pkg}/{self.subpackage}/helpers.py" if moved else self.old_helpers

    def helpers_mod(self, after: bool) -> str:
        moved = after and self.kind == "move_module"
        return f"{self.pkg}.{self.subpackage}.helpers" if moved else f"{self.pkg}.helpers"


def make_spec(rng: random.Random, hard: bool, kind: Kind) -> Spec:
    names = {k: rng.choice(v) for k, v in SYNONYMS.items()}
    n_callers = rng.randint(3, 4) if hard else 2
    callers = []
    for module in rng.sample(CALLER_MODULES, n_callers):
        templates = rng.sample(sorted(TEMPLATES), 2 if hard else rng.randint(1, 2))
        callers.append(Caller(module=module, module_style=rng.random() < 0.5, templates=templates))
    spec = Spec(pkg=rng.choice(PACKAGES), names=names, tax_rate=rng.choice([0.05, 0.07, 0.08, 0.1, 0.2]),
                callers=callers, init_reexport=hard, kind=kind)
    if kind == "rename":
        target = rng.choice(sorted(NEW_NAMES))
        return spec.model_copy(update={"target": target, "new_name": rng.choice(NEW_NAMES[target])})
    if kind == "add_parameter":
        return spec.model_copy(update={"currency": rng.choice(CURRENCIES)})
    if kind == "extract_function":
        return spec.model_copy(update={"new_name": rng.choice(TAX_FNS)})
    return spec.model_copy(update={"subpackage": rng.choice(SUBPACKAGES)})


def request_text(spec: Spec) -> str:
    if spec.kind == "rename":
        module = "helpers" if spec.target == "fmt" else "core"
        return (f"Rename the function `{spec.names[spec.target]}` (defined in `{spec.pkg}/{module}.py`) to "
                f"`{spec.new_name}`. Update its definition and every import, call site and test in the "
                "repository; do not keep an alias under the old name.")
    if spec.kind == "add_parameter":
        return (f"Add a required second parameter `currency` to `{spec.names['fmt']}(value)` in "
                f"`{spec.pkg}/helpers.py`: it must return the two-decimal amount, a space and the currency "
                f"code (e.g. `{spec.names['fmt']}(7.5, \"USD\")` -> `\"7.50 USD\"`). Update every call site "
                f"in the package and the tests to pass `currency=\"{spec.currency}\"`.")
    if spec.kind == "extract_function":
        return (f"In `{spec.pkg}/core.py`, extract the tax computation of `{spec.names['invoice']}` into a new "
                f"module-level function `{spec.new_name}(amount)` that returns `round(amount * TAX_RATE, 2)`, "
                f"and make `{spec.names['invoice']}` call it instead of computing the tax inline. Behaviour "
                "must not change.")
    return (f"Move the module `{spec.pkg}/helpers.py` into a new subpackage: `{spec.pkg}/{spec.subpackage}/"
            f"helpers.py` (with an `__init__.py`). Update every import in the package and the tests; the old "
            f"module `{spec.pkg}.helpers` must no longer exist.")


def instruction(spec: Spec) -> str:
    return (
        f"The workspace holds the Python package `{spec.pkg}/` and its tests in `tests/`.\n"
        f"Refactoring request: {request_text(spec)}\n"
        f"Keep all behaviour otherwise unchanged; the tests must pass (`{TEST_COMMAND}`). "
        "When you are done, reply with a short summary of the change."
    )


def draft(index: int, rng: random.Random) -> Draft:
    """Even indices are easy, odd ones hard; the kind cycles every two indices."""
    hard = index % 2 == 1
    kind = KINDS[(index // 2) % len(KINDS)]
    spec = make_spec(rng, hard, kind)
    return Draft(instruction=instruction(spec), difficulty="hard" if hard else "easy",
                 payload={"spec": spec.model_dump(mode="json")})
