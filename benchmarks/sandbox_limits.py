"""Whole-call limits and confinement, measured (issue 12, sections 3 and 4).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/sandbox_limits.py            # ~1 min; prints lines and one JSON line

1. Host services reachable from any tool: a loopback HTTP service counts the requests it receives while
   every tool that could reach it tries: `shell` (curl/wget/nc where present, bash /dev/tcp, python sockets),
   `python` (sockets, urllib, raw connect), the SQL tool (no network functions exist, ATTACH refused), the
   browser tools of website_admin (goto by URL and by `localhost`, the login `next` tricks). Target: 0 hits.
2. Peak memory of one sandboxed call with 8 processes trying to pass its cap: each touches 128 MiB (1 GiB
   together) under a 512 MiB call cap. Reported: the cgroup's own peak (memory.max_usage_in_bytes on cgroup
   v1, memory.peak on v2) and the largest drop of the host's MemAvailable, sampled every 10 ms while the call
   ran (noisy on a shared machine: other jobs move it too). Target: cgroup peak <= cap.
3. Workspace bytes after a shell write loop (1 MiB files until a write fails, up to 200 MiB) in a
   code_refactor workspace. Target: <= 64 MiB.
4. Overheads: median wall time of a trivial sandboxed call (cgroup create/join/remove included) and of one
   SQL query through the sandboxed SQL tool.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import statistics
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import tasks  # noqa: E402
from results_io import save_results  # noqa: E402
from tasks.runtime.cgroups import cgroup_support  # noqa: E402
from tasks.runtime.sandbox import Sandbox, SandboxLimits, sandbox_backend  # noqa: E402

MiB = 1 << 20


class Service:
    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                hits.append(self.path)
                body = b"<title>HOST SECRET</title>host secret"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def shell_attempts(port: int) -> list[str]:
    url = f"http://127.0.0.1:{port}/shell"
    return [f"curl -s -m 3 {url}", f"wget -q -T 3 -O - {url}", f"nc -w 3 127.0.0.1 {port} </dev/null",
            f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}; printf \"GET /bash HTTP/1.0\\r\\n\\r\\n\" >&3; cat <&3'",
            f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}', timeout=3).read())\""]


def python_attempts(port: int) -> list[str]:
    return [f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "s.sendall(b'GET /py HTTP/1.0\\r\\n\\r\\n')\nprint(s.recv(100))",
            f"import urllib.request\nprint(urllib.request.urlopen('http://localhost:{port}/py2', timeout=3).read())",
            f"import socket\ns = socket.socket(socket.AF_INET6)\ns.settimeout(3)\ns.connect(('::1', {port}))"]


async def reachability(service: Service) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/control", timeout=5) as r:  # the service works
        control = r.status == 200 and service.hits == ["/control"]
    service.hits.clear()
    attempts = 0
    fam = tasks.get("code_refactor")
    with fam.make_env(fam.generate(0)) as env:
        env.reset()
        for cmd in shell_attempts(service.port):
            await env.call("shell", {"command": cmd, "timeout_s": 5})
            attempts += 1
        for code in python_attempts(service.port):
            await env.call("python", {"code": code, "timeout_s": 5})
            attempts += 1
    fam = tasks.get("anomaly_detection")
    with fam.make_env(fam.generate(0)) as env:
        env.reset()
        for sql in [f"ATTACH 'http://127.0.0.1:{service.port}/x' AS x", "SELECT load_extension('/usr/lib/x')"]:
            await env.call("sql_query", {"sql": sql})
            attempts += 1
    attempts += await browser_attempts(service)
    return {"control_from_host_reached": control, "attempts": attempts, "hits": len(service.hits),
            "paths": list(service.hits)}


async def browser_attempts(service: Service) -> int:
    other = f"127.0.0.1:{service.port}"
    fam = tasks.get("website_admin")
    n = 0
    with fam.make_env(fam.generate(0)) as env:
        env.reset()
        for url in [f"http://{other}/goto", f"http://localhost:{service.port}/goto2"]:
            await env.call("goto", {"url": url})
            n += 1
        for nxt in [f"/\\{other}/next", f"//{other}/next", f"/\\/{other}/next", f"http://{other}/next"]:
            await env.call("goto", {"url": "/logout"})
            await env.call("goto", {"url": "/login?" + urllib.parse.urlencode({"next": nxt})})
            await env.call("fill", {"ref": "username", "text": "admin"})
            await env.call("fill", {"ref": "password", "text": env.instance.payload["password"]})
            await env.call("click", {"ref": "sign-in"})
            await env.call("read_page", {})
            n += 1
    return n


EIGHT = """
import os, time
for i in range(8):
    if os.fork() == 0:
        block = bytearray(128 << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        time.sleep(2)
        os._exit(0)
print([os.wait()[1] for _ in range(8)])
"""


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def memory_cap(workspace: Path) -> dict[str, Any]:
    cap = 512 * MiB
    sandbox = Sandbox(workspace, SandboxLimits(call_memory_bytes=cap, wall_s=30))
    base = mem_available()
    low = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            low[0] = min(low[0], mem_available())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = sandbox.python(EIGHT)
    finally:
        done.set()
        sampler.join()
    return {"cap_bytes": cap, "attempted_bytes": 8 * 128 * MiB, "cgroup_peak_bytes": result.peak_memory_bytes,
            "host_available_drop_bytes": base - low[0], "killed_by": result.killed_by,
            "header": result.render().splitlines()[0]}


async def disk_cap() -> dict[str, Any]:
    fam = tasks.get("code_refactor")
    with fam.make_env(fam.generate(0)) as env:
        env.reset()
        loop = "i=0; while [ $i -lt 200 ]; do head -c 1048576 /dev/zero > f$i || break; i=$((i+1)); done"
        r = await env.call("shell", {"command": loop, "timeout_s": 30})
        return {"cap_bytes": env.sandbox_limits.workspace_bytes, "workspace_bytes": env.workspace_bytes(),
                "capped_mount": env.disk_capped, "header": "\n".join(r.content.splitlines()[:2])}


async def overheads(workspace: Path) -> dict[str, float]:
    sandbox = Sandbox(workspace)
    calls = []
    for _ in range(20):
        t = time.perf_counter()
        sandbox.shell("true")
        calls.append(time.perf_counter() - t)
    fam = tasks.get("anomaly_detection")
    queries = []
    with fam.make_env(fam.generate(0)) as env:
        env.reset()
        for _ in range(20):
            t = time.perf_counter()
            await env.call("sql_query", {"sql": "SELECT COUNT(*) FROM readings"})
            queries.append(time.perf_counter() - t)
    return {"sandbox_call_median_ms": round(statistics.median(calls) * 1000, 1),
            "sql_query_median_ms": round(statistics.median(queries) * 1000, 1)}


async def main() -> None:
    import tempfile

    support = cgroup_support()
    print(f"sandbox backend: {sandbox_backend()}; cgroups: {support.version or 'none'} ({support.note})")
    service = Service()
    reach = await reachability(service)
    print(f"host services reachable from any tool: {reach['hits']} hits in {reach['attempts']} attempts "
          f"(the same service answered a request from the host: {reach['control_from_host_reached']})")
    with tempfile.TemporaryDirectory(prefix="coevo-bench-") as d:
        mem = memory_cap(Path(d))
        print(f"8 processes x 128 MiB under a {mem['cap_bytes'] >> 20} MiB call cap: cgroup peak "
              f"{(mem['cgroup_peak_bytes'] or 0) / MiB:.1f} MiB, host MemAvailable drop "
              f"{mem['host_available_drop_bytes'] / MiB:.1f} MiB; {mem['header']}")
        over = await overheads(Path(d))
    disk = await disk_cap()
    print(f"shell write loop: workspace {disk['workspace_bytes'] / MiB:.2f} MiB of a {disk['cap_bytes'] >> 20} MiB cap "
          f"(capped tmpfs: {disk['capped_mount']}); {disk['header']!r}")
    print(f"overheads: sandboxed `true` median {over['sandbox_call_median_ms']} ms, one SQL query median "
          f"{over['sql_query_median_ms']} ms")
    report = {"reachability": reach, "memory": mem, "disk": disk, "overheads": over}
    print(json.dumps(report))
    print(f"raw results: {save_results('sandbox_limits', report).relative_to(REPO)}")
    service.server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
