"""One headless Chromium per process, shared by every `BrowserSession` (each gets its own browser context).

Starting Chromium costs ~0.5-2 s; a context costs milliseconds. A rollout of a browser family used to start
two (its environment's and the oracle's copy), and every rollout started them again. Now:

- one daemon thread runs one event loop that owns Playwright and the browser (Playwright objects are bound to
  the loop that made them, and `Environment.reset()/close()` are synchronous: sessions hop onto this loop);
- a session `acquire`s the browser when it opens its first page (launched then if none is running) and
  `release`s it on close; each session's context has its own cookies, storage, origin lock (route + deny
  proxy) and timeouts, and is closed on release, so environments stay isolated;
- when the last session releases it, Chromium and the Playwright driver stop (nothing outlives the last
  environment: the no-leak checks hold) unless `keep_browser_alive()` was called: a rollout actor calls it,
  so consecutive episodes reuse the running browser; `shutdown_host()` (atexit) stops it then;
- a hung or crashed page kills only its own context; when the context cannot be closed or the browser itself
  dies, the browser is killed (SIGKILL, found by a marker switch) and relaunched for the next action: other
  sessions then get a "browser crashed" tool error and a fresh context on their next action.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import threading
import time
import uuid
from typing import Any

import psutil

CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", "--disable-extensions")


def chromium_path() -> str:
    """The system Chromium (Playwright's own download does not work here); COEVO_CHROMIUM overrides."""
    return os.environ.get("COEVO_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"


class BrowserHost:
    """The process's browser; see the module docstring. Coroutine methods run on `loop` only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.pw: Any = None
        self.browser: Any = None
        self.marker = ""
        self.launches = 0
        self.keep_alive = False
        self.users: set[int] = set()
        self._procs: dict[int, psutil.Process] = {}  # objects, not pids: psutil refuses to signal a reused pid
        self._launching: asyncio.Lock | None = None

    def ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None or self.thread is None or not self.thread.is_alive():
                loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=loop.run_forever, name="coevo-browser", daemon=True)
                self.thread.start()
                self.loop = loop
            return self.loop

    def _guard(self) -> asyncio.Lock:
        """Serialises launch, kill and stop (so a stop never takes down a browser another session just launched)."""
        if self._launching is None:
            self._launching = asyncio.Lock()
        return self._launching

    async def acquire(self, user: object) -> Any:
        """The running browser (launched if none is, or if it died), counted as used by `user`."""
        from playwright.async_api import async_playwright

        async with self._guard():
            if self.browser is not None and not self.browser.is_connected():
                await self._kill()
            if self.browser is None:
                if self.pw is None:
                    self.pw = await async_playwright().start()
                self.marker = f"--coevo-browser={uuid.uuid4().hex}"
                self.browser = await self.pw.chromium.launch(
                    executable_path=chromium_path(), args=[*CHROMIUM_ARGS, self.marker], timeout=30_000)
                self.launches += 1
                self._procs.update((p.pid, p) for p in self.processes())
            self.users.add(id(user))
            return self.browser

    async def release(self, user: object) -> None:
        async with self._guard():
            self.users.discard(id(user))
            if not self.users and not self.keep_alive:
                await self._stop()

    async def kill_browser(self, browser: Any) -> None:
        """SIGKILL `browser` if it is still the current one (a hung page, a dead browser); the next `acquire`
        launches a new one."""
        async with self._guard():
            if browser is not None and self.browser is browser:
                await self._kill()

    async def stop(self) -> None:
        async with self._guard():
            await self._stop()

    async def _kill(self) -> None:
        browser, self.browser = self.browser, None
        self.kill_leftovers(include_driver=False)
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), timeout=2)
            except Exception:
                pass

    async def _stop(self) -> None:
        """Close Chromium and stop the Playwright driver; kill whatever is left of either."""
        browser, self.browser = self.browser, None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), timeout=5)
            except Exception:  # already dead or hung: the kill below is the real guarantee
                pass
        self.kill_leftovers(include_driver=False)
        pw, self.pw = self.pw, None
        if pw is not None:
            try:
                await asyncio.wait_for(pw.stop(), timeout=5)
            except Exception:
                pass
        self.kill_leftovers(include_driver=True)

    def processes(self) -> list[psutil.Process]:
        """The current Chromium (found by its marker switch), its helpers and its Playwright driver."""
        found: list[psutil.Process] = []
        if not self.marker:
            return found
        for child in psutil.Process().children(recursive=True):
            try:
                if self.marker in child.cmdline():
                    found.append(child)
                    found.extend(child.children(recursive=True))
                    parent = child.parent()
                    if parent is not None and parent.pid != os.getpid():
                        found.append(parent)  # the node driver that launched it
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def kill_leftovers(self, *, include_driver: bool) -> None:
        procs = {p.pid: p for p in self.processes()}
        for pid, proc in self._procs.items():
            if pid not in procs and proc.is_running():
                procs[pid] = proc
        killed: list[psutil.Process] = []
        for p in procs.values():
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue  # already dead
                name = p.name()
                if not include_driver and "node" in name:
                    continue
                if include_driver or self.marker in p.cmdline() or "chrom" in name:
                    p.send_signal(signal.SIGKILL)
                    killed.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        _reap(killed)
        self._procs = {pid: p for pid, p in self._procs.items() if pid not in {k.pid for k in killed} and p.is_running()}

    def shutdown(self) -> None:
        """Stop the browser now, whoever still uses it (atexit; tests). Safe to call twice, from any other thread."""
        loop = self.loop
        if loop is None or not loop.is_running():
            self.kill_leftovers(include_driver=True)
            return
        self.users.clear()
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout=15)
        except Exception:
            pass
        self.kill_leftovers(include_driver=True)


def _reap(killed: list[psutil.Process]) -> None:
    for p in killed:
        try:
            if p.ppid() == os.getpid():
                p.wait(timeout=2)  # reap our own child (the driver)
                continue
            for _ in range(40):  # others: dead once gone or a zombie awaiting its (new) parent's reaping
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
                time.sleep(0.05)
        except (psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
            continue


HOST = BrowserHost()
atexit.register(HOST.shutdown)


def keep_browser_alive(on: bool = True) -> None:
    """Keep the process's Chromium running between environments (rollout actors); off: stop it when unused."""
    HOST.keep_alive = on
    if not on and HOST.loop is not None and HOST.loop.is_running() and not HOST.users:
        asyncio.run_coroutine_threadsafe(HOST.stop(), HOST.loop).result(timeout=15)


def shutdown_host() -> None:
    HOST.shutdown()
