"""Generated pages for the test-writing variant of `browser_automation`: a small widget page (counter,
to-do list or sign-up form) whose behaviours are listed in the prompt, plus the oracle's test file.

Each page is seeded: labels, limits and starting values vary per instance, so a test file written for one
instance fails on another. The oracle's tests use only the `page` fixture our conftest provides.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from html import escape

from tasks.shop.app import Request, Response

_TITLES = ("Ticket counter", "Visitor counter", "Stock counter", "Lap counter", "Score keeper")
_ITEMS = ("Buy milk", "Call Rosa", "Fix the fence", "Pay rent", "Water plants", "Book flights", "Send invoice",
          "Renew passport", "Clean gutters", "Order toner")


@dataclass(frozen=True)
class LabPage:
    kind: str
    html: str
    behaviours: list[str]
    oracle_tests: str


def _page(title: str, body: str, script: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title></head><body>"
            f"<h1>{escape(title)}</h1>{body}<script>{script}</script></body></html>")


def counter(rng: random.Random, hard: bool) -> LabPage:
    title = rng.choice(_TITLES)
    step = rng.randint(1, 4)
    start = step * rng.randint(1, 3) + rng.randint(0, step - 1)
    top = start + step * rng.randint(3, 6) + rng.randint(0, step - 1)
    body = ("<p>Count: <span id='count'></span></p><button id='dec'>Decrease</button> "
            "<button id='inc'>Increase</button> <button id='reset'>Reset</button><p id='message' role='status'></p>")
    script = (f"const start={start}, step={step}, max={top}; let n=start; const $=id=>document.getElementById(id);"
              "const show=()=>{$('count').textContent=n; $('message').textContent = n>=max ? 'Maximum reached' : "
              "(n===0 ? 'At zero' : '');}; $('inc').onclick=()=>{n=Math.min(max,n+step);show();};"
              "$('dec').onclick=()=>{n=Math.max(0,n-step);show();}; $('reset').onclick=()=>{n=start;show();}; show();")
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
    return LabPage("counter", _page(title, body, script), beh, "\n\n".join(tests))


def todo(rng: random.Random, hard: bool) -> LabPage:
    items = rng.sample(_ITEMS, rng.randint(2, 4))
    limit = rng.randint(20, 32)
    new = rng.choice([x for x in _ITEMS if x not in items])
    body = ("<p><label for='new-item'>New item</label> <input id='new-item'> <button id='add'>Add</button></p>"
            "<p id='error' role='alert'></p><ul id='items'></ul><p id='remaining'></p>")
    script = (f"const limit={limit}; const $=id=>document.getElementById(id);"
              "const count=()=>{const n=document.querySelectorAll('#items li:not(.done)').length;"
              "$('remaining').textContent = n + (n===1 ? ' item left' : ' items left');};"
              "const add=t=>{const li=document.createElement('li'); const cb=document.createElement('input');"
              "cb.type='checkbox'; cb.className='toggle'; cb.setAttribute('aria-label','Done: '+t);"
              "cb.onchange=()=>{li.classList.toggle('done', cb.checked); count();};"
              "const s=document.createElement('span'); s.className='text'; s.textContent=t;"
              "const d=document.createElement('button'); d.className='delete'; d.textContent='Delete';"
              "d.onclick=()=>{li.remove(); count();}; li.append(cb,' ',s,' ',d); $('items').append(li); count();};"
              "$('add').onclick=()=>{const t=$('new-item').value.trim(); $('error').textContent='';"
              "if(!t){$('error').textContent='Item text is required'; return;}"
              "if(t.length>limit){$('error').textContent='Item text is too long'; return;}"
              f"add(t); $('new-item').value='';}}; {''.join(f'add({t!r});' for t in items)}")
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
    return LabPage("todo", _page("To-do list", body, script), beh, "\n\n".join(tests))


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
    digit = "if(!/[0-9]/.test(p)) return 'Password must contain a digit';" if hard else ""
    script = (f"const n={n}; const $=id=>document.getElementById(id);"
              "const check=(e,p,c)=>{if(!/^[^@\\s]+@[^@\\s]+\\.[a-z]+$/.test(e)) return 'Enter a valid email address';"
              f"if(p.length<n) return 'Password must be at least {n} characters';{digit}"
              "if(p!==c) return 'Passwords do not match'; return '';};"
              "$('submit').onclick=()=>{const e=$('email').value.trim(), p=$('password').value, c=$('confirm').value;"
              "const err=check(e,p,c); $('error').textContent=err; $('result').textContent = err ? '' : 'Welcome, '+e+'!';};")
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
    return LabPage("signup", _page("Create your account", body, script), beh, "\n\n".join(tests))


KINDS = {"counter": counter, "todo": todo, "signup": signup}


def make_lab_page(seed: int, hard: bool) -> LabPage:
    rng = random.Random(seed)
    return KINDS[rng.choice(sorted(KINDS))](rng, hard)


class LabApp:
    """Serves one lab page at /lab and nothing else: what the verifier runs written tests against (a server
    of its own, so verification needs neither the episode's server nor its state)."""

    def __init__(self, html: str) -> None:
        self.html = html

    def handle(self, req: Request) -> Response:
        if (req.path.rstrip("/") or "/") == "/lab":
            return Response(body=self.html)
        return Response(status=404, body="There is no page here; the page under test is /lab.",
                        content_type="text/plain; charset=utf-8")
