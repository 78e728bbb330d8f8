"""Run the hidden reference tests so that the code under test can neither read nor forge them.

Two processes, joined by two FIFOs in a directory of their own:
- the code under test: `hidden_server.py` in the sandbox (`python -I -S -`: no site, no `.pth`, no
  `sitecustomize`/`usercustomize`, no environment; bubblewrap: no network, no host files). It sees the
  workspace and the FIFOs, nothing else: not the hidden tests, not their expected values, not the report;
- the checker: `hidden_runner.py`, a fresh `python -I -S -` on the host that holds the hidden tests in
  memory, runs them with unittest against proxy modules that forward each import, lookup and call to the
  sandbox, and parses each answer as a plain literal. Assertions, the test framework and the count of
  tests run live in this process; its report is its stdout, a pipe only this module reads.

So patching unittest from the package's `__init__`, a module named like the hidden test, `os._exit` at
import, a forged report printed at exit, a `conftest.py` or a `.pth` file change only what the code under
test answers, which is what it really does.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from tasks.runtime.sandbox import Sandbox, SandboxLimits, python_executable

CHANNEL_ROOT = "/coevo-channel"  # where the FIFOs appear inside the sandbox
HIDDEN_FILE = "/checker/_coevo_hidden_test.py"  # the file name the hidden tests' tracebacks show
_HERE = Path(__file__).parent
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "TZ": "UTC"}


def run_hidden(source: str, module: str, pkg: str, workspace: Path, limits: SandboxLimits,
               wall_s: float) -> dict | None:
    """Run the hidden unittest `source` (importable as `module`) against the package `pkg` in `workspace`:
    {"ok", "ran", "log"} from the checker's own runner, or None when the runner did not report."""
    chan = Path(tempfile.mkdtemp(prefix="coevo-hidden-"))
    try:
        chan.chmod(0o755)
        for name in ("req", "resp"):
            os.mkfifo(chan / name)
            (chan / name).chmod(0o666)  # the sandbox uid opens them
        dead = secrets.token_hex(16)
        server = _start_server(workspace, limits, chan, wall_s, dead)
        config = {"hidden_source": source, "hidden_module": module, "hidden_file": HIDDEN_FILE, "pkg": pkg,
                  "channel": str(chan), "wall_s": wall_s, "dead_token": dead}
        code = f"CONFIG = {config!r}\n" + (_HERE / "hidden_runner.py").read_text()
        try:
            run = subprocess.run([python_executable(), "-I", "-S", "-"], input=code.encode(), capture_output=True,
                                 timeout=wall_s + 10, env=_ENV, cwd=chan)
        except subprocess.TimeoutExpired:
            return None
        finally:
            server.join(timeout=wall_s + 10)
        return _report(run.stdout.decode("utf-8", "replace"))
    finally:
        shutil.rmtree(chan, ignore_errors=True)


def _start_server(workspace: Path, limits: SandboxLimits, chan: Path, wall_s: float, dead: str) -> threading.Thread:
    """The sandboxed server in a thread; when it ends (however), the runner is told through the answer FIFO."""
    sandbox = Sandbox(workspace, limits, ro_binds={CHANNEL_ROOT: chan})
    inside = CHANNEL_ROOT if sandbox.backend == "bwrap" else str(chan)
    code = f"CONFIG = {({'root': sandbox.root, 'channel': inside})!r}\n" + (_HERE / "hidden_server.py").read_text()

    def serve() -> None:
        try:
            sandbox.python(code, wall_s=wall_s + 2)
        finally:
            try:
                fd = os.open(chan / "resp", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return  # the runner is gone already
            try:
                os.write(fd, b"\n" + dead.encode() + b"\n")
            except OSError:
                pass
            finally:
                os.close(fd)

    thread = threading.Thread(target=serve, name="coevo-hidden-server", daemon=True)
    thread.start()
    return thread


def _report(stdout: str) -> dict | None:
    lines = stdout.strip().splitlines()
    if not lines:
        return None
    try:
        report = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return report if isinstance(report, dict) else None
