"""The environment both browser families share: a per-instance shop server plus browser tools.

`_setup` writes the instance's SQLite database into a temp dir and starts the HTTP server (cheap: no
browser). Chromium starts lazily on the first browser tool call, so a do-nothing rollout never launches
it. `_teardown` closes the browser, stops the server (the port is closed) and removes the temp dir; it
keeps a copy of the final database tables so `snapshot()` and `verify()` also work after `close()`.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from tasks.base import Environment
from tasks.records import TaskInstance
from tasks.runtime.browser import BrowserSession
from tasks.runtime.volatile import normalize_browser_output
from tasks.shop.app import App, ShopApp
from tasks.shop.data import Shop, dump_tables, generate_shop, write_db
from tasks.shop.server import ShopServer
from tasks.tooling import ToolError, tool

DEFAULT_READ_CHARS = 6000
MAX_READ_CHARS = 20_000


class ShopEnvironment(Environment):
    """Shop server + one lazily started Chromium. Subclasses implement `snapshot` and `verify` (and may add
    tools)."""

    action_timeout_s: ClassVar[float] = 8.0
    normalize_output = staticmethod(normalize_browser_output)  # the shop server's port, clocks in page text

    def __init__(self, instance: TaskInstance) -> None:
        super().__init__(instance)
        self.tmp: Path | None = None
        self.server: ShopServer | None = None
        self.browser: BrowserSession | None = None
        self._app: ShopApp | None = None
        self._final_tables: dict[str, list[dict]] | None = None

    # --- state ------------------------------------------------------------------------------------
    def shop(self) -> Shop:
        """The instance's initial shop, rebuilt from its seed."""
        return generate_shop(self.instance.payload["shop_seed"])

    def lab_app(self) -> App | None:
        """What serves /lab and /lab/api (the test-writing variant's generated page); None = no lab page."""
        return None

    def _setup(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=f"coevo-{self.instance.family}-{self.instance.index}-"))
        db = self.tmp / "shop.db"
        write_db(self.shop(), db)
        self._app = ShopApp(str(db), self.instance.payload["password"], lab=self.lab_app())
        self.server = ShopServer(self._app)
        self.server.start()
        self.browser = BrowserSession(self.server.origin, action_timeout_s=self.action_timeout_s)
        self._final_tables = None

    def _teardown(self) -> None:
        browser, server, app, tmp = self.browser, self.server, self._app, self.tmp
        self.browser = self.server = self._app = self.tmp = None
        try:
            if browser is not None:
                browser.close()
        finally:
            try:
                if server is not None:
                    server.stop()
            finally:
                if app is not None:
                    if tmp is not None and (tmp / "shop.db").exists():
                        self._final_tables = self._read_tables(tmp / "shop.db")
                    app.close()
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _read_tables(db: Path) -> dict[str, list[dict]]:
        con = sqlite3.connect(db)
        try:
            return dump_tables(con)
        finally:
            con.close()

    def tables(self) -> dict[str, list[dict]]:
        """The mutable tables now (or as they were at close)."""
        if self.tmp is not None:
            return self._read_tables(self.tmp / "shop.db")
        if self._final_tables is not None:
            return self._final_tables
        raise RuntimeError("environment was never reset")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Read-only privileged look at the live database (the oracle uses it; tools never do)."""
        if self.tmp is None:
            return []
        con = sqlite3.connect(f"file:{self.tmp / 'shop.db'}?mode=ro", uri=True)
        con.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in con.execute(sql, tuple(params))]
        finally:
            con.close()

    @property
    def answer(self) -> str:
        return self.final_answer.text if self.final_answer else ""

    def _session(self) -> BrowserSession:
        if self.browser is None:
            raise ToolError("the environment is not running (reset it first)")
        return self.browser

    # --- browser tools ----------------------------------------------------------------------------
    @tool
    async def goto(self, url: str) -> str:
        """Open a page of the shop admin site and wait for it to load.

        Args:
            url: A path on the shop server such as '/products?category=Toys&page=2' or '/login' (full
                http://127.0.0.1:<port>/ URLs of the same server also work; other sites are refused).
        """
        b = self._session()
        target = b.resolve_url(url)

        async def act(page: Any) -> str:
            await page.goto(target, wait_until="load")
            return await b.settle(page)

        return await b.run(act)

    @tool
    async def click(self, ref: str) -> str:
        """Click a link, button or checkbox, then wait for any page load it causes.

        Args:
            ref: The element's ref as shown by read_page (e.g. 'save', 'edit-KIT-107' or 'e12').
        """
        b = self._session()

        async def act(page: Any) -> str:
            await (await b.locate(page, ref)).click()
            return await b.settle(page)

        return await b.run(act)

    @tool
    async def fill(self, ref: str, text: str) -> str:
        """Replace the contents of a text box (text, number, date as YYYY-MM-DD, password, multi-line).

        Args:
            ref: The text box's ref as shown by read_page.
            text: The new value.
        """
        b = self._session()

        async def act(page: Any) -> str:
            loc = await b.locate(page, ref)
            kind = await loc.evaluate("e => e.tagName + ':' + (e.type || '')")
            if kind.startswith(("SELECT", "INPUT:checkbox", "INPUT:radio", "BUTTON", "A:", "INPUT:submit")):
                raise ToolError(f"'{ref}' is not a text box ({kind.lower().rstrip(':')}); use select for drop-downs "
                                "and click for buttons, links and checkboxes")
            await loc.fill(text)
            return f"Filled '{ref}'."

        return await b.run(act)

    @tool
    async def select(self, ref: str, option: str) -> str:
        """Choose an option of a drop-down (combobox) by its visible text or its value.

        Args:
            ref: The drop-down's ref as shown by read_page.
            option: The option's text as listed by read_page (without the '*' that marks the current one).
        """
        b = self._session()

        async def act(page: Any) -> str:
            loc = await b.locate(page, ref)
            options = await loc.evaluate(
                "e => e.tagName === 'SELECT' ? Array.from(e.options).map(o => [o.text.trim(), o.value]) : null")
            if options is None:
                raise ToolError(f"'{ref}' is not a drop-down; use fill for text boxes and click for checkboxes")
            for text, value in options:
                if option.strip() in (text, value):
                    await loc.select_option(value=value)
                    return f"Selected '{text}' in '{ref}'."
            raise ToolError(f"'{ref}' has no option '{option[:80]}'; options: {', '.join(t for t, _ in options)}")

        return await b.run(act)

    @tool
    async def press(self, key: str, ref: str = "") -> str:
        """Press a key (e.g. Enter to submit the focused form), optionally on an element first.

        Args:
            key: Key name such as Enter, Tab, Escape, ArrowDown or Control+a.
            ref: Element to focus before pressing; empty = the currently focused element.
        """
        b = self._session()
        b.check_key(key)

        async def act(page: Any) -> str:
            if ref:
                await (await b.locate(page, ref)).press(key)
            else:
                await page.keyboard.press(key)
            return await b.settle(page)

        return await b.run(act)

    @tool
    async def scroll(self, direction: Literal["down", "up", "top", "bottom"] = "down") -> str:
        """Scroll the page; read_page shows the page from the current scroll position.

        Args:
            direction: 'down' or 'up' by most of a screen, or 'top' / 'bottom'.
        """
        b = self._session()

        async def act(page: Any) -> str:
            y = await page.evaluate(
                """d => { const h = Math.round(window.innerHeight * 0.9);
                   if (d === 'down') window.scrollBy(0, h); else if (d === 'up') window.scrollBy(0, -h);
                   else if (d === 'top') window.scrollTo(0, 0); else window.scrollTo(0, document.body.scrollHeight);
                   return [Math.round(window.scrollY), document.documentElement.scrollHeight]; }""", direction)
            return f"Scrolled {direction}: now at {y[0]} px of {y[1]} px."

        return await b.run(act)

    @tool
    async def read_page(self, max_chars: int = DEFAULT_READ_CHARS, start: int = 0) -> str:
        """Read the current page as a compact outline: headings, text, table rows and controls with refs.

        Args:
            max_chars: Budget for the snapshot (200 to 20000 characters); the rest is cut with a note.
            start: Line to start from, to continue a cut snapshot (the note gives the number).
        """
        if start < 0:
            raise ToolError("start must be 0 or more")
        if not 200 <= max_chars <= MAX_READ_CHARS:
            raise ToolError(f"max_chars must be between 200 and {MAX_READ_CHARS}")
        b = self._session()

        async def act(page: Any) -> str:
            return await b.snapshot(page, max_chars, start)

        return await b.run(act)
