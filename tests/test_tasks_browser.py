"""The two browser families: real shop server, real headless Chromium, real verifiers.

Wrong answers are produced through the real app (HTTP form posts or browser tools), never by poking the
verifier. Crash tests kill the real Chromium / raise mid-episode and check that nothing outlives close().
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Sequence

import psutil
import pytest

import tasks
from tasks.browser_automation import BrowserAutomationEnv
from tasks.browser_automation.verify import verify as verify_browser_automation
from tasks.policies import run_policy
from tasks.records import FinalAnswer, Step, ToolCall, Verdict
from tasks.shop.data import money
from tasks.shop.env import ShopEnvironment
from tasks.shop.lab_pages import LabApp, LabPage, make_lab_page
from tasks.website_admin import WebsiteAdminEnv

WA = tasks.get("website_admin")
BA = tasks.get("browser_automation")


def _first(family: tasks.Family, kind: str) -> tasks.TaskInstance:
    return next(i for i in family.instances("train") if i.payload["kind"] == kind)


def _chromium_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "chrom" in p.name() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


class _Http:
    """A signed-in HTTP client for the env's real server (to make wrong edits without a browser)."""

    def __init__(self, env: ShopEnvironment) -> None:
        assert env.server is not None
        self.base = env.server.origin
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.post("/login", {"username": "admin", "password": env.instance.payload["password"], "next": "/"})

    def post(self, path: str, form: dict[str, str | list[str]]) -> str:
        data = urllib.parse.urlencode(form, doseq=True).encode()
        with self.opener.open(self.base + path, data=data, timeout=10) as r:
            return r.read().decode()


def _verify_with(env: ShopEnvironment, answer: str) -> float:
    asyncio.run(env.submit(FinalAnswer(text=answer)))
    return _known(WA, env.verify()).score


def _known(family: tasks.Family, v: Verdict) -> Verdict:
    """The verdict, after checking that it names only checks the family declares."""
    assert set(v.passed_checks + v.failed_checks) <= set(family.check_names), v
    return v


# --- verifiers reject wrong answers -------------------------------------------------------------------
def test_website_admin_rejects_wrong_answers() -> None:
    count = _first(WA, "cancelled_count")
    top = _first(WA, "top_sellers")
    price = _first(WA, "set_price")
    n = count.payload["answer"]["number"]
    with WA.make_env(count) as env:
        env.reset()
        assert _verify_with(env, str(n)) == 1.0  # the right answer passes, without a browser
        assert _verify_with(env, f"There were {n} cancelled orders.") == 1.0
        assert _verify_with(env, str(n + 1)) < 1.0  # off by one
        assert _verify_with(env, f"{n} or {n + 1}") < 1.0  # hedged
        assert _verify_with(env, "") < 1.0
        assert env.final_answer is not None
        assert env.browser is not None and not env.browser.started  # no Chromium for a do-nothing episode
    names = top.payload["answer"]["names"]
    with WA.make_env(top) as env:
        env.reset()
        assert _verify_with(env, ", ".join(names)) == 1.0
        assert _verify_with(env, ", ".join(names[:2])) < 1.0  # one missing
        others = [p["name"] for p in env.shop().products if p["name"] not in names]
        assert _verify_with(env, ", ".join([*names, others[0]])) < 1.0  # one extra
    with WA.make_env(price) as env:
        env.reset()
        change = price.payload["changes"][0]
        http = _Http(env)
        http.post(f"/products/{change['key']}", {"name": env.shop().product(change["key"])["name"],
                                                 "price": money(change["value"] + 1), "stock": "5",
                                                 "status": "enabled"})
        verdict = _known(WA, env.verify())
        assert verdict.score < 1.0 and "price_cents" in verdict.feedback  # wrong price (and stock touched)
        assert "requested_changes" in verdict.failed_checks


