"""One browser context per environment in the process's shared headless Chromium, driven by Playwright's async
API, plus the browser tools' actions.

Why a private thread: `Environment.reset()`/`close()` are synchronous and may be called from inside a running
event loop (the rollout loop's `finally`), where nothing can be awaited. So the browser lives on its own
event loop in a daemon thread (tasks/runtime/browser_host.py: one Chromium per process, one context per
session, stopped when the last session closes unless kept alive); tool calls hop onto it
(`run_coroutine_threadsafe` + `wrap_future`) and `close()` blocks on it with a deadline; a Chromium that is
stopped is SIGKILLed with whatever is left of it (found by a marker switch on its command line), so a crashed
or hung browser never outlives the environments that used it.

Only the instance's own server is reachable, whatever asks (a `goto`, a link, a form, a script, a redirect):
- every request of the browser context passes `_route`, which aborts any whose origin is not the server's;
- redirects are not shown to `route` handlers (Playwright calls them for the first URL only), so the context
  also gets a proxy that refuses every connection (`_DenyProxy`: a bound socket that never listens), with
  only `host:port` of the server bypassing it: a redirect to any other host or port, loopback included,
  fails in Chromium's network stack before it connects;
- every request the context makes, redirect hops included, is also watched (`request` events): an
  off-origin navigation is reported to the model as blocked, and `settle` refuses a page that is not ours.

Errors the model can act on are `ToolError`s: a missing ref, an off-origin URL, a timeout (the page is
killed and the browser restarted), a crashed page or browser (reopened on the next action).
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import psutil

from tasks.runtime.browser_host import CHROMIUM_ARGS, HOST, chromium_path, keep_browser_alive
from tasks.runtime.page_outline import OUTLINE_JS
from tasks.tooling import ToolError

__all__ = ["CHROMIUM_ARGS", "BrowserSession", "chromium_path", "keep_browser_alive"]

T = TypeVar("T")

_REF_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,120}$")
_KEY_RE = re.compile(r"^[A-Za-z0-9+]{1,40}$")
# Chromium's words for a load our route or the deny proxy stopped
_BLOCKED_SIGNS = ("ERR_BLOCKED_BY_CLIENT", "ERR_PROXY_CONNECTION_FAILED", "chrome-error://")


class _DenyProxy:
    """A loopback port that refuses every connection: bound, never listening, held for the session's life."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.server = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        self._sock.close()


