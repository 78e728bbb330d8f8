"""budget_approval data: payload schema, seeded generator, policy rules and ground truth.

Money is integer cents everywhere (no float drift); prices are multiples of 50 cents so the hard variant's
10% bulk discount stays whole cents.
easy: 3-4 requests from different departments, catalog items only, no amendments.
hard: 5-7 requests sharing departments (budget consumed in request-id order), custom items priced by
      Procurement over messages, bulk discount, amendments later in the thread, a superseded catalog.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tasks.base import Draft

Decision = Literal["APPROVE", "REJECT", "ESCALATE"]
SUMMARY_PATH = "approvals/summary.csv"
SUMMARY_COLUMNS = ["request_id", "manager", "total", "decision"]
BULK_QTY = 10  # hard: lines with at least this many units get 10% off

FIRST = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam", "Maya",
         "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor", "Wen", "Yusuf", "Zoe"]
LAST = ["Alvarez", "Brooks", "Chen", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kowalski",
        "Larsen", "Mehta", "Novak", "Okafor", "Petrov", "Quispe", "Rossi", "Sato", "Tanaka", "Usman", "Varga"]
DEPARTMENTS = ["Engineering", "Marketing", "Sales", "Operations", "Design", "Support", "Legal", "Research"]
ITEMS = [("FUR", "Ergonomic chair"), ("FUR", "Standing desk"), ("FUR", "Filing cabinet"), ("FUR", "Meeting table"),
         ("ELE", "27-inch monitor"), ("ELE", "USB-C dock"), ("ELE", "Laptop 14-inch"),
         ("ELE", "Noise-cancelling headset"),
         ("ELE", "Webcam HD"), ("ELE", "Wireless keyboard"), ("SOF", "Design suite licence"), ("SOF", "IDE licence"),
         ("SOF", "Analytics seat"), ("OFF", "Whiteboard"), ("OFF", "Printer paper box"), ("OFF", "Label printer"),
         ("OFF", "Desk lamp"), ("NET", "Wi-Fi access point"), ("NET", "Network switch 24-port"),
         ("NET", "Patch cable pack")]
CUSTOM = ["custom acoustic booth", "branded trade-show stand", "custom server rack", "bespoke conference screen",
          "engraved award plaques"]
COMPANIES = ["Orion Analytics", "Bramble Labs", "Kestrel Logistics", "Sable Health", "Tidewater Media"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Contact(_Model):
    id: str
    name: str
    role: str
    department: str
    email: str


class CatalogItem(_Model):
    code: str
    name: str
    price_cents: int


class Line(_Model):
    code: str
    qty: int


class Message(_Model):
    sender: str  # contact id
    text: str


class Request(_Model):
    id: str  # REQ-1234, decided in ascending order
    thread_id: str
    manager_id: str
    department: str
    lines: list[Line]  # final lines after the thread's amendments (ground truth)
    messages: list[Message]


class OtherThread(_Model):
    thread_id: str
    subject: str
    messages: list[Message]


class Document(_Model):
    id: str
    title: str
    body: str
    required: bool


class BudgetPayload(_Model):
    company: str
    hard: bool
    limit_cents: int
    contacts: list[Contact]
    catalog: list[CatalogItem]
    custom_quotes: dict[str, int]  # CUST-code -> unit price cents (only Procurement knows them)
    budgets: dict[str, int]  # department -> remaining budget cents
    requests: list[Request]
    other_threads: list[OtherThread]
    documents: list[Document]
    procurement_id: str
    director_id: str


def money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


def price_of(p: BudgetPayload, code: str) -> int:
    if code in p.custom_quotes:
        return p.custom_quotes[code]
    return next(c.price_cents for c in p.catalog if c.code == code)


def line_total(p: BudgetPayload, line: Line) -> int:
    base = price_of(p, line.code) * line.qty
    return base * 9 // 10 if p.hard and line.qty >= BULK_QTY else base


def request_total(p: BudgetPayload, req: Request) -> int:
    return sum(line_total(p, ln) for ln in req.lines)


def decide(p: BudgetPayload) -> dict[str, tuple[int, Decision]]:
    """Ground truth: request id -> (total cents, decision), applying the policy in request-id order."""
    remaining = dict(p.budgets)
    out: dict[str, tuple[int, Decision]] = {}
    for req in sorted(p.requests, key=lambda r: r.id):
        total = request_total(p, req)
        decision: Decision
        if total > remaining[req.department]:
            decision = "REJECT"
        else:
            decision = "ESCALATE" if total > p.limit_cents else "APPROVE"
            remaining[req.department] -= total
        out[req.id] = (total, decision)
    return out


def contact(p: BudgetPayload, contact_id: str) -> Contact:
    return next(c for c in p.contacts if c.id == contact_id)


def required_contacts(p: BudgetPayload) -> set[str]:
    need = set()
    if any(ln.code in p.custom_quotes for r in p.requests for ln in r.lines):
        need.add(p.procurement_id)
    if any(d == "ESCALATE" for _, d in decide(p).values()):
        need.add(p.director_id)
    return need


def policy_text(p: BudgetPayload) -> str:
    bulk = (f" Lines with {BULK_QTY} or more units get a 10% bulk discount on that line (round down to the cent)."
            if p.hard else "")
    return (
        "Purchase request approval policy\n\n"
        "1. The request total is the sum over its lines of quantity x unit price from the current Product catalog."
        f"{bulk} Custom items (codes starting with CUST-) are not in the catalog: ask the Procurement Officer for "
        "a quote by message, naming the item codes.\n"
        "2. Use the request as it stands after any changes the requester made later in the same thread.\n"
        "3. Decide requests in ascending request-id order against the department's remaining budget (the "
        "Department budgets document). APPROVE and ESCALATE reserve the request total from that budget; "
        "REJECT reserves nothing.\n"
        "4. REJECT when the total is more than the department's remaining budget.\n"
        f"5. Otherwise ESCALATE when the total is more than {money(p.limit_cents)}; an escalation also needs a "
        "message to the Finance Director that names the request id.\n"
        "6. Otherwise APPROVE. (A total exactly equal to a limit is within it.)\n"
    )


def _catalog_doc(items: list[CatalogItem], title: str) -> str:
    lines = [title, "", "code | item | unit price"]
    lines += [f"{c.code} | {c.name} | {money(c.price_cents)}" for c in items]
    return "\n".join(lines)


def _pick_budgets(rng: random.Random, p_totals: list[tuple[str, int]], hard: bool) -> dict[str, int]:
    """Budgets that make the decisions interesting: cut each department's cumulative spend at a random
    request, sometimes exactly at the boundary (the 'equal is within budget' rule)."""
    budgets: dict[str, int] = {}
    for dept in sorted({d for d, _ in p_totals}):
        totals = [t for d, t in p_totals if d == dept]
        cut = rng.randint(0, len(totals)) if hard else rng.choice([0, 1, 1])
        spent = sum(totals[:cut])
        nxt = totals[cut] if cut < len(totals) else 50_000
        slack = rng.choice([0, 0, rng.randrange(0, max(1, nxt // 2), 50)])
        budgets[dept] = spent + slack
    return budgets


def _directory(rng: random.Random, company: str, names: list[str],
               departments: list[str]) -> tuple[list[Contact], dict[str, str], str, str]:
    """The company directory in shuffled order: (contacts, department -> manager id, procurement id,
    director id)."""
    domain = company.split()[0].lower() + ".example"
    contacts: list[Contact] = []

    def add(role: str, dept: str) -> str:
        cid = f"U{len(contacts) + 1:02d}"
        name = names[len(contacts)]
        contacts.append(Contact(id=cid, name=name, role=role, department=dept,
                                email=name.lower().replace(" ", ".") + "@" + domain))
        return cid

    managers = {d: add(f"{d} Manager", d) for d in departments}
    procurement_id = add("Procurement Officer", "Finance")
    director_id = add("Finance Director", "Finance")
    add("Finance Analyst", "Finance")
    add("HR Partner", "People")
    add("IT Administrator", "IT")
    add("Office Manager", "Operations")
    order = list(range(len(contacts)))
    rng.shuffle(order)
    return [contacts[i] for i in order], managers, procurement_id, director_id


def _catalog(rng: random.Random, hard: bool) -> tuple[list[CatalogItem], dict[str, int], dict[str, str]]:
    """(the current catalog, custom item code -> quoted unit price, custom item code -> its name)."""
    items = rng.sample(ITEMS, 12 if hard else 8)
    catalog = [CatalogItem(code=f"{pre}-{rng.randint(100, 999)}", name=name,
                           price_cents=rng.randrange(2_000, 90_000, 50)) for pre, name in items]
    custom_quotes = ({f"CUST-{n}": rng.randrange(50_000, 250_000, 50) for n in rng.sample(range(10, 99), 2)}
                     if hard else {})
    custom_names = dict(zip(custom_quotes, rng.sample(CUSTOM, len(custom_quotes)), strict=True))
    return catalog, custom_quotes, custom_names


def _amend(rng: random.Random, mgr: str, lines: list[Line], item_name: dict[str, str]) -> tuple[list[Line], Message]:
    """A later message in the thread that drops a line or changes a quantity; the lines after it."""
    j = rng.randrange(len(lines))
    if len(lines) > 1 and rng.random() < 0.4:
        text = f"Update: please drop {lines[j].code} from this request, we found spare stock."
        return lines[:j] + lines[j + 1:], Message(sender=mgr, text=text)
    new_qty = lines[j].qty + rng.choice([-1, 1, 2, 3]) if lines[j].qty > 1 else lines[j].qty + 2
    text = f"Small change: please make that {new_qty} x {item_name[lines[j].code]} ({lines[j].code})."
    return lines[:j] + [Line(code=lines[j].code, qty=new_qty)] + lines[j + 1:], Message(sender=mgr, text=text)


def _requests(rng: random.Random, hard: bool, departments: list[str], managers: dict[str, str],
              contacts: list[Contact], catalog: list[CatalogItem], custom_quotes: dict[str, int],
              item_name: dict[str, str], n_req: int) -> tuple[list[Request], list[int]]:
    """The purchase requests (final lines after amendments) and the thread numbers (two spare ones last)."""
    req_numbers = sorted(rng.sample(range(1000, 9999), n_req))
    thread_nums = rng.sample(range(10, 99), n_req + 2)
    requests: list[Request] = []
    custom_left = list(custom_quotes)
    note = {c: ", custom item, no catalog price" for c in custom_quotes}
    for i, num in enumerate(req_numbers):
        dept = departments[i % len(departments)] if hard else departments[i]
        mgr = managers[dept]
        codes = rng.sample([c.code for c in catalog], rng.randint(1, 3))
        # Each custom item goes to some request; the last requests take any still left.
        if custom_left and (rng.random() < 0.6 or i >= n_req - len(custom_left)):
            codes.append(custom_left.pop())
        lines = [Line(code=c, qty=rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12, 15]) if hard else rng.randint(1, 8))
                 for c in codes]
        mgr_name = next(c.name for c in contacts if c.id == mgr)
        body = "\n".join(f"- {ln.qty} x {item_name[ln.code]} ({ln.code}{note.get(ln.code, '')})" for ln in lines)
        messages = [Message(sender=mgr, text=f"Hi, {dept} would like to order:\n{body}\nThanks,\n{mgr_name}")]
        if hard and rng.random() < 0.5:
            lines, change = _amend(rng, mgr, lines, item_name)
            messages.append(change)
        requests.append(Request(id=f"REQ-{num}", thread_id=f"TH-{thread_nums[i]}", manager_id=mgr, department=dept,
                                lines=lines, messages=messages))
    return requests, thread_nums


def _other_threads(contacts: list[Contact], thread_nums: list[int]) -> list[OtherThread]:
    return [
        OtherThread(thread_id=f"TH-{thread_nums[-1]}", subject="Team lunch on Friday",
                    messages=[Message(sender=contacts[0].id, text="Pizza or sushi this Friday? Reply by Thursday.")]),
        OtherThread(thread_id=f"TH-{thread_nums[-2]}", subject="Printer on the 3rd floor",
                    messages=[Message(sender=contacts[1].id,
                                      text="The 3rd floor printer is jammed again; IT is on it.")]),
    ]


def _documents(rng: random.Random, draft: BudgetPayload, budgets: dict[str, int]) -> list[Document]:
    """The document store in shuffled order: the three the policy needs and two or three distractors."""
    docs = [
        ("Approval policy", policy_text(draft), True),
        ("Product catalog (current)", _catalog_doc(draft.catalog, "Product catalog - current prices"), True),
        ("Department budgets", "Department budgets - remaining this quarter\n\ndepartment | remaining\n" + "\n".join(
            f"{d} | {money(c)}" for d, c in sorted(budgets.items())), True),
        ("Travel expense guidelines", "Travel expenses above $1,000.00 need sign-off from your line manager. "
                                      "Book economy class for flights under 6 hours.", False),
        ("Office relocation FAQ", "The move to the new office happens next month. Label your boxes with your "
                                  "team name. Purchases for the new office follow the normal approval policy.", False),
    ]
    if draft.hard:
        stale = [c.model_copy(update={"price_cents": c.price_cents - rng.randrange(500, 1_500, 50)})
                 for c in draft.catalog]
        docs.append(("Product catalog 2023 (superseded)", _catalog_doc(stale, "Product catalog 2023 - SUPERSEDED, "
                                                                             "do not use"), False))
    rng.shuffle(docs)
    return [Document(id=f"DOC-{i + 1}", title=t, body=b, required=r) for i, (t, b, r) in enumerate(docs)]


def generate_payload(rng: random.Random, hard: bool) -> BudgetPayload:
    """Directory, catalog, requests, then budgets re-drawn until at least two decisions differ, then the
    documents. (The order of the draws is part of the instances: keep it.)"""
    company = rng.choice(COMPANIES)
    names = [f"{first} {last}" for first, last in zip(rng.sample(FIRST, 16), rng.sample(LAST, 16), strict=True)]
    n_req = rng.randint(5, 7) if hard else rng.randint(3, 4)
    departments = rng.sample(DEPARTMENTS, 3 if hard else n_req)
    contacts, managers, procurement_id, director_id = _directory(rng, company, names, departments)
    catalog, custom_quotes, custom_names = _catalog(rng, hard)
    limit = rng.choice([300_000, 500_000, 750_000])
    item_name = {c.code: c.name for c in catalog} | custom_names
    requests, thread_nums = _requests(rng, hard, departments, managers, contacts, catalog, custom_quotes,
                                      item_name, n_req)
    draft = BudgetPayload(company=company, hard=hard, limit_cents=limit, contacts=contacts, catalog=catalog,
                          custom_quotes=custom_quotes, budgets={d: 0 for d in departments}, requests=requests,
                          other_threads=_other_threads(contacts, thread_nums), documents=[],
                          procurement_id=procurement_id, director_id=director_id)
    totals = [(r.department, request_total(draft, r)) for r in sorted(requests, key=lambda r: r.id)]
    for _ in range(30):  # re-draw until the instance has at least two different decisions
        budgets = _pick_budgets(rng, totals, hard)
        trial = draft.model_copy(update={"budgets": budgets})
        if len({d for _, d in decide(trial).values()}) >= 2:
            break
    return draft.model_copy(update={"budgets": budgets, "documents": _documents(rng, draft, budgets)})


def instruction(p: BudgetPayload) -> str:
    return (
        f"You are the purchasing assistant at {p.company}. Managers have sent purchase requests as message threads "
        "(subject 'Purchase request REQ-....'). Decide every one of them by the company's approval policy (find it "
        "and the other documents you need in the document store; read them).\n"
        "For each request, reply in its thread with one message containing 'Total: $<amount with cents>' and "
        "'Decision: APPROVE', 'Decision: REJECT' or 'Decision: ESCALATE' (if you reply twice, the latest reply "
        "counts). Contact people through the directory when the policy says so.\n"
        f"Finally write the file {SUMMARY_PATH} as CSV with the header {','.join(SUMMARY_COLUMNS)} and one row per "
        "request (manager = the requester's full name, total as a number like 1234.50, decision in capitals)."
    )


def draft(index: int, rng: random.Random) -> Draft:
    """Even indices are easy, odd ones hard, so every split holds both levels."""
    hard = index % 2 == 1
    p = generate_payload(rng, hard)
    return Draft(instruction=instruction(p), difficulty="hard" if hard else "easy", payload=p.model_dump())