def test_browser_automation_rejects_wrong_answers() -> None:
    disc = _first(BA, "discount")
    bulk = _first(BA, "bulk_stock")
    with BA.make_env(disc) as env:
        env.reset()
        row = disc.payload["new_rows"][0]["row"]
        form = {"rule-name": row["name"], "code": row["code"], "percent": str(row["percent"] + 1),
                "min-subtotal": money(row["min_subtotal_cents"]), "rule-category": row["category"],
                "starts": row["starts"], "ends": row["ends"], **({"active": "1"} if row["active"] else {})}
        _Http(env).post("/discounts/new", form)
        v = _known(BA, env.verify())
        assert v.score < 1.0 and "new_row_fields" in v.failed_checks  # off-by-one percent
        assert ".percent should be" in v.feedback
        assert "new_row_created" in v.passed_checks
    with BA.make_env(bulk) as env:
        env.reset()
        targets = [c["key"] for c in bulk.payload["changes"]]
        extra = next(p["sku"] for p in env.shop().products if p["sku"] not in targets)
        _Http(env).post("/stock/bulk", {"sku": [*targets, extra], "new-stock": str(bulk.payload["level"]), "back": "/stock"})
        v = _known(BA, env.verify())
        assert v.failed_checks == ["no_collateral_changes"] and extra in v.feedback  # one product too many
        n = len(targets)
        assert v.score == n / (n + 1) and v.passed_checks == ["requested_changes"]  # one item per gold change


def test_written_tests_are_scored_and_cheats_earn_nothing() -> None:
    inst = _first(BA, "write_tests")
    lab = make_lab_page(inst.payload["lab_seed"], inst.difficulty == "hard")
    tests = lab.oracle_tests.split("\n\n\n")
    with BA.make_env(inst) as env:
        env.reset()
        assert isinstance(env, BrowserAutomationEnv)
        assert env.verify().score == 0.0  # nothing written
        env.files["tests/test_lab.py"] = "\n\n\n".join(tests[:3]) + (
            "\n\n\ndef test_cheat():\n    assert True\n\n\ndef test_wrong(page):\n    assert page.title() == 'nope'\n")
        v = _known(BA, env.verify())
        assert v.score == pytest.approx(3 / 5), v.feedback  # 3 real passes of 5 tests; cheat and wrong don't count
        assert "does not use the page fixture" in v.feedback and v.failed_checks == ["tests_pass"]
        snap = env.snapshot()
    # the verifier serves the lab page itself: the snapshot is judged the same after the env is gone
    assert verify_browser_automation(inst, snap).score == pytest.approx(3 / 5)
    result = asyncio.run(_call_once(BA.make_env(inst), "write_file", {"path": "../conftest.py", "content": "x"}))
    assert result.is_error and "not allowed" in result.content


