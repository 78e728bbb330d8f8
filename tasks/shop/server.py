"""A real HTTP server for one environment: stdlib `ThreadingHTTPServer` on 127.0.0.1 at a free port, in a
daemon thread, serving an `App` (the `ShopApp`, or the verifier's `LabApp`). `stop()` shuts it down and
closes the port (safe to call twice)."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tasks.shop.app import App, Request, Response

log = logging.getLogger(__name__)
MAX_BODY = 1_000_000  # a form post larger than this is refused (413), never read into memory


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, app: App) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.app = app


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass  # requests are not logged: the env's tool results carry what matters

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        form: dict[str, list[str]] = {}
        if method == "POST":
            declared = (self.headers.get("Content-Length") or "0").strip()
            if not declared.isascii() or not declared.isdigit():
                self.send_error(400, "Content-Length must be a whole number")
                return
            length = int(declared) if len(declared) <= 9 else MAX_BODY + 1
            if length > MAX_BODY:
                self.send_error(413)
                return
            form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"), keep_blank_values=True)
        req = Request(method=method, path=parts.path, query=parse_qs(parts.query, keep_blank_values=True),
                      form=form, cookie=self.headers.get("Cookie", ""))
        try:
            resp = self.server.app.handle(req)
        except Exception as e:  # a bug must cost one request a 500, never the connection or the server thread
            log.warning("shop server: %s %s raised %s: %s", method, parts.path[:200], type(e).__name__, e)
            resp = Response(status=500, body="internal error", content_type="text/plain")
        body = resp.body.encode("utf-8")
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in resp.headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")


class ShopServer:
    def __init__(self, app: App) -> None:
        self.app = app
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        self._server = _Server(self.app)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="shop-server", daemon=True)
        self._thread.start()
        return self.port

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return self._server.server_address[1]

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
