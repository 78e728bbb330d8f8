"""code_refactor, the show-your-work programs of the refactoring kinds other than rename (program "kinds",
tasks/code_refactor/show_work.py): add_parameter, extract_function and move_module.

Each kind is three shell commands, the same text for every instance of the kind except the names it copies
from the instruction, each copied once into a shell variable at the start of the command that needs it:
1. a search of the references (`grep -rn`), 2. the change and a listing of what it left, 3. the tests.
The search and the change open with the decision flag of the rename program, `tests=1; ` (the change reaches
tests/ too) or `tests=0; ` (tests/ left out): the one token after the prompt that says `update_every_reference` or not.
- add_parameter: a Python program (the shell's `python3 -`) adds `currency` to the function's signature and
  its text, passes `currency="CODE"` at every call (the closing parenthesis found by counting), and in tests/
  appends the code to every expected amount text; with `tests=0` the tests keep the old calls and fail.
- extract_function: sed replaces the inline tax line of core.py by the call and appends the new function (the
  flag changes nothing here: no test names the tax line).
- move_module: the module moves into the subpackage (with an `__init__.py`) and sed rewrites the three import
  forms the package uses; with `tests=0` the tests still import the old module and fail.
After a failing test run, a policy that knows `run_tests_before_finishing` repeats the change's rewrite over
the whole repository and runs the tests again (show_work.py), as the rename does.
"""

from __future__ import annotations

import re

from tasks.code_refactor.data import TEST_COMMAND

TESTS = TEST_COMMAND + " 2>&1 | tail -n 3"  # every program's test run
KINDS: dict[str, re.Pattern[str]] = {
    "add_parameter": re.compile(r"Add a required second parameter `currency` to `(?P<fn>\w+)\(value\)` in "
                                r"`(?P<pkg>\w+)/helpers\.py`.*?pass `currency=\"(?P<cur>\w+)\"`", re.S),
    "extract_function": re.compile(r"In `(?P<pkg>\w+)/core\.py`, extract the tax computation of `\w+` into a "
                                   r"new module-level function `(?P<fn>\w+)\(amount\)`"),
    "move_module": re.compile(r"Move the module `(?P<pkg>\w+)/helpers\.py` into a new subpackage: "
                              r"`\w+/(?P<sub>\w+)/helpers\.py`"),
}
_SCOPE = "$([ $tests = 1 ] || echo --exclude-dir=tests) --include='*.py'"
# add_parameter's rewrite: argv = function, currency code, the files that name the function
_ADD = '''import re, sys
fn, cur = sys.argv[1], sys.argv[2]
for path in sys.argv[3:]:
    s = open(path).read().replace('def ' + fn + '(value):', 'def ' + fn + '(value, currency):')
    s = s.replace('return f"{value:.2f}"', 'return f"{value:.2f} {currency}"')
    out, last = [], 0
    for m in re.finditer(r'(?<!def )\\b' + fn + r'\\(', s):
        depth, i = 1, m.end()
        while depth:
            depth += {'(': 1, ')': -1}.get(s[i], 0)
            i += 1
        if 'currency' in s[m.end():i - 1]:
            continue
        out.append(s[last:i - 1] + ', currency="' + cur + '"')
        last = i - 1
    s = ''.join(out) + s[last:]
    if path.startswith('./tests/'):
        s = re.sub(r"(\\d\\.\\d\\d)'\\)$", r"\\1 " + cur + "')", s, flags=re.M)
    open(path, 'w').write(s)
    print(path)
'''
_EXTRACT_DEF = '\\n\\ndef %s(amount):\\n    """Tax due on an amount, rounded to cents."""\\n    return round(amount * TAX_RATE, 2)\\n'
_MOVE_SED = ('sed -i -E "s/\\b$p\\.helpers\\b/$p.$s.helpers/; s/^from $p import helpers\\$/from $p.$s import helpers/; '
             's/^from \\.helpers import/from .$s.helpers import/"')


def kind_of(instruction: str) -> tuple[str, re.Match[str]] | None:
    """(kind, the request's match) of a non-rename request, else None."""
    return next(((k, m) for k, p in KINDS.items() if (m := p.search(instruction))), None)


# kind -> the request's groups its program copies (training/micro/reading.py makes fresh-value copies of them)
COPIED = {"add_parameter": ("fn", "cur"), "extract_function": ("pkg", "fn"), "move_module": ("pkg", "sub")}


def kind_values(instruction: str) -> list[str]:
    """The values a non-rename request's program copies from it (function, currency, package, subpackage)."""
    found = kind_of(instruction)
    return [found[1][g] for g in COPIED[found[0]]] if found else []


def commands(kind: str, m: re.Match[str], flag: int) -> list[str]:
    """The kind's three commands (search, change, tests) with the decision flag `flag` (1: tests/ included)."""
    head = f"tests={flag}; "
    if kind == "add_parameter":
        change = (f"{head}python3 - {m['fn']} {m['cur']} $(grep -rlw {_SCOPE} '{m['fn']}' .) <<'EOF'\n{_ADD}EOF")
        return [f"{head}grep -rnw {_SCOPE} '{m['fn']}' .", change, TESTS]
    if kind == "extract_function":
        change = (f"{head}p={m['pkg']}; n={m['fn']}; sed -i \"s/tax = round(discounted \\* TAX_RATE, 2)/tax = "
                  f"$n(discounted)/\" $p/core.py && printf '{_EXTRACT_DEF}' $n >> $p/core.py && "
                  f"grep -rn {_SCOPE} 'TAX_RATE' .")
        return [f"{head}grep -rn {_SCOPE} 'TAX_RATE' .", change, TESTS]
    change = (f"{head}p={m['pkg']}; s={m['sub']}; mkdir -p $p/$s && touch $p/$s/__init__.py && "
              f"mv $p/helpers.py $p/$s/helpers.py && {rewrite_move(m)} && grep -rn --include='*.py' 'helpers' .")
    return [f"{head}grep -rn {_SCOPE} 'helpers' .", change, TESTS]


def rewrite_move(m: re.Match[str]) -> str:
    """move_module's import rewrite over the files the search scope names (after `p=...; s=...;`)."""
    return f"grep -rl {_SCOPE} 'helpers' . | xargs {_MOVE_SED}"


def recovery(kind: str, m: re.Match[str]) -> list[str]:
    """After a failing test run: the change's rewrite over the whole repository (`tests=1`), then the tests.
    Only the rewrite part: what moved or was appended stays done."""
    if kind == "add_parameter":
        return [commands(kind, m, 1)[1], TESTS]
    if kind == "move_module":
        return [f"tests=1; p={m['pkg']}; s={m['sub']}; {rewrite_move(m)} && grep -rn --include='*.py' 'helpers' .",
                TESTS]
    return [TESTS]