def test_one_browser_serves_every_run_of_a_verification() -> None:
    """The written-tests verification runs the tests 12-14 times, each a sandboxed pytest of its own, and all
    of them drive one Chromium (sampled while it runs: one browser process, the same one throughout)."""
    import threading

    from tasks.browser_automation.verify import judge_runs, run_on_mutants

    inst = _first(BA, "write_tests")
    lab = make_lab_page(inst.payload["lab_seed"], inst.difficulty == "hard")
    seen: list[set[int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            seen.append({p.pid for p in _chromium_children() if _is_browser(p)})

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run, schedule = run_on_mutants(inst, {"tests/test_lab.py": lab.oracle_tests})
    finally:
        done.set()
        sampler.join()
    assert judge_runs(run.outcomes, schedule.order)[0] == len(lab.oracle_tests.split("def test_")) - 1
    browsers = set().union(*seen)
    assert len(browsers) == 1 and max(len(s) for s in seen) == 1, seen


def test_written_tests_run_under_the_rlimit_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where bwrap cannot start, the sandbox falls back to rlimits (and `unshare --net` where allowed, whose
    loopback starts down: the forwarders bring it up). The written tests run there too."""
    from tasks.runtime.pw_tests import run_tests
    from tasks.runtime.sandbox import sandbox_backend
    from tasks.shop.server import ShopServer

    lab = make_lab_page(3, False)
    server = ShopServer(LabApp(lab))
    server.start()
    monkeypatch.setenv("COEVO_SANDBOX", "rlimit")
    sandbox_backend.cache_clear()
    try:
        assert sandbox_backend() == "rlimit"
        run = run_tests({"test_lab.py": lab.oracle_tests}, server.origin + "/lab")
    finally:
        server.stop()
        monkeypatch.delenv("COEVO_SANDBOX")
        sandbox_backend.cache_clear()
    assert not run.error and run.total == run.passed == len(lab.behaviours), run.summary()


def _is_browser(p: psutil.Process) -> bool:
    """A browser's own process: Chromium whose parent is not Chromium (its zygotes and renderers have one; the
    crash handler is another program)."""
    try:
        parent = p.parent()
        chromium = ("chromium", "chrome")
        return p.name() in chromium and parent is not None and parent.name() not in chromium
    except psutil.Error:
        return False  # gone while sampled


async def _call_once(env: ShopEnvironment, name: str, args: dict) -> object:
    env.reset()
    try:
        return await env.call(name, args)
    finally:
        env.close()


# --- browser tool errors --------------------------------------------------------------------------------
_LAB = ("<!doctype html><html><head><title>Lab</title></head><body><h1>Lab</h1>"
        "<a id='ext' href='http://example.com/'>Elsewhere</a> <a id='ok' href='/lab'>Here</a>"
        "<button id='hang' onclick='while(true){}'>Hang</button>"
        "<p id='ghost' style='display:none'>hidden</p><input id='name' aria-label='Name'></body></html>")


class _LabEnv(WebsiteAdminEnv):
    action_timeout_s = 2.0

    def lab_app(self) -> LabApp:
        return LabApp(LabPage(kind="static", html=_LAB, behaviours=[], oracle_tests="", params={}))


async def test_off_origin_and_missing_elements_are_tool_errors() -> None:
    env = _LabEnv(_first(WA, "price_of"))
    env.reset()
    try:
        assert env.browser is not None and env.server is not None
        port = env.server.port
        for url in ("https://example.com/", "http://127.0.0.1:1/", "file:///etc/passwd", "javascript:alert(1)",
                    f"http://127.0.0.1:{port + 1}/lab"):
            r = await env.call("goto", {"url": url})
            assert r.is_error and "not a page of this shop server" in r.content, (url, r.content)
        r = await env.call("goto", {"url": f"http://127.0.0.1:{port}/lab"})
        assert not r.is_error and "Now at /lab" in r.content and str(port) not in r.content
        r = await env.call("click", {"ref": "ext"})  # an off-origin link: the navigation is blocked
        assert r.is_error and "blocked" in r.content, r.content
        assert not (await env.call("goto", {"url": "/lab"})).is_error
        snap = (await env.call("read_page", {})).content
        assert "[ref=ok]" in snap and "hidden" not in snap and str(port) not in snap
        for name, args, needle in (
            ("click", {"ref": "no-such-thing"}, "no element with ref"),
            ("fill", {"ref": "missing", "text": "x"}, "no element with ref"),
            ("click", {"ref": "ghost"}, "not visible"),
            ("fill", {"ref": "ok", "text": "x"}, "not a text box"),
            ("select", {"ref": "name", "option": "x"}, "not a drop-down"),
            ("click", {"ref": "a'], body, [x='"}, "not valid"),
            ("press", {"key": "Enter; rm -rf"}, "not valid"),
            ("read_page", {"max_chars": 10}, "max_chars"),
            ("click", {}, "missing required argument 'ref'"),
        ):
            r = await env.call(name, args)
            assert r.is_error and needle in r.content, (name, r.content)
        # a hung page: the action is cut at the limit, the browser restarted, and the episode goes on
        r = await env.call("click", {"ref": "hang"})
        assert r.is_error and ("did not respond" in r.content or "timed out" in r.content), r.content
        r = await env.call("goto", {"url": "/lab"})
        assert not r.is_error, r.content
    finally:
        env.close()
    assert not _chromium_children()


async def test_cleanup_after_browser_killed_mid_episode() -> None:
    env = WA.make_env(_first(WA, "price_of"))
    env.reset()
    assert isinstance(env, ShopEnvironment) and env.server is not None and env.browser is not None
    port = env.server.port
    assert not (await env.call("goto", {"url": "/login"})).is_error
    procs = env.browser._browser_processes()
    main = next(p for p in procs if env.browser._marker in p.cmdline())
    os.kill(main.pid, signal.SIGKILL)
    r = await env.call("read_page", {})
    assert r.is_error and "crashed" in r.content, r.content
    r = await env.call("goto", {"url": "/login"})  # a fresh browser on the next action
    assert not r.is_error, r.content
    env.close()
    env.close()  # twice is fine
    assert not _chromium_children()
    assert not _port_open(port)


async def test_cleanup_when_the_policy_raises_mid_episode() -> None:
    seen: dict[str, int] = {}

    def policy(env: object, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        assert isinstance(env, ShopEnvironment) and env.server is not None
        seen["port"] = env.server.port
        if len(history) < 2:
            return ToolCall(name="goto", arguments={"url": "/login"})
        raise RuntimeError("policy blew up")

    run = await run_policy(_first(WA, "set_price"), policy)
    assert run.error.startswith("RuntimeError") and run.steps == 2 and run.verdict.score == 0.0
    assert not _chromium_children()
    assert not _port_open(seen["port"])


# --- oracle, do-nothing, determinism ---------------------------------------------------------------------
def _sample() -> list[tasks.TaskInstance]:
    """Kinds not already solved elsewhere in this file; `coevo tasks check` covers all 200 instances."""
    wa = {i.payload["kind"]: i for i in reversed(WA.instances("val"))}
    ba = {i.payload["kind"]: i for i in reversed(BA.instances("val"))}
    return [wa["top_sellers"], wa["cancel_pending"], wa["disable_product"], *ba.values()]


async def test_oracle_solves_and_do_nothing_fails_on_a_sample() -> None:
    sample = _sample()
    assert len({i.payload["kind"] for i in sample}) == 7
    sem = asyncio.Semaphore(4)

    async def both(inst: tasks.TaskInstance) -> tuple[str, float, float, str]:
        async with sem:
            o = await run_policy(inst, "oracle")
            d = await run_policy(inst, "do_nothing")
            return inst.id, o.verdict.score, d.verdict.score, o.verdict.feedback + o.error

    results = await asyncio.gather(*(both(i) for i in sample))
    bad = [r for r in results if r[1] < 1.0 or r[2] >= 1.0]
    assert not bad, bad
    assert not _chromium_children()


async def test_replay_reaches_the_same_state_and_results() -> None:
    inst = _first(WA, "moderate_reviews")
    history: list[Step] = []
    with WA.make_env(inst) as env:
        env.reset()
        while not isinstance(action := WA.oracle_action(env, history), FinalAnswer):
            history.append(Step(call=action, result=await env.call(action.name, action.arguments)))
        history.append(Step(call=ToolCall(name="read_page", arguments={}), result=await env.call("read_page", {})))
        first_tables = env.tables()
    with WA.make_env(inst) as env:
        replayed = await env.replay([s.call for s in history])
        assert [s.result for s in replayed] == [s.result for s in history]
        assert env.tables() == first_tables


def test_generation_is_deterministic_across_processes() -> None:
    code = ("import json, tasks; print(json.dumps([[i.instruction, i.payload, i.difficulty] for f in "
            "('website_admin', 'browser_automation') for i in tasks.instances(f)], sort_keys=True))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}).stdout
    here = [[i.instruction, i.payload, i.difficulty] for f in (WA, BA) for i in f.instances()]
    assert json.loads(out) == json.loads(json.dumps(here, sort_keys=True))
    for fam in (WA, BA):
        insts = fam.instances()
        assert {i.difficulty for i in insts} == {"easy", "hard"}
        assert [i.split for i in insts].count("train") == 20 and [i.split for i in insts].count("test") == 60


async def test_environments_share_one_chromium_in_isolated_contexts() -> None:
    """Two environments open at once use one Chromium (one launch), each in its own context: signing in on one
    does not sign in the other (cookies are per context, and 127.0.0.1 cookies would otherwise cross ports).
    Closing the last one stops Chromium; kept alive (as a rollout actor keeps it), the next environment reuses
    it without a launch, and shutting the host down leaves nothing behind."""
    from tasks.runtime.browser_host import HOST, keep_browser_alive, shutdown_host
    from tasks.shop.oracle import login_steps

    inst = _first(WA, "set_price")
    a, b = WA.make_env(inst), WA.make_env(inst)
    a.reset()
    b.reset()
    try:
        before = HOST.launches
        for step in login_steps(inst.payload["password"], "/orders"):
            r = await a.call(step.name, step.arguments)
            assert not r.is_error, r.content
        assert "Now at /orders" in r.content
        r = await b.call("goto", {"url": "/orders"})
        assert not r.is_error and "Now at /login" in r.content, r.content  # b is not signed in
        assert HOST.launches == before + 1 and len(HOST.users) == 2
    finally:
        a.close()
        assert _chromium_children()  # b still uses it
        b.close()
    assert not _chromium_children()
    keep_browser_alive()
    try:
        for _ in range(2):
            with WA.make_env(inst) as env:
                env.reset()
                assert not (await env.call("goto", {"url": "/login"})).is_error
        assert HOST.launches == before + 2 and _chromium_children()  # one more launch for both environments
    finally:
        keep_browser_alive(False)
        shutdown_host()
    assert not _chromium_children()
