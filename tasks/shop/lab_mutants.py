"""Seeded faults of the lab pages, for judging written tests: a test earns its score only when it passes on
the correct page and fails on a page with one specified behaviour broken (one mutant per behaviour).

The verifier serves the correct page and every mutant twice each under the same URL; which of a test's runs
gets which variant is decided by the server from a per-verification secret (`RunSchedule`), so a test
cannot know which run shows the correct page, and a test that fails one run at random is caught by the
twin run of the same variant answering otherwise. The correct page is served twice too: a test knows its own
run index (its parameter, its cookie), and with one correct run "pass on run 0 only" earned a slot whenever
the shuffle put the correct page first (1 in 1 + 2n verifications); with two it must name both correct runs
(1 in C(2 + 2n, 2): 1 in 91 with 6 faults).
"""

from __future__ import annotations

import hashlib
import random
from http.cookies import SimpleCookie

from tasks.shop.app import Request, Response
from tasks.shop.lab_pages import LabPage

COOKIE = "coevo_run"
TWINS = 2  # runs of each variant (the correct page and each mutant) per test

# (text in the correct page, its replacement): one fault per listed behaviour, in the prompt's order
_FAULTS: dict[str, list[tuple[str, str]]] = {
    "counter": [("let n=start;", "let n=start+1;"),
                ("n=Math.min(max,n+step);", "n=Math.min(max,n+step+1);"),
                ("n=Math.max(0,n-step);", "n=n-step;"),
                ("n=Math.min(max,n+step);", "n=n+step;"),
                ("$('reset').onclick=()=>{n=start;show();}", "$('reset').onclick=()=>{show();}"),
                ("(n===0 ? 'At zero' : '')", "''")],
    "todo": [("n + (n===1 ? ' item left' : ' items left')", "(n+1) + ' items left'"),
             ("add(t); $('new-item').value='';", "add(t);"),
             ("$('error').textContent='Item text is required'; return;", "$('error').textContent='Item text is required';"),
             ("cb.onchange=()=>{li.classList.toggle('done', cb.checked); count();};",
              "cb.onchange=()=>{li.classList.toggle('done', cb.checked);};"),
             ("d.onclick=()=>{li.remove(); count();};", "d.onclick=()=>{count();};"),
             ("if(t.length>limit)", "if(t.length>limit+100)")],
    "signup": [("return 'Enter a valid email address';", "0;"),
               ("if(p.length<n)", "if(p.length<2)"),
               ("if(p!==c) return 'Passwords do not match';", ""),
               ("'Welcome, '+e+'!'", "'Welcome, '+e"),
               ("$('error').textContent=err;", "if(err) $('error').textContent=err;"),
               ("if(!/[0-9]/.test(p)) return 'Password must contain a digit';", "")],
}


def mutants(lab: LabPage) -> list[str]:
    """The HTML of each mutant of `lab`: one per behaviour the prompt lists."""
    out = []
    for old, new in _FAULTS[lab.kind][:len(lab.behaviours)]:
        if old not in lab.html:
            raise ValueError(f"lab page {lab.kind}: the fault target {old!r} is not in the page")
        out.append(lab.html.replace(old, new, 1))
    return out


def run_key(module: str, function: str) -> str:
    """What a test's runs are scheduled by (the cookie carries its hash, never the variant)."""
    return hashlib.sha256(f"{module}::{function}".encode()).hexdigest()[:16]


class RunSchedule:
    """Which variant (0: the correct page, 1..n: mutants) each run of each test sees: a shuffle per test,
    seeded by a secret of the verification and the test's key."""

    def __init__(self, n_mutants: int, secret: bytes) -> None:
        self.n_mutants = n_mutants
        self.secret = secret

    @property
    def runs(self) -> int:
        return TWINS * (1 + self.n_mutants)

    def variants(self, key: str) -> list[int]:
        order = [v for v in range(self.n_mutants + 1) for _ in range(TWINS)]
        seed = int.from_bytes(hashlib.sha256(self.secret + key.encode()).digest()[:8], "big")
        random.Random(seed).shuffle(order)
        return order


class LabVariantsApp:
    """Serves /lab as the variant the request's run cookie is scheduled for (the correct page without one)."""

    def __init__(self, lab: LabPage, schedule: RunSchedule) -> None:
        self.pages = [lab.html, *mutants(lab)]
        self.schedule = schedule

    def handle(self, req: Request) -> Response:
        if (req.path.rstrip("/") or "/") != "/lab":
            return Response(status=404, body="There is no page here; the page under test is /lab.",
                            content_type="text/plain; charset=utf-8")
        return Response(body=self.pages[self._variant(req.cookie)])

    def _variant(self, cookie: str) -> int:
        try:
            morsel = SimpleCookie(cookie).get(COOKIE)
        except Exception:  # noqa: BLE001 - a malformed cookie header is the correct page
            return 0
        key, _, run = (morsel.value if morsel else "").partition("-")
        if not run.isdigit() or int(run) >= self.schedule.runs:
            return 0
        return self.schedule.variants(key)[int(run)]
