"""The gate between sandboxed test runs and the one browser they share (`tasks.runtime.pw_browser`).

Each test run's Playwright client connects to the browser's server (Playwright's `launch-server`, which gives
every connection contexts of its own and refuses launching more browsers) through this gate: a websocket
relay on a Unix socket that forwards the protocol's messages both ways and refuses, before they reach the
browser, the calls that would reach beyond the connection's own contexts. A CDP session (of the browser or a
page) can list and drive every target of the browser, other runs' pages included; browser-wide tracing
records them; the reused context is shared by every connection; the recorder, the debugger and the server
commands are not for tests. A refused call fails in the test like any Playwright error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.asyncio.server import ServerConnection, unix_serve
from websockets.exceptions import ConnectionClosed

log = logging.getLogger(__name__)

# Protocol method names (unique across the protocol's interfaces: Browser, BrowserContext, BrowserType,
# CDPSession, Debugger, ...) that a test run may not call.
REFUSED = frozenset({
    "newBrowserCDPSession", "newCDPSession", "send", "detach",  # CDP: every target of the browser
    "startTracing", "stopTracing",  # browser-wide tracing: every page's content
    "newContextForReuse", "disconnectFromReusedContext",  # one context shared by all connections
    "startServer", "stopServer", "killForTests",
    "launch", "launchPersistentContext", "connectOverCDP", "connectToWorker", "devices",  # more browsers
    "pause", "showRecorder", "startRecording", "stopRecording", "createTempFiles", "saveAs",
    "requestPause", "resume", "next", "runTo", "enable",  # the debugger
    "kill", "setRecorderMode", "setReportStateChanged",  # the debug controller
})
MAX_MESSAGE_BYTES = 64 << 20  # screenshots travel base64-encoded in one message


def screen(message: str | bytes) -> tuple[bool, str | None]:
    """(forward it?, the error reply to send back) for one client message. A call of a refused method gets an
    error reply; a message the gate cannot read is dropped (the server could not read it either)."""
    try:
        msg = json.loads(message)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(msg, dict) or msg.get("method") not in REFUSED:
        return True, None
    text = f"{msg['method']} is not available to the verifier's test runs"
    return False, json.dumps({"id": msg.get("id"), "error": {"error": {"message": text, "name": "Error", "stack": ""}}})


class PlaywrightGate:
    """Listens on `path` (mode 0666, for the sandbox uids) and relays each client to the browser server's
    websocket, reached through the Unix socket `upstream` at the URI `resolve()` returns (it may block until
    the server is up, so clients can connect while the browser starts). Runs its own event loop thread."""

    def __init__(self, path: Path, upstream: Path, resolve: Callable[[], str]) -> None:
        self.path, self.upstream, self._resolve = Path(path), Path(upstream), resolve
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="coevo-pw-gate", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the Playwright gate did not start")

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve(ready))

    async def _serve(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with unix_serve(self._client, str(self.path), max_size=MAX_MESSAGE_BYTES, compression=None):
            self.path.chmod(0o666)
            ready.set()
            await self._stop.wait()

    async def _client(self, client: ServerConnection) -> None:
        try:
            uri = await asyncio.to_thread(self._resolve)
            async with unix_connect(str(self.upstream), uri=uri, max_size=MAX_MESSAGE_BYTES,
                                    compression=None, open_timeout=10) as server:
                up = asyncio.create_task(self._pump_up(client, server))
                down = asyncio.create_task(_pump(server, client))
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
                for task in (up, down):
                    task.cancel()
        except (OSError, ConnectionClosed, TimeoutError, RuntimeError) as e:
            log.info("a test run's browser connection ended: %s", e)

    async def _pump_up(self, client: ServerConnection, server: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in client:
                forward, reply = screen(message)
                if forward:
                    await server.send(message)
                elif reply is not None:
                    await client.send(reply)

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
        with contextlib.suppress(RuntimeError):
            self._loop.close()


async def _pump(source: ClientConnection, sink: ServerConnection) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for message in source:
            await sink.send(message)
