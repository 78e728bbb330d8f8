"""One sandboxed browser for a whole `run_tests` call, shared by its test runs.

Chromium and Playwright's browser server (`launch-server`) run in `tasks.runtime.sandbox` like the tests:
bubblewrap as an unprivileged uid, no network but the page's own server (through `unix_relay`), whole-call
limits on memory and processes, and everything killed when the call ends. The server listens on a loopback
port inside that sandbox; a Unix socket in its workspace leads there. Test runs reach it only through
`PlaywrightGate` (a socket in `net_dir`, bound read-only into each run's sandbox), which refuses the calls that
would reach beyond a connection's own contexts. Every connection gets contexts of its own, closed when it
disconnects, so runs sharing the browser see nothing of each other.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from types import TracebackType

from tasks.runtime.browser import CHROMIUM_ARGS, chromium_path
from tasks.runtime.pw_gate import PlaywrightGate
from tasks.runtime.sandbox import Sandbox, SandboxLimits, SandboxResult
from tasks.runtime.unix_relay import FORWARDER, UnixRelay

SITE_ROOT = "/coevo-site"  # the runner's packages (pytest, playwright), read-only
NET_ROOT = "/coevo-net"  # the relays' sockets
GATE_SOCKET = "browser.sock"  # in `net_dir`: what test runs connect to
START_TIMEOUT_S = 30.0
# Chromium reserves terabytes of address space and runs a hundred threads, so the per-process address-space
# cap is lifted and the call's cgroup (memory, tasks) is what holds it.
BROWSER_LIMITS = SandboxLimits(wall_s=900, cpu_s=600, memory_bytes=1 << 46, call_memory_bytes=2 << 30,
                               max_procs=512, tmp_bytes=512 << 20, max_output_chars=16_000)

# Runs inside the browser's sandbox, after FORWARDER: start the server, expose it on a Unix socket in the
# workspace, report the endpoint, and stop when the host asks (a `stop` file) or the server dies.
_SERVE = '''
import json, os, subprocess
cfg = {"executablePath": _COEVO["chromium"], "args": _COEVO["args"], "host": "127.0.0.1", "port": 0}
with open(_COEVO["root"] + "/launch.json", "w") as f:
    json.dump(cfg, f)
proc = subprocess.Popen([_COEVO["node"], _COEVO["cli"], "launch-server", "--browser", "chromium", "--config",
                         _COEVO["root"] + "/launch.json"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
endpoint = proc.stdout.readline().strip()
if not endpoint.startswith("ws://"):
    print("the browser server did not start:", endpoint, proc.stdout.read()[-2000:], flush=True)
    os._exit(3)
port = int(endpoint.split(":")[2].split("/")[0])
listener = _socket.socket(_socket.AF_UNIX)
listener.bind(_COEVO["root"] + "/server.sock")
os.chmod(_COEVO["root"] + "/server.sock", 0o600)
_coevo_relay(listener, lambda: _socket.create_connection(("127.0.0.1", port)))
with open(_COEVO["root"] + "/endpoint.tmp", "w") as f:
    f.write(endpoint)
os.rename(_COEVO["root"] + "/endpoint.tmp", _COEVO["root"] + "/endpoint")
import time
while proc.poll() is None and not os.path.exists(_COEVO["root"] + "/stop"):
    time.sleep(0.05)
if proc.poll() is not None:
    print("browser server exited with", proc.poll(), flush=True)
proc.kill()
os._exit(0)
'''


def site_packages() -> Path:
    import playwright  # the runner's own packages, bound read-only into the sandboxes

    return Path(playwright.__file__).resolve().parent.parent


def chromium_binary() -> str:
    """The browser binary itself (the /usr/bin launcher script reads /etc, which the sandbox lacks)."""
    real = Path("/usr/lib/chromium/chromium")
    return str(real) if real.exists() and not os.environ.get("COEVO_CHROMIUM") else chromium_path()


class SharedBrowser:
    """`with SharedBrowser(page_url) as b:` starts the sandboxed browser and its gate; test runs bind
    `b.net_dir` read-only and connect to `GATE_SOCKET` there (at once: the gate holds them until the browser
    is up; `failure` says why it never came up). Leaving the block stops both."""

    def __init__(self, page_url: str) -> None:
        url = urllib.parse.urlsplit(page_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self._work = Path(tempfile.mkdtemp(prefix="coevo-pwbrowser-"))
        self._shop_net = Path(tempfile.mkdtemp(prefix="coevo-pwshop-"))
        self.net_dir = Path(tempfile.mkdtemp(prefix="coevo-pwnet-"))
        self._relay: UnixRelay | None = None
        self._gate: PlaywrightGate | None = None
        self._thread: threading.Thread | None = None
        self._result: SandboxResult | None = None
        self._endpoint: str | None = None
        self.failure: str | None = None  # why the browser did not start, once a run found out
        self._endpoint_lock = threading.Lock()

    def __enter__(self) -> SharedBrowser:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _start(self) -> None:
        for d in (self._work, self._shop_net, self.net_dir):
            d.chmod(0o755)
        self._relay = UnixRelay(self._shop_net / "shop.sock", self.host, self.port)
        sandbox = Sandbox(self._work, BROWSER_LIMITS, ro_binds={SITE_ROOT: site_packages(), NET_ROOT: self._shop_net})
        self._thread = threading.Thread(target=self._serve, args=(sandbox,), name="coevo-pw-browser", daemon=True)
        self._thread.start()
        self._gate = PlaywrightGate(self.net_dir / GATE_SOCKET, self._work / "server.sock", self._upstream_uri)

    def _upstream_uri(self) -> str:
        """The browser server's websocket URI, once it is up (test runs start while it starts)."""
        with self._endpoint_lock:
            if self._endpoint is None and self.failure is None:
                try:
                    self._endpoint = self._wait_for_endpoint()
                except RuntimeError as e:
                    self.failure = str(e)
            if self._endpoint is None:
                raise RuntimeError(self.failure)
        return "ws://127.0.0.1" + urllib.parse.urlsplit(self._endpoint).path

    def _serve(self, sandbox: Sandbox) -> None:
        bwrap = sandbox.backend == "bwrap"
        site = SITE_ROOT if bwrap else str(site_packages())
        conf = {"chromium": chromium_binary(), "args": list(CHROMIUM_ARGS), "root": sandbox.root,
                "node": f"{site}/playwright/driver/node", "cli": f"{site}/playwright/driver/package/cli.js"}
        sock = f"{NET_ROOT}/shop.sock" if bwrap else str(self._shop_net / "shop.sock")
        boot = (f"_COEVO = {conf!r}\n" + FORWARDER
                + f"try:\n    _coevo_forward({self.port}, {sock!r})\n"
                + "except OSError:  # the host's own network (rlimit backend, no namespace): the server is there\n"
                + "    pass\n" + _SERVE)
        self._result = sandbox.python(boot, wall_s=BROWSER_LIMITS.wall_s)

    def _wait_for_endpoint(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if (self._work / "endpoint").exists():
                return (self._work / "endpoint").read_text()
            if self._thread is not None and not self._thread.is_alive():
                out = self._result.output[-1500:] if self._result else ""
                raise RuntimeError(f"the sandboxed browser did not start: {out}")
            time.sleep(0.02)
        raise RuntimeError(f"the sandboxed browser did not start within {START_TIMEOUT_S:.0f} s")

    def close(self) -> None:
        if self._gate is not None:
            self._gate.close()
        if self._thread is not None:
            (self._work / "stop").touch()
            self._thread.join(timeout=30)
        if self._relay is not None:
            self._relay.close()
        for d in (self._work, self._shop_net, self.net_dir):
            shutil.rmtree(d, ignore_errors=True)
