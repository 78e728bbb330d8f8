"""The code-under-test side of the hidden check: runs in the sandbox (`python -I -S -`, stdlib only) and
answers the trusted runner's requests over two FIFOs: import a module, look up an attribute, call a
function with literal arguments. It never sees the hidden tests or their expected values, only the calls
they make; whatever it answers is parsed as plain data (a Python literal) on the other side.

`CONFIG` (a dict: root, channel) is prepended to this source by `tasks.code_refactor.hidden_run`.
"""

import ast
import importlib
import json
import sys
import types

CONFIG: dict = globals().get("CONFIG", {})
MAX_TEXT = 100_000


def _exc(e: BaseException) -> dict:
    return {"exc": [type(e).__name__, type(e).__module__, str(e)[:2000]]}


def _import(name: str) -> dict:
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            return {"missing": True}
        return _exc(e)
    return {"file": getattr(mod, "__file__", None), "pkg": hasattr(mod, "__path__")}


def _attr(module: str, name: str) -> dict:
    mod = sys.modules.get(module) or importlib.import_module(module)
    if not hasattr(mod, name):
        return {"missing": True}
    value = getattr(mod, name)
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if callable(value):
        return {"callable": True}
    return {"value": repr(value)[:MAX_TEXT]}


def _call(module: str, name: str, args: str, kwargs: str) -> dict:
    mod = sys.modules.get(module) or importlib.import_module(module)
    result = getattr(mod, name)(*ast.literal_eval(args), **ast.literal_eval(kwargs))
    return {"value": repr(result)[:MAX_TEXT]}


def _answer(req: dict) -> dict:
    op = req.get("op")
    try:
        if op == "import":
            return _import(req["name"])
        if op == "attr":
            return _attr(req["module"], req["name"])
        if op == "call":
            return _call(req["module"], req["name"], req["args"], req["kwargs"])
    except BaseException as e:  # noqa: BLE001 - the answer names whatever the code under test raised
        return _exc(e)
    return {"exc": ["ValueError", "builtins", f"unknown request {op!r}"]}


def main() -> None:
    sys.path.insert(0, CONFIG["root"])
    sys.dont_write_bytecode = True
    requests = open(CONFIG["channel"] + "/req", encoding="utf-8")
    answers = open(CONFIG["channel"] + "/resp", "w", encoding="utf-8")
    for line in requests:
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        answers.write(json.dumps({"id": req.get("id"), **_answer(req)}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
