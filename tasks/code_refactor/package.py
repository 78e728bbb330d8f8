"""code_refactor package: the generated package's files, rendered before and after the requested refactoring.

`render(spec, after=False)` is the workspace the agent starts from; `render(spec, after=True)` is the
reference result (the oracle writes it); `hidden_test(spec)` is the checker's unittest module. Expected
values in the tests come from the plain-Python mirrors below, not from running the generated code.
"""

from __future__ import annotations

from tasks.code_refactor.data import TEMPLATES, Caller, Spec

HIDDEN_MODULE = "_coevo_hidden_test"


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
