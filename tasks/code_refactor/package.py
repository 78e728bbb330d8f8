"""code_refactor generator: a small Python package rendered before and after the requested refactoring.

`render(spec, after=False)` is the workspace the agent starts from; `render(spec, after=True)` is the
reference result (the oracle writes it); `hidden_test(spec)` is the checker's unittest module. Expected
values in the tests come from the plain-Python mirrors below, not from running the generated code.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["rename", "add_parameter", "extract_function", "move_module"]
KINDS: tuple[Kind, ...] = ("rename", "add_parameter", "extract_function", "move_module")
HIDDEN_MODULE = "_coevo_hidden_test"

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


# --- plain-Python mirrors of the generated functions (for expected values) ------------------------
def py_total(prices: list[float], quantities: list[int]) -> float:
    return round(sum(p * q for p, q in zip(prices, quantities)), 2)


def py_discount(amount: float, percent: float) -> float:
    return round(amount * (1 - percent / 100), 2)


def py_invoice(prices: list[float], quantities: list[int], percent: float, tax: float) -> float:
    discounted = py_discount(py_total(prices, quantities), percent)
    return round(discounted + round(discounted * tax, 2), 2)


def py_fmt(value: float, currency: str) -> str:
    return f"{value:.2f} {currency}" if currency else f"{value:.2f}"


def py_label(name: str, value: float, currency: str) -> str:
    return f"{name}: " + py_fmt(value, currency)


def py_template(spec: Spec, template: str, after: bool) -> str:
    cur = spec.currency if after and spec.kind == "add_parameter" else ""
    if template == "total_line":
        return py_label("total", py_total([2.5, 4.0, 1.25], [2, 3, 4]), cur)
    if template == "invoice_text":
        return py_fmt(py_invoice([10.0, 3.5], [1, 2], 10, spec.tax_rate), cur)
    if template == "discount_text":
        return py_fmt(py_discount(80.0, 15), cur)
    return py_label("orders", py_total([1.5, 2.0], [2, 1]) + py_total([9.99], [3]), cur)


# --- rendering -----------------------------------------------------------------------------------
def _fmt_call(spec: Spec, after: bool, prefix: str, arg: str) -> str:
    extra = f', currency="{spec.currency}"' if after and spec.kind == "add_parameter" else ""
    return f"{prefix}{spec.fn('fmt', after)}({arg}{extra})"


def core_py(spec: Spec, after: bool) -> str:
    t, d, i = spec.fn("total", after), spec.fn("discount", after), spec.fn("invoice", after)
    extract = after and spec.kind == "extract_function"
    tax_line = f"tax = {spec.new_name}(discounted)" if extract else "tax = round(discounted * TAX_RATE, 2)"
    tax_fn = (f'\n\ndef {spec.new_name}(amount):\n    """Tax due on an amount, rounded to cents."""\n'
              f"    return round(amount * TAX_RATE, 2)\n") if extract else ""
    return (
        f'"""Core arithmetic of the {spec.pkg} package."""\n\nTAX_RATE = {spec.tax_rate}\n\n\n'
        f"def {t}(prices, quantities):\n"
        f'    """Sum of price times quantity, rounded to cents."""\n'
        f"    return round(sum(p * q for p, q in zip(prices, quantities)), 2)\n\n\n"
        f"def {d}(amount, percent):\n"
        f'    """Amount after a percentage discount, rounded to cents."""\n'
        f"    return round(amount * (1 - percent / 100), 2)\n\n\n"
        f"def {i}(prices, quantities, percent):\n"
        f'    """Discounted subtotal plus tax."""\n'
        f"    subtotal = {t}(prices, quantities)\n"
        f"    discounted = {d}(subtotal, percent)\n"
        f"    {tax_line}\n"
        f"    return round(discounted + tax, 2)\n" + tax_fn
    )


def helpers_py(spec: Spec, after: bool) -> str:
    f, lab = spec.fn("fmt", after), spec.fn("label", after)
    param = ", currency" if after and spec.kind == "add_parameter" else ""
    body = 'f"{value:.2f} {currency}"' if param else 'f"{value:.2f}"'
    return (
        f'"""Text helpers of the {spec.pkg} package."""\n\n\n'
        f"def {f}(value{param}):\n"
        f'    """Two-decimal text for an amount."""\n'
        f"    return {body}\n\n\n"
        f"def {lab}(name, value):\n"
        f'    """A "name: amount" line."""\n'
        f'    return f"{{name}}: " + {_fmt_call(spec, after, "", "value")}\n'
    )


def caller_py(spec: Spec, caller: Caller, after: bool) -> str:
    hmod = spec.helpers_mod(after)
    hparent, _, _ = hmod.rpartition(".")
    if caller.module_style:
        imports = [f"from {spec.pkg} import core", f"from {hparent} import helpers"]
        cp, hp = "core.", "helpers."
    else:
        imports = [
            f"from {spec.pkg}.core import {', '.join(spec.fn(k, after) for k in ('discount', 'invoice', 'total'))}",
            f"from {hmod} import {spec.fn('fmt', after)}, {spec.fn('label', after)}",
        ]
        cp = hp = ""
    t, d, i, lab = (spec.fn(k, after) for k in ("total", "discount", "invoice", "label"))
    bodies = {
        "total_line": f'return {hp}{lab}("total", {cp}{t}(prices, quantities))',
        "invoice_text": f"return {_fmt_call(spec, after, hp, f'{cp}{i}(prices, quantities, percent)')}",
        "discount_text": f"return {_fmt_call(spec, after, hp, f'{cp}{d}(amount, percent)')}",
        "summary": f'amounts = [{cp}{t}(p, q) for p, q in orders]\n    return {hp}{lab}("orders", sum(amounts))',
    }
    funcs = []
    for tpl in caller.templates:
        params, _ = TEMPLATES[tpl]
        funcs.append(f"def {caller.module}_{tpl}({params}):\n    {bodies[tpl]}\n")
    return f'"""{caller.module.replace("_", " ").capitalize()} built on the core."""\n\n' + "\n".join(
        sorted(imports)) + "\n\n\n" + "\n\n".join(funcs)


def init_py(spec: Spec, after: bool) -> str:
    if not spec.init_reexport:
        return f'"""The {spec.pkg} package."""\n'
    hrel = f".{spec.subpackage}.helpers" if after and spec.kind == "move_module" else ".helpers"
    t, i, f = spec.fn("total", after), spec.fn("invoice", after), spec.fn("fmt", after)
    return (f'"""The {spec.pkg} package."""\n\nfrom .core import {i}, {t}\nfrom {hrel} import {f}\n\n'
            f'__all__ = ["{f}", "{i}", "{t}"]\n')


def tests_py(spec: Spec, after: bool, class_name: str = "PackageTests") -> str:
    cur = spec.currency if after and spec.kind == "add_parameter" else ""
    t, d, i, f, lab = (spec.fn(k, after) for k in ("total", "discount", "invoice", "fmt", "label"))
    imports = [
        f"from {spec.pkg}.core import {d}, {i}, {t}",
        f"from {spec.helpers_mod(after)} import {f}, {lab}",
    ]
    imports += [f"from {spec.pkg}.{c.module} import {', '.join(f'{c.module}_{x}' for x in c.templates)}"
                for c in spec.callers]
    fmt_args = f'7.5, "{spec.currency}"' if cur else "7.5"
    cases = [
        ("total", f"{t}([2.5, 4.0], [2, 3])", py_total([2.5, 4.0], [2, 3])),
        ("discount", f"{d}(50.0, 20)", py_discount(50.0, 20)),
        ("invoice", f"{i}([20.0], [3], 10)", py_invoice([20.0], [3], 10, spec.tax_rate)),
        ("format", f"{f}({fmt_args})", py_fmt(7.5, cur)),
        ("label", f'{lab}("net", 4)', py_label("net", 4, cur)),
    ]
    for c in spec.callers:
        for x in c.templates:
            cases.append((f"{c.module}_{x}", f"{c.module}_{x}({TEMPLATES[x][1]})", py_template(spec, x, after)))
    methods = [f"    def test_{name}(self):\n        self.assertEqual({expr}, {want!r})" for name, expr, want in cases]
    return ("import unittest\n\n" + "\n".join(imports) + f"\n\n\nclass {class_name}(unittest.TestCase):\n"
            + "\n\n".join(methods) + '\n\n\nif __name__ == "__main__":\n    unittest.main()\n')


def render(spec: Spec, after: bool) -> dict[str, str]:
    files = {
        f"{spec.pkg}/__init__.py": init_py(spec, after),
        f"{spec.pkg}/core.py": core_py(spec, after),
        spec.helpers_path(after): helpers_py(spec, after),
        "tests/__init__.py": "",
        f"tests/test_{spec.pkg}.py": tests_py(spec, after),
    }
    if after and spec.kind == "move_module":
        files[f"{spec.pkg}/{spec.subpackage}/__init__.py"] = ""
    for c in spec.callers:
        files[f"{spec.pkg}/{c.module}.py"] = caller_py(spec, c, after)
    return files


def hidden_test(spec: Spec) -> str:
    """The reference tests plus checks specific to the requested refactoring."""
    base = tests_py(spec, True, class_name="HiddenReferenceTests").split('if __name__ == "__main__"')[0]
    extra = ["import importlib", "", "", "class HiddenRefactorTests(unittest.TestCase):"]
    if spec.kind == "rename":
        extra.append(f"    def test_old_name_gone(self):\n        mod = importlib.import_module('{spec.pkg}.core' "
                     f"if '{spec.target}' != 'fmt' else '{spec.pkg}.helpers')\n"
                     f"        self.assertFalse(hasattr(mod, '{spec.names[spec.target]}'))")
    elif spec.kind == "add_parameter":
        f = spec.fn("fmt", True)
        extra.append(f"    def test_currency_is_used(self):\n        self.assertEqual({f}(3, 'XYZ'), '3.00 XYZ')\n"
                     f"        with self.assertRaises(TypeError):\n            {f}(3)")
    elif spec.kind == "extract_function":
        extra.append(f"    def test_extracted(self):\n        from {spec.pkg}.core import {spec.new_name}\n"
                     f"        self.assertEqual({spec.new_name}(100.0), {round(100.0 * spec.tax_rate, 2)!r})\n"
                     f"        self.assertEqual({spec.new_name}(19.99), {round(19.99 * spec.tax_rate, 2)!r})")
    else:
        extra.append(f"    def test_old_module_gone(self):\n        with self.assertRaises(ImportError):\n"
                     f"            importlib.import_module('{spec.pkg}.helpers')")
    return base + "\n".join(extra) + "\n"


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
