"""Seeded faults of the lab pages, for judging written tests: a test earns its score only when it passes on
the correct page and fails on a page with one specified behaviour broken (one fault per behaviour, in
`tasks.shop.lab_logic`; the HTML is the same for all of them).

The verifier runs the written tests once per run of a `RunSchedule`: the correct page and every fault twice
each, in a secret shuffled order, each run a separate sandboxed pytest whose browser carries an unguessable
token of that run. The server answers a token's requests as its variant, and refuses requests without a
known token (so a test cannot ask for the correct answers on the side). A run sees only its own variant and
keeps nothing for the next, so a test cannot compare variants or vote across them; it can tell a fault from
the correct page only by checking behaviour against the specification. The twin runs catch a test that
passes or fails at random: it must answer alike on both runs of every variant.
"""

from __future__ import annotations

import random
import secrets
from http.cookies import SimpleCookie

from tasks.shop.app import Request, Response
from tasks.shop.lab_pages import LabPage, lab_response

COOKIE = "coevo_run"
TWINS = 2  # runs of each variant (the correct page and each fault)


def n_faults(lab: LabPage) -> int:
    """Seeded faults of `lab`: one per behaviour the prompt lists (`tasks.shop.lab_logic`)."""
    return len(lab.behaviours)


class RunSchedule:
    """The runs of one verification: `order[i]` is run i's variant (0: the correct page, 1..n: faults), drawn
    by `rng`; `tokens[i]` is run i's secret."""

    def __init__(self, n_mutants: int, rng: random.Random | None = None) -> None:
        self.order = [v for v in range(n_mutants + 1) for _ in range(TWINS)]
        (rng or random.SystemRandom()).shuffle(self.order)
        self.tokens = [secrets.token_hex(16) for _ in self.order]
        self._variant = dict(zip(self.tokens, self.order, strict=True))

    @property
    def runs(self) -> int:
        return len(self.order)

    def variant_of(self, token: str) -> int | None:
        return self._variant.get(token)


class LabVariantsApp:
    """Serves /lab and answers /lab/api as the variant of the request's run token; a request without a known
    token is refused (403)."""

    def __init__(self, lab: LabPage, schedule: RunSchedule) -> None:
        self.lab = lab
        self.schedule = schedule

    def handle(self, req: Request) -> Response:
        variant = self.schedule.variant_of(_token(req.cookie))
        if variant is None:
            return Response(status=403, body="This page is served only to the verifier's test runs.",
                            content_type="text/plain; charset=utf-8")
        return lab_response(self.lab, req, variant)


def _token(cookie: str) -> str:
    try:
        morsel = SimpleCookie(cookie).get(COOKIE)
    except Exception:  # noqa: BLE001 - a malformed cookie header carries no token
        return ""
    return morsel.value if morsel else ""