class BrowserSession:
    """One environment's browser context, confined to one origin (`http://127.0.0.1:<port>`), in the process's
    shared Chromium (tasks/runtime/browser_host.py), opened lazily on the first action."""

    def __init__(self, origin: str, *, action_timeout_s: float = 8.0, viewport: tuple[int, int] = (1280, 900)) -> None:
        self.origin = origin.rstrip("/")
        own = urlsplit(self.origin)
        self._host_port = (own.scheme, own.hostname, own.port)
        self._deny: _DenyProxy | None = None
        self.action_timeout_s = action_timeout_s
        self.hard_limit_s = action_timeout_s + 6.0  # beyond Playwright's own timeout: the page/driver is hung
        self.viewport = viewport
        self._loop: asyncio.AbstractEventLoop | None = None
        self._holding = False  # counted among the host's users (released on close)
        self._ctx: Any = None
        self._ctx_browser: Any = None
        self._page: Any = None
        self._page_crashed = False
        self._blocked: list[str] = []

    # --- lifecycle --------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._holding

    @property
    def launches(self) -> int:
        """Chromium launches of the process (shared by all sessions)."""
        return HOST.launches

    @property
    def _marker(self) -> str:
        return HOST.marker

    def _browser_processes(self) -> list[psutil.Process]:
        """The shared Chromium's processes and its Playwright driver."""
        return HOST.processes()

    async def run(self, action: Callable[[Any], Awaitable[T]]) -> T:
        """Run `action(page)` on the browser thread under the hard per-action limit."""
        self._loop = HOST.ensure_loop()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._guarded(action), self._loop))

    async def _guarded(self, action: Callable[[Any], Awaitable[T]]) -> T:
        from playwright.async_api import Error as PlaywrightError

        page = await self._ensure_page()
        self._blocked.clear()
        try:
            return await asyncio.wait_for(action(page), timeout=self.hard_limit_s)
        except asyncio.TimeoutError:
            await self._drop_context(kill_if_stuck=True)
            raise ToolError(f"the page did not respond within {self.hard_limit_s:.0f} s and was killed; the browser "
                            "will restart on the next action (open a page again with goto)") from None
        except PlaywrightError as e:
            if any(sign in str(e) for sign in _BLOCKED_SIGNS):
                await asyncio.sleep(0.1)  # the request events of the blocked navigation may still be queued
                raise ToolError(self._blocked_message()) from None
            if self._blocked:
                raise ToolError(self._blocked_message()) from None
            if self._page_crashed or self._ctx_browser is None or not self._ctx_browser.is_connected():
                await self._drop_context(kill_if_stuck=True)
                raise ToolError("the page or browser crashed during this action; a fresh browser starts on the next "
                                "action (open a page again with goto)") from None
            msg = str(e).split("\n")[0].strip()
            if "Timeout" in type(e).__name__ or "Timeout" in msg:
                if not await self._responsive(page):
                    raise ToolError(f"the page stopped responding (timed out after {self.action_timeout_s:.0f} s) "
                                    "and was killed; open a page again with goto") from None
                raise ToolError(f"timed out after {self.action_timeout_s:.0f} s: {msg}") from None
            raise ToolError(msg) from None

    async def _responsive(self, page: Any) -> bool:
        """After a timeout: is the page's main thread alive? If not, drop its context (or kill the browser)."""
        try:
            await asyncio.wait_for(page.evaluate("1"), timeout=1.5)
            return True
        except Exception:
            pass
        await self._drop_context(kill_if_stuck=True)
        return False

    async def _drop_context(self, *, kill_if_stuck: bool) -> None:
        """Close this session's context; if it cannot be closed (or its browser died), kill the browser."""
        ctx, browser = self._ctx, self._ctx_browser
        self._ctx = self._ctx_browser = self._page = None
        self._page_crashed = False
        dead = browser is not None and not browser.is_connected()
        if ctx is not None and not dead:
            try:
                await asyncio.wait_for(ctx.close(), timeout=3)
                return
            except Exception:
                dead = True
        if kill_if_stuck and dead:
            await HOST.kill_browser(browser)

    async def _ensure_page(self) -> Any:
        if self._ctx_browser is not None and not self._ctx_browser.is_connected():
            await self._drop_context(kill_if_stuck=True)
            raise ToolError("the browser crashed; a fresh browser starts on the next action (open a page with goto)")
        if self._page is not None and self._page_crashed:
            await self._drop_context(kill_if_stuck=True)
            raise ToolError("the page crashed; a fresh blank page is open (open a page again with goto)")
        if self._page is None:
            browser = await HOST.acquire(self)
            self._holding = True
            if self._deny is None:
                self._deny = _DenyProxy()
            ctx = await browser.new_context(viewport={"width": self.viewport[0], "height": self.viewport[1]},
                                            java_script_enabled=True, service_workers="block",
                                            proxy={"server": self._deny.server,
                                                   "bypass": f"{self._host_port[1]}:{self._host_port[2]}"})
            self._ctx, self._ctx_browser = ctx, browser
            ctx.on("request", self._watch)
            ctx.set_default_timeout(self.action_timeout_s * 1000)
            ctx.set_default_navigation_timeout(self.action_timeout_s * 1000)
            await ctx.route("**/*", self._route)
            self._page = await ctx.new_page()
            self._page.on("crash", lambda _p: setattr(self, "_page_crashed", True))
        return self._page

    def same_origin(self, url: str) -> bool:
        """True for a URL of this environment's server (scheme, host and port, no user info)."""
        try:
            parts = urlsplit(url)
            return (parts.scheme, parts.hostname, parts.port) == self._host_port and "@" not in parts.netloc
        except ValueError:
            return False

    async def _route(self, route: Any) -> None:
        """Only this environment's server is reachable; any other request is aborted (and reported)."""
        url = route.request.url
        if self.same_origin(url):
            await route.continue_()
        else:
            if route.request.is_navigation_request():
                self._blocked.append(url)
            await route.abort("blockedbyclient")

    def _watch(self, request: Any) -> None:
        """Every request of the context, redirect hops included (which `_route` never sees): an off-origin
        navigation is remembered, so the action that caused it reports it (the deny proxy stops the load)."""
        if not self.same_origin(request.url) and request.is_navigation_request():
            self._blocked.append(request.url)

    async def _close(self) -> None:
        await self._drop_context(kill_if_stuck=True)
        if self._holding:
            self._holding = False
            await HOST.release(self)

    def close(self) -> None:
        """Close this session's context and release the shared browser (stopped when no session uses it, unless
        kept alive). Safe to call twice, from any thread but the browser's."""
        loop, self._loop = self._loop, None
        if loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=15)
            except Exception:  # the browser thread is stuck: kill the browser rather than leak it
                HOST.kill_leftovers(include_driver=False)
            self._holding = False
        self._ctx = self._ctx_browser = self._page = None
        if self._deny is not None:
            self._deny.close()
            self._deny = None

    # --- helpers the tools use (run on the browser thread) ------------------------------------------
    def resolve_url(self, url: str) -> str:
        url = url.strip()
        if url.startswith("/"):
            return self.origin + url
        parts = urlsplit(url)
        own = urlsplit(self.origin)
        host_ok = parts.hostname in ("127.0.0.1", "localhost") and parts.port == own.port
        if parts.scheme != "http" or not host_ok:
            raise ToolError(f"'{url[:200]}' is not a page of this shop server; only paths such as /products "
                            "(or full URLs on this server) may be opened")
        return urljoin(self.origin, parts.path + (f"?{parts.query}" if parts.query else ""))

    def rel(self, url: str) -> str:
        return url[len(self.origin):] or "/" if url.startswith(self.origin) else url

    @staticmethod
    def check_ref(ref: str) -> str:
        if not _REF_RE.match(ref):
            raise ToolError(f"ref '{ref[:60]}' is not valid: use a ref shown by read_page, such as 'save' or 'e12'")
        return ref

    @staticmethod
    def check_key(key: str) -> str:
        if not _KEY_RE.match(key):
            raise ToolError(f"key '{key[:40]}' is not valid: use a key name such as Enter, Tab, ArrowDown or Control+a")
        return key

    async def locate(self, page: Any, ref: str) -> Any:
        ref = self.check_ref(ref)
        loc = page.locator(f'[id="{ref}"], [data-coevo-ref="{ref}"]').first
        if await page.locator(f'[id="{ref}"], [data-coevo-ref="{ref}"]').count() == 0:
            raise ToolError(f"no element with ref '{ref}' on {self.rel(page.url)}; call read_page to see the current refs")
        if not await loc.is_visible():
            raise ToolError(f"element '{ref}' is on the page but not visible")
        return loc

    async def settle(self, page: Any) -> str:
        """After an action: refuse off-origin results, then describe where we are and any message shown."""
        try:
            await page.wait_for_load_state("load", timeout=self.action_timeout_s * 1000)
        except Exception:
            pass
        if self._blocked:
            raise ToolError(self._blocked_message())
        if not (page.url == "about:blank" or self.same_origin(page.url)):
            raise ToolError(f"the page left this shop server ({page.url[:100]}); open a page with goto")
        messages = await page.eval_on_selector_all(
            "[role=alert], [role=status]", "els => els.map(e => e.getAttribute('role') + ': ' + e.innerText.trim())")
        title = await page.title()
        out = f"OK. Now at {self.rel(page.url)} — \"{title}\"."
        if messages:
            out += " " + " ".join(messages)
        return out

    def _blocked_message(self) -> str:
        blocked = self._blocked[0] if self._blocked else "another server"
        self._blocked.clear()
        return f"navigation to '{blocked[:200]}' was blocked: only pages of this shop server can be opened"

    def _check_own_page(self, page: Any) -> None:
        if not (page.url == "about:blank" or self.same_origin(page.url)):
            raise ToolError("the current page is not a page of this shop server (a navigation elsewhere was "
                            "blocked); open a page with goto")

    async def snapshot(self, page: Any, max_chars: int, start: int = 0) -> str:
        self._check_own_page(page)
        snap = await page.evaluate(OUTLINE_JS)
        self._check_own_page(page)  # a navigation may have committed while the outline was read
        top = snap["scrollY"]
        head = [f"URL: {self.rel(page.url)}", f"Title: {snap['title']}"]
        above = [ln for ln in snap["lines"] if ln["y"] < top - 2]
        visible = [ln for ln in snap["lines"] if ln["y"] >= top - 2]
        if above:
            head.append(f"[{len(above)} lines above the scroll position: scroll up to see them]")
        if start:
            if start >= len(visible):
                raise ToolError(f"start={start} is past the end of the page ({len(visible)} lines)")
            head.append(f"[lines {start}+ of {len(visible)}]")
        body: list[str] = []
        used = sum(len(h) + 1 for h in head)
        for i in range(start, len(visible)):
            ln = visible[i]
            text = "  " * ln["d"] + ln["t"]
            if used + len(text) + 1 > max_chars:
                body.append(f"[... {len(visible) - i} more lines: read_page(start={i}) continues here]")
                break
            body.append(text)
            used += len(text) + 1
        return "\n".join(head + body)
