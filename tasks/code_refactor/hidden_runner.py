"""The trusted side of the hidden check: a fresh `python -I -S -` on the host (stdlib only) that never
imports the code under test. It runs the hidden unittest module, whose imports of the agent's package
resolve to proxy modules: every attribute lookup and call is sent to the sandboxed `hidden_server` and
its answer parsed as a plain literal, so the assertions, the test framework and the count of tests run
all live here, out of the agent's reach. The report is the last line of this process's stdout (a pipe
only the verifier holds).

`CONFIG` (hidden_source, hidden_module, hidden_file, pkg, channel, wall_s, dead_token) is prepended to
this source by `tasks.code_refactor.hidden_run`.
"""

import ast
import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import linecache
import os
import select
import sys
import time
import unittest

CONFIG: dict = globals().get("CONFIG", {})
MAX_LINE = 1 << 20
_DEADLINE = time.monotonic() + CONFIG.get("wall_s", 20.0)


class _Channel:
    """JSON lines to the server (req FIFO) and back (resp FIFO); a missing answer is an error, never a wait
    past the deadline."""

    def __init__(self, directory: str) -> None:
        self.req = os.open(directory + "/req", os.O_RDWR | os.O_NONBLOCK)
        self.resp = os.open(directory + "/resp", os.O_RDWR | os.O_NONBLOCK)
        self.buf = b""
        self.next_id = 0
        self.gone = ""

    def ask(self, msg: dict) -> dict:
        if self.gone:
            return {"gone": self.gone}
        self.next_id += 1
        data = (json.dumps({"id": self.next_id, **msg}) + "\n").encode()
        while data and not self.gone:
            if not select.select([], [self.req], [], max(_DEADLINE - time.monotonic(), 0))[1]:
                self.gone = "the code under test stopped reading (time limit)"
                break
            data = data[os.write(self.req, data):]
        while not self.gone:
            line = self._line()
            if line is None:
                break
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if isinstance(answer, dict) and answer.get("id") == self.next_id:
                return answer
        return {"gone": self.gone}

    def _line(self) -> str | None:
        while b"\n" not in self.buf:
            left = _DEADLINE - time.monotonic()
            if left <= 0 or not select.select([self.resp], [], [], left)[0]:
                self.gone = "the code under test did not answer within the time limit"
                return None
            self.buf += os.read(self.resp, 65536)
            if len(self.buf) > MAX_LINE and b"\n" not in self.buf:
                self.gone = "the code under test sent an answer over 1 MiB"
                return None
        line, _, self.buf = self.buf.partition(b"\n")
        if line.strip() == CONFIG["dead_token"].encode():
            self.gone = "the code under test ended before answering"
            return None
        return line.decode("utf-8", "replace")


CHANNEL: _Channel | None = None


class Opaque:
    """A value that is not a plain literal: equal only to itself."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return Opaque(text[:2000])


def _exception(answer: dict) -> BaseException:
    if "gone" in answer:
        return RuntimeError(answer["gone"])
    name, module, text = (list(answer.get("exc") or []) + ["Exception", "builtins", ""])[:3]
    cls = getattr(builtins, str(name), None) if module == "builtins" else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(str(name), (Exception,), {"__module__": str(module)})
    return cls(str(text))


def _ask(msg: dict) -> dict:
    assert CHANNEL is not None
    return CHANNEL.ask(msg)


def _proxy_callable(module: str, name: str):
    def call(*args, **kwargs):
        answer = _ask({"op": "call", "module": module, "name": name, "args": repr(args), "kwargs": repr(kwargs)})
        if "value" in answer:
            return _literal(str(answer["value"]))
        raise _exception(answer)

    call.__name__ = call.__qualname__ = name
    call.__module__ = module
    return call


def _module_getattr(module: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        answer = _ask({"op": "attr", "module": module, "name": name})
        if answer.get("missing"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if "module" in answer:
            value = importlib.import_module(str(answer["module"]))
        elif answer.get("callable"):
            value = _proxy_callable(module, name)
        elif "value" in answer:
            value = _literal(str(answer["value"]))
        else:
            raise _exception(answer)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__


class _ProxyLoader(importlib.abc.Loader):
    def __init__(self, answer: dict) -> None:
        self.answer = answer

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        if "file" not in self.answer:
            raise _exception(self.answer)
        if self.answer["file"] is not None:
            module.__file__ = str(self.answer["file"])
        module.__getattr__ = _module_getattr(module.__name__)


class _ProxyFinder(importlib.abc.MetaPathFinder):
    """Modules of the agent's package: proxies for the sandboxed ones."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != CONFIG["pkg"]:
            return None
        answer = _ask({"op": "import", "name": name})
        if answer.get("missing"):
            return None
        spec = importlib.machinery.ModuleSpec(name, _ProxyLoader(answer), is_package=bool(answer.get("pkg")))
        if answer.get("file"):
            spec.origin = str(answer["file"])
        return spec


class _HiddenLoader(importlib.machinery.SourceFileLoader):
    """The hidden test module, from memory, under the file name its tracebacks show."""

    def get_data(self, path):
        return CONFIG["hidden_source"].encode()

    def path_stats(self, path):
        raise OSError("in memory")


class _HiddenFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != CONFIG["hidden_module"]:
            return None
        loader = _HiddenLoader(name, CONFIG["hidden_file"])
        return importlib.util.spec_from_file_location(name, CONFIG["hidden_file"], loader=loader)


def _is_ours(tb) -> bool:
    return tb.tb_frame.f_globals is globals()


class _Result(unittest.TextTestResult):
    """Tracebacks without the proxy's own frames (they would only name this runner)."""

    def _exc_info_to_string(self, err, test):
        exctype, value, tb = err
        while tb is not None and _is_ours(tb):
            tb = tb.tb_next
        node = tb
        while node is not None:
            while node.tb_next is not None and _is_ours(node.tb_next):
                node.tb_next = node.tb_next.tb_next
            node = node.tb_next
        return super()._exc_info_to_string((exctype, value, tb), test)


def main() -> None:
    global CHANNEL
    sys.dont_write_bytecode = True
    source = CONFIG["hidden_source"]
    linecache.cache[CONFIG["hidden_file"]] = (len(source), None, source.splitlines(True), CONFIG["hidden_file"])
    sys.meta_path[:0] = [_HiddenFinder(), _ProxyFinder()]
    CHANNEL = _Channel(CONFIG["channel"])
    stream = io.StringIO()
    try:
        suite = unittest.TestLoader().loadTestsFromName(CONFIG["hidden_module"])
        result = unittest.TextTestRunner(stream=stream, verbosity=1, resultclass=_Result).run(suite)
        report = {"ok": result.wasSuccessful(), "ran": result.testsRun, "log": stream.getvalue()[-1500:]}
    except BaseException as e:  # noqa: BLE001 - any failure of the run is a failed check
        report = {"ok": False, "ran": 0, "log": stream.getvalue()[-1000:] + repr(e)}
    try:
        os.write(CHANNEL.req, b'{"op": "exit"}\n')
    except OSError:
        pass
    sys.stdout.write("\n" + json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
