"""Generated pages for the test-writing variant of `browser_automation`: a small widget page (counter,
to-do list or sign-up form) whose behaviours are listed in the prompt, plus the oracle's test file.

Each page is seeded: labels, limits and starting values vary per instance, so a test file written for one
instance fails on another. The page's HTML is only a renderer: every action asks `/lab/api` (a synchronous
request, so the page has changed when a click returns) and shows the answer, which `tasks.shop.lab_logic`
computes. The HTML is therefore the same for the correct page and every seeded fault, and carries none of
the instance's numbers. The oracle's tests use only the `page` fixture our conftest provides.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from html import escape
from typing import Any

from tasks.shop.app import Request, Response
from tasks.shop.lab_logic import LabRequestError, answer, parse_state

_TITLES = ("Ticket counter", "Visitor counter", "Stock counter", "Lap counter", "Score keeper")
_ITEMS = ("Buy milk", "Call Rosa", "Fix the fence", "Pay rent", "Water plants", "Book flights", "Send invoice",
          "Renew passport", "Clean gutters", "Order toner")


@dataclass(frozen=True)
class LabPage:
    kind: str
    html: str
    behaviours: list[str]
    oracle_tests: str
    params: dict[str, Any]  # what `tasks.shop.lab_logic` needs to answer for this page


# Every action posts (action, the state the page shows) and waits for the answer: a synchronous request, so
# a test's click returns only after the page shows the result.
_API = ("const api=(action,state)=>{const x=new XMLHttpRequest(); x.open('POST','/lab/api',false);"
        "x.setRequestHeader('Content-Type','application/x-www-form-urlencoded');"
        "x.send('action='+encodeURIComponent(action)+'&state='+encodeURIComponent(JSON.stringify(state||{})));"
        "if(x.status!==200) throw new Error('lab api: '+x.status+' '+x.responseText); return JSON.parse(x.responseText);};"
        "const $=id=>document.getElementById(id);")
_JSON = "application/json"


def _page(title: str, body: str, script: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title></head><body>"
            f"<h1>{escape(title)}</h1>{body}<script>{_API}{script}</script></body></html>")


def counter(rng: random.Random, hard: bool) -> LabPage:
    title = rng.choice(_TITLES)
    step = rng.randint(1, 4)
    start = step * rng.randint(1, 3) + rng.randint(0, step - 1)
    top = start + step * rng.randint(3, 6) + rng.randint(0, step - 1)
    body = ("<p>Count: <span id='count'></span></p><button id='dec'>Decrease</button> "
            "<button id='inc'>Increase</button> <button id='reset'>Reset</button><p id='message' role='status'></p>")
    script = ("let n=0; const show=r=>{n=r.n; $('count').textContent=r.n; $('message').textContent=r.message;};"
              "$('inc').onclick=()=>show(api('inc',{n})); $('dec').onclick=()=>show(api('dec',{n}));"
              "$('reset').onclick=()=>show(api('reset',{n})); show(api('init'));")
    beh = [f"On load, #count shows {start}.",
           f"Clicking #inc adds {step} to the count.",
           f"Clicking #dec subtracts {step}, but the count never goes below 0.",
           f"The count never exceeds {top}; once it is {top}, #message shows 'Maximum reached'.",
           f"Clicking #reset sets the count back to {start}."]
    n_up = -(-(top - start) // step) + 1
    n_down = -(-start // step) + 1
    tests = [
        f"def test_initial(page):\n    assert page.inner_text('#count') == '{start}'\n",
        f"def test_increase(page):\n    page.click('#inc')\n    assert page.inner_text('#count') == '{start + step}'\n",
        f"def test_decrease_floor(page):\n    for _ in range({n_down}):\n        page.click('#dec')\n"
        "    assert page.inner_text('#count') == '0'\n",
        f"def test_maximum(page):\n    for _ in range({n_up}):\n        page.click('#inc')\n"
        f"    assert page.inner_text('#count') == '{top}'\n    assert page.inner_text('#message') == 'Maximum reached'\n",
        f"def test_reset(page):\n    page.click('#inc')\n    page.click('#reset')\n    assert page.inner_text('#count') == '{start}'\n",
    ]
    if hard:
        beh.append("When the count is 0, #message shows 'At zero'.")
        tests.append(f"def test_at_zero(page):\n    for _ in range({n_down}):\n        page.click('#dec')\n"
                     "    assert page.inner_text('#message') == 'At zero'\n")
    return LabPage("counter", _page(title, body, script), beh, "\n\n".join(tests),
                   {"start": start, "step": step, "max": top})


def todo(rng: random.Random, hard: bool) -> LabPage:
    items = rng.sample(_ITEMS, rng.randint(2, 4))
    limit = rng.randint(20, 32)
    new = rng.choice([x for x in _ITEMS if x not in items])
    body = ("<p><label for='new-item'>New item</label> <input id='new-item'> <button id='add'>Add</button></p>"
            "<p id='error' role='alert'></p><ul id='items'></ul><p id='remaining'></p>")
    script = ("let items=[];"
              "const render=r=>{items=r.items; $('remaining').textContent=r.remaining; const ul=$('items');"
              "ul.replaceChildren(); items.forEach((it,i)=>{const li=document.createElement('li');"
              "li.classList.toggle('done', it.done); const cb=document.createElement('input'); cb.type='checkbox';"
              "cb.className='toggle'; cb.checked=it.done; cb.setAttribute('aria-label','Done: '+it.text);"
              "cb.onchange=()=>{items[i].done=cb.checked; li.classList.toggle('done', cb.checked);"
              "$('remaining').textContent=api('toggle',{items,index:i}).remaining;};"
              "const s=document.createElement('span'); s.className='text'; s.textContent=it.text;"
              "const d=document.createElement('button'); d.className='delete'; d.textContent='Delete';"
              "d.onclick=()=>render(api('delete',{items,index:i})); li.append(cb,' ',s,' ',d); ul.append(li);});};"
              "$('add').onclick=()=>{const r=api('add',{items,input:$('new-item').value}); $('error').textContent=r.error;"
              "$('new-item').value=r.input; render(r);}; render(api('init'));")
    k = len(items)
    beh = [f"The list #items starts with {k} items: {', '.join(items)}; #remaining shows '{k} items left'.",
           "Typing text into #new-item and clicking #add appends an item with that text (in its span.text) to "
           "#items and clears the input.",
           "Clicking #add with an empty or blank input shows 'Item text is required' in #error and adds nothing.",
           "Ticking an item's checkbox (input.toggle) marks it done and #remaining counts one item fewer.",
           "An item's button.delete removes it from the list."]
    tests = [
        f"def test_initial_items(page):\n    assert page.locator('#items li').count() == {k}\n"
        f"    assert page.inner_text('#remaining') == '{k} items left'\n",
        f"def test_add_item(page):\n    page.fill('#new-item', {new!r})\n    page.click('#add')\n"
        f"    assert page.locator('#items li').count() == {k + 1}\n"
        f"    assert page.locator('#items li span.text').last.inner_text() == {new!r}\n"
        "    assert page.input_value('#new-item') == ''\n",
        f"def test_empty_refused(page):\n    page.fill('#new-item', '   ')\n    page.click('#add')\n"
        f"    assert page.inner_text('#error') == 'Item text is required'\n    assert page.locator('#items li').count() == {k}\n",
        f"def test_toggle_done(page):\n    page.locator('#items li input.toggle').first.check()\n"
        f"    assert page.inner_text('#remaining') == '{k - 1} item{'' if k - 1 == 1 else 's'} left'\n",
        f"def test_delete(page):\n    page.locator('#items li button.delete').first.click()\n"
        f"    assert page.locator('#items li').count() == {k - 1}\n",
    ]
    if hard:
        beh.append(f"Items longer than {limit} characters are refused with 'Item text is too long' in #error.")
        tests.append(f"def test_too_long(page):\n    page.fill('#new-item', 'x' * {limit + 1})\n    page.click('#add')\n"
                     f"    assert page.inner_text('#error') == 'Item text is too long'\n"
                     f"    assert page.locator('#items li').count() == {k}\n")
    return LabPage("todo", _page("To-do list", body, script), beh, "\n\n".join(tests),
                   {"items": items, "limit": limit})


def signup(rng: random.Random, hard: bool) -> LabPage:
    n = rng.randint(6, 10)
    user = rng.choice(("ada", "bruno", "clara", "dmitri", "elena")) + str(rng.randint(10, 99))
    email = f"{user}@example.com"
    good = "k3" + "x" * n
    body = ("<form id='signup' onsubmit='return false'>"
            "<p><label for='email'>Email</label> <input id='email'></p>"
            "<p><label for='password'>Password</label> <input id='password' type='password'></p>"
            "<p><label for='confirm'>Confirm password</label> <input id='confirm' type='password'></p>"
            "<button id='submit'>Create account</button></form><p id='error' role='alert'></p>"
            "<p id='result' role='status'></p>")
    script = ("$('submit').onclick=()=>{const r=api('submit',{email:$('email').value.trim(),"
              "password:$('password').value, confirm:$('confirm').value, error:$('error').textContent});"
              "$('error').textContent=r.error; $('result').textContent=r.result;};")
    beh = ["Submitting (#submit) with an email without '@' shows 'Enter a valid email address' in #error.",
           f"A password shorter than {n} characters shows 'Password must be at least {n} characters' in #error.",
           "When #confirm differs from #password, #error shows 'Passwords do not match'.",
           "Valid input shows 'Welcome, <email>!' in #result and leaves #error empty.",
           "After a failed attempt, a corrected valid submission clears #error."]

    def fill(e: str, p: str, c: str) -> str:
        return f"    page.fill('#email', {e!r})\n    page.fill('#password', {p!r})\n    page.fill('#confirm', {c!r})\n    page.click('#submit')\n"

    tests = [
        "def test_bad_email(page):\n" + fill(user, good, good) + "    assert page.inner_text('#error') == 'Enter a valid email address'\n",
        "def test_short_password(page):\n" + fill(email, "k3", "k3") + f"    assert page.inner_text('#error') == 'Password must be at least {n} characters'\n",
        "def test_mismatch(page):\n" + fill(email, good, good + "y") + "    assert page.inner_text('#error') == 'Passwords do not match'\n",
        "def test_success(page):\n" + fill(email, good, good) + f"    assert page.inner_text('#result') == 'Welcome, {email}!'\n"
        "    assert page.inner_text('#error') == ''\n",
        "def test_error_cleared(page):\n" + fill(email, good, "nope") + fill(email, good, good)
        + "    assert page.inner_text('#error') == ''\n",
    ]
    if hard:
        beh.append("A password without any digit shows 'Password must contain a digit' in #error.")
        nodigit = "y" * (n + 1)
        tests.append("def test_needs_digit(page):\n" + fill(email, nodigit, nodigit)
                     + "    assert page.inner_text('#error') == 'Password must contain a digit'\n")
    return LabPage("signup", _page("Create your account", body, script), beh, "\n\n".join(tests),
                   {"min_length": n, "digit": hard})


KINDS = {"counter": counter, "todo": todo, "signup": signup}


def make_lab_page(seed: int, hard: bool) -> LabPage:
    rng = random.Random(seed)
    return KINDS[rng.choice(sorted(KINDS))](rng, hard)


def lab_response(lab: LabPage, req: Request, fault: int) -> Response:
    """/lab: the page; /lab/api: the answer of the page's logic under `fault` (0: the correct page)."""
    path = req.path.rstrip("/") or "/"
    if path == "/lab":
        return Response(body=lab.html)
    if path == "/lab/api" and req.method == "POST":
        try:
            body = answer(lab.kind, lab.params, req.arg("action"), parse_state(req.arg("state")), fault)
        except LabRequestError as e:
            return Response(status=400, body=json.dumps({"error": str(e)}), content_type=_JSON)
        return Response(body=json.dumps(body), content_type=_JSON)
    return Response(status=404, body="There is no page here; the page under test is /lab.",
                    content_type="text/plain; charset=utf-8")


class LabApp:
    """Serves one lab page (/lab, /lab/api) with its correct behaviour and nothing else: the episode's shop
    server mounts it, and a verifier can serve it from a server of its own."""

    def __init__(self, lab: LabPage) -> None:
        self.lab = lab

    def handle(self, req: Request) -> Response:
        return lab_response(self.lab, req, 0)
