"""The browser tools reach the instance's own shop server and nothing else, and the shop app answers bad
query values with a 400. A second local HTTP server stands for every other service on the host: it counts
the requests it gets, and the tests fail on any. Real shop server, real headless Chromium."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tasks
from tasks.runtime.browser import BrowserSession
from tasks.shop.app import safe_path
from tasks.tooling import ToolError

WA = tasks.get("website_admin")


class _Service:
    """A loopback HTTP service the browser must never reach (it records every request it gets)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - stdlib naming
                hits.append(self.path)
                body = b"<html><head><title>HOST SECRET</title></head><body><h1>host secret</h1></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service() -> Iterator[_Service]:
    s = _Service()
    yield s
    s.close()


def test_safe_path_accepts_only_same_origin_paths() -> None:
    for good in ["/", "/products?page=2&q=a%20b", "/reviews?status=pending&msg=Review+3+approved.", "/orders/SO-1001"]:
        assert safe_path(good, "/") == good
    for bad in ["//127.0.0.1:9/x", "/\\127.0.0.1:9/x", "/\\/127.0.0.1:9/x", "http://127.0.0.1:9/", "https://example.com",
                "javascript:alert(1)", "/\t/127.0.0.1:9", "/\n/x", " /x", "", "products", "/x" + "y" * 3000,
                "/%0a/x\\y"]:
        assert safe_path(bad, "/") == "/", bad
    assert safe_path("/stock?below=5", "/stock", prefix="/stock") == "/stock?below=5"
    assert safe_path("/orders", "/stock", prefix="/stock") == "/stock"


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_out_of_range_query_values_get_400_not_a_crash() -> None:
    with WA.make_env(WA.generate(0)) as env:
        env.reset()
        assert env.server is not None
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        login = urllib.parse.urlencode({"username": "admin", "password": env.instance.payload["password"], "next": "/"})
        opener.open(env.server.origin + "/login", data=login.encode(), timeout=10).read()
        urllib.request.install_opener(opener)
        try:
            base = env.server.origin
            for query in ["page=" + "9" * 5000, "page=-3", "page=abc", "page=0", "page=99999999999999999999", "page=²"]:
                for path in ("/products", "/orders", "/customers", "/reviews"):
                    assert _status(f"{base}{path}?{urllib.parse.quote(query, safe='=')}") == 400, (path, query)
            assert _status(f"{base}/products?page=2") == 200
            assert _status(f"{base}/reviews?rating=" + "5" * 5000) == 200  # not a rating: the filter is ignored
            assert _status(f"{base}/stock?below=" + "9" * 5000) == 200
            assert _status(f"{base}/customers/" + "1" * 5000) == 404  # not an id
        finally:
            urllib.request.install_opener(urllib.request.build_opener())


def test_bad_content_length_gets_an_answer_not_a_hang() -> None:
    with WA.make_env(WA.generate(0)) as env:
        env.reset()
        assert env.server is not None
        for declared in ["-5", "abc", "9" * 40, "1e3"]:
            with socket.create_connection(("127.0.0.1", env.server.port), timeout=10) as s:
                s.sendall(f"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode())
                status = s.recv(200).split(b"\r\n")[0]
            assert status.split()[1] in (b"400", b"413"), (declared, status)


async def test_login_next_cannot_lead_the_browser_off_the_shop(service: _Service) -> None:
    other = f"127.0.0.1:{service.port}"
    with WA.make_env(WA.generate(0)) as env:
        env.reset()
        for nxt in [f"/\\{other}/x", f"//{other}/x", f"/\\/{other}/x", f"http://{other}/", f"/\t/{other}/x"]:
            await env.call("goto", {"url": "/logout"})
            opened = await env.call("goto", {"url": "/login?" + urllib.parse.urlencode({"next": nxt})})
            assert "Sign in" in opened.content, opened.content
            await env.call("fill", {"ref": "username", "text": "admin"})
            await env.call("fill", {"ref": "password", "text": env.instance.payload["password"]})
            signed = await env.call("click", {"ref": "sign-in"})
            assert "Now at / " in signed.content, (nxt, signed.content)
            page = await env.call("read_page", {})
            assert "host secret" not in page.content.lower() and "Dashboard" in page.content
        refused = await env.call("goto", {"url": f"http://{other}/"})
        assert refused.is_error and "not a page of this shop server" in refused.content
    assert service.hits == []


def _redirecting_origin(target: str) -> tuple[http.server.ThreadingHTTPServer, dict[str, str]]:
    """A stand-in for a shop server gone wrong: every way a page can send the browser to `target`."""
    pages = {
        "/js": f"<script>location.href = '{target}/js'</script>",
        "/meta": f"<meta http-equiv='refresh' content='0; url={target}/meta'>",
        "/img": f"<p>picture</p><img src='{target}/img'><script>fetch('{target}/fetch').catch(() => 0)</script>",
        "/form": f"<form id='f' method='post' action='{target}/form'><button id='go'>go</button></form>",
    }
    redirects = {"/redirect": f"{target}/redirect", "/chain": "/redirect",
                 "/localhost": target.replace("127.0.0.1", "localhost") + "/lh"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path in redirects:
                self.send_response(302)
                self.send_header("Location", redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = f"<html><head><title>own</title></head><body>{pages.get(self.path, 'own page')}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, pages


async def test_redirects_scripts_and_subresources_never_reach_another_service(service: _Service) -> None:
    """Context-level confinement, with the app's own checks out of the way: the origin server itself sends
    the browser elsewhere (HTTP redirects, a redirect chain, loopback by name, script, meta refresh, images,
    fetch, a form post). Nothing arrives at the other service, and no page of it can be read."""
    own, _ = _redirecting_origin(f"http://127.0.0.1:{service.port}")
    session = BrowserSession(f"http://127.0.0.1:{own.server_address[1]}", action_timeout_s=4)

    def visit(path: str, then: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
        async def act(page: Any) -> str:
            await page.goto(session.resolve_url(path), wait_until="load")
            if then is not None:
                await then(page)
            await asyncio.sleep(0.3)  # let late scripts and refreshes fire
            return await session.settle(page)
        return act

    try:
        outcomes = {}
        for path in ["/redirect", "/chain", "/localhost", "/meta", "/img", "/js"]:  # /js last: its script keeps trying
            try:
                outcomes[path] = await session.run(visit(path))
            except ToolError as e:
                outcomes[path] = f"refused: {e}"
            try:
                shown = await session.run(lambda page: session.snapshot(page, 2000))
            except ToolError as e:
                shown = f"refused: {e}"
            assert "host secret" not in shown.lower(), (path, shown)
        try:
            outcomes["/form"] = await session.run(visit("/form", lambda page: page.click("#go")))
        except ToolError as e:
            outcomes["/form"] = f"refused: {e}"
        for path in ["/redirect", "/chain", "/localhost", "/meta"]:
            assert outcomes[path].startswith("refused:") and "blocked" in outcomes[path], (path, outcomes[path])
        assert outcomes["/img"].startswith("OK. Now at /img")  # the page itself is ours and loads
    finally:
        session.close()
        own.shutdown()
        own.server_close()
    assert service.hits == []
