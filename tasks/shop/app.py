"""The shop-admin web application: request -> response over one instance's SQLite database.

Deterministic on purpose (no clock, no random session ids) so that replaying the same browser actions
gives the same pages. One connection guarded by a lock: the server is threaded but the app is tiny.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol
from urllib.parse import quote, urlencode

from tasks.shop import pages as P
from tasks.shop.data import CATEGORIES, CUSTOMER_GROUPS, ORDER_STATUSES, SOLD_STATUSES, YEARS, money

_SKU_RE = re.compile(r"^[A-Z]{3}-\d{3,5}$")
_CODE_RE = re.compile(r"^[A-Z0-9]{4,16}$")
_MONEY_RE = re.compile(r"^\d{1,7}(\.\d{1,2})?$")
_ID_RE = re.compile(r"[0-9]{1,9}")
# A redirect target we accept from a request (`next`, `back`): a path on this server. No scheme or host, no
# second '/' or '\' after the first (browsers read `//host` and `/\host` as another server), no whitespace or
# control characters (browsers drop them, which could turn `/\t/host` into `//host`).
_SAFE_PATH_RE = re.compile(r"/(?![/\\])[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*")
MAX_PAGE = 999_999


class BadRequest(Exception):
    """A request value out of range: answered with 400 and the message, never a crash."""


def whole_number(text: str, max_digits: int = 9) -> int | None:
    """`text` as a non-negative whole number of at most `max_digits` ASCII digits, else None."""
    return int(text) if re.fullmatch(rf"[0-9]{{1,{max_digits}}}", text) else None


def safe_path(target: str, default: str, prefix: str = "/") -> str:
    """`target` when it is a same-origin path starting with `prefix`, else `default`."""
    ok = len(target) <= 2000 and _SAFE_PATH_RE.fullmatch(target) is not None and target.startswith(prefix)
    return target if ok else default


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    form: dict[str, list[str]] = field(default_factory=dict)
    cookie: str = ""

    def arg(self, name: str) -> str:
        src = self.form if self.method == "POST" else self.query
        return (src.get(name) or self.query.get(name) or [""])[0].strip()

    def args(self, name: str) -> list[str]:
        return self.form.get(name, [])


@dataclass
class Response:
    status: int = 200
    body: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "text/html; charset=utf-8"


class App(Protocol):
    """What a server serves: one response per request, from any of the server's threads."""

    def handle(self, req: Request) -> Response: ...


def redirect(location: str) -> Response:
    return Response(status=303, headers=[("Location", location)])


def parse_money(text: str) -> int | None:
    text = text.replace(",", "").lstrip("$").strip()
    if not _MONEY_RE.match(text):
        return None
    whole, _, frac = text.partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def where(filters: list[tuple[bool, str, list[object]]]) -> tuple[str, list[object]]:
    """The SQL condition and parameters of a list page's filters: (applies, clause, params) per filter."""
    used = [(clause, params) for applies, clause, params in filters if applies]
    return " AND ".join(["1=1", *(c for c, _ in used)]), [x for _, ps in used for x in ps]


def _valid_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


class ShopApp:
    def __init__(self, db_path: str, password: str, *, lab: App | None = None, username: str = "admin") -> None:
        self._con = sqlite3.connect(db_path, check_same_thread=False)
        self._con.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        self._username, self._password = username, password
        self._lab = lab
        self._sessions: set[str] = set()
        self._token_base = hashlib.sha256(f"{db_path}:{password}".encode()).hexdigest()[:16]

    def close(self) -> None:
        with self._lock:
            self._con.close()

    # --- dispatch ---------------------------------------------------------------------------------
    def handle(self, req: Request) -> Response:
        with self._lock:
            try:
                return self._route(req)
            except sqlite3.ProgrammingError:  # connection closed while a late request came in
                return Response(status=503, body="shutting down", content_type="text/plain")
            except BadRequest as e:
                return Response(status=400, body=P.layout("Bad request", "", error=str(e)))
            except (ValueError, OverflowError):  # a value no validator above caught: still an answer, not a crash
                return Response(status=400, body=P.layout("Bad request", "", error="A value in the request is out of "
                                                                                  "range."))

    def _route(self, req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        if self._lab is not None and path in ("/lab", "/lab/api"):
            return self._lab.handle(req)
        if path == "/login":
            return self._login(req)
        if not self._authed(req):
            target = req.path + ("?" + urlencode({k: v[0] for k, v in req.query.items()}) if req.query else "")
            return redirect("/login?" + urlencode({"next": target}))
        if path == "/logout":
            return Response(status=303, headers=[("Location", "/login"), ("Set-Cookie", "session=; Path=/; Max-Age=0")])
        parts = path.strip("/").split("/")
        post = req.method == "POST"
        match parts:
            case [""]:
                return self._dashboard()
            case ["products"]:
                return self._products(req)
            case ["products", "new"]:
                return self._wizard(req)
            case ["products", sku]:
                return self._product_edit(req, sku)
            case ["stock"]:
                return self._stock(req)
            case ["stock", "bulk"] if post:
                return self._stock_bulk(req)
            case ["orders"]:
                return self._orders(req)
            case ["orders", number]:
                return self._order(req, number)
            case ["orders", number, "status"] if post:
                return self._order_status(req, number)
            case ["customers"]:
                return self._customers(req)
            case ["customers", cid] if _ID_RE.fullmatch(cid):
                return self._customer(req, int(cid))
            case ["reviews"]:
                return self._reviews(req)
            case ["reviews", rid, "moderate"] if post and _ID_RE.fullmatch(rid):
                return self._moderate(req, int(rid))
            case ["discounts"]:
                return self._discounts(req)
            case ["discounts", "new"]:
                return self._discount_form(req, None)
            case ["discounts", rid, "edit"] if _ID_RE.fullmatch(rid):
                return self._discount_form(req, int(rid))
            case ["reports", "bestsellers"]:
                return self._bestsellers(req)
        return self._not_found(f"There is no page at {req.path}.")

    def _not_found(self, message: str) -> Response:
        return Response(status=404, body=P.layout("Not found", "", error=message))

    # --- login ------------------------------------------------------------------------------------
    def _authed(self, req: Request) -> bool:
        for part in req.cookie.split(";"):
            k, _, v = part.strip().partition("=")
            if k == "session" and v in self._sessions:
                return True
        return False

    def _login(self, req: Request) -> Response:
        nxt = safe_path(req.arg("next"), "/")
        error = ""
        if req.method == "POST":
            if req.arg("username") == self._username and req.arg("password") == self._password:
                token = hashlib.sha256(f"{self._token_base}:{len(self._sessions)}".encode()).hexdigest()
                self._sessions.add(token)
                return Response(status=303, headers=[("Location", nxt),
                                                     ("Set-Cookie", f"session={token}; Path=/; HttpOnly")])
            error = "Invalid username or password."
        body = (f"<form method='post' action='/login' id='login-form' aria-label='Sign in'>{P.hidden('next', nxt)}"
                + P.text_input("username", "Username", req.arg("username") if error else "")
                + P.text_input("password", "Password", type_="password")
                + P.button("sign-in", "Sign in") + "</form>")
        return Response(status=200, body=P.layout("Sign in", body, nav=False, error=error))

    # --- dashboard --------------------------------------------------------------------------------
    def _dashboard(self) -> Response:
        c = self._con
        counts = [
            ("Products", c.execute("SELECT COUNT(*) FROM products").fetchone()[0]),
            ("Orders", c.execute("SELECT COUNT(*) FROM orders").fetchone()[0]),
            ("Pending orders", c.execute("SELECT COUNT(*) FROM orders WHERE status='pending'").fetchone()[0]),
            ("Customers", c.execute("SELECT COUNT(*) FROM customers").fetchone()[0]),
            ("Pending reviews", c.execute("SELECT COUNT(*) FROM reviews WHERE status='pending'").fetchone()[0]),
        ]
        return Response(body=P.layout("Dashboard", P.table(("Metric", "Value"), [(P.e(k), P.e(v)) for k, v in counts])))

    # --- products ---------------------------------------------------------------------------------
    def _filter_form(self, action: str, fields: str) -> str:
        return f"<form method='get' action='{action}' aria-label='Filters'>{fields}{P.button('apply-filters', 'Filter')}</form>"

    def _page_no(self, req: Request) -> int:
        p = req.arg("page")
        if not p:
            return 1
        page = whole_number(p, 6)
        if page is None or not 1 <= page <= MAX_PAGE:
            raise BadRequest(f"page must be a whole number from 1 to {MAX_PAGE}.")
        return page

    def _paged(self, req: Request, count_sql: str, rows_sql: str, params: list[object]) -> tuple[list[sqlite3.Row], int, int]:
        """(rows of the requested page, page number, total rows) of a list page's query."""
        total = self._con.execute(count_sql, params).fetchone()[0]
        page = self._page_no(req)
        rows = self._con.execute(f"{rows_sql} LIMIT ? OFFSET ?", [*params, P.PER_PAGE, (page - 1) * P.PER_PAGE]).fetchall()
        return rows, page, total

    def _products(self, req: Request) -> Response:
        q, cat, status = req.arg("q"), req.arg("category"), req.arg("status")
        sql, params = where([(bool(q), "(LOWER(name) LIKE ? OR LOWER(sku) LIKE ?)", [f"%{q.lower()}%"] * 2),
                             (bool(cat), "category = ?", [cat]), (bool(status), "status = ?", [status])])
        rows, page, total = self._paged(req, f"SELECT COUNT(*) FROM products WHERE {sql}",
                                        f"SELECT * FROM products WHERE {sql} ORDER BY sku", params)
        form = self._filter_form("/products", P.text_input("q", "Search name or SKU", q)
                                 + P.select("category", "Category", [("", "All categories")] + [(c, c) for c in CATEGORIES], cat)
                                 + P.select("status", "Status", [("", "Any status"), ("enabled", "enabled"), ("disabled", "disabled")], status))
        body = form + P.table(
            ("SKU", "Name", "Category", "Price", "Stock", "Status", "Actions"),
            [(P.e(r["sku"]), P.e(r["name"]), P.e(r["category"]), money(r["price_cents"]), str(r["stock"]),
              P.e(r["status"]), P.link(f"edit-{r['sku']}", "Edit", f"/products/{quote(r['sku'])}")) for r in rows],
            table_id="products") + P.pager("/products", {"q": q, "category": cat, "status": status}, page, total, "products")
        return Response(body=P.layout("Products", body, flash=req.arg("msg")))

    def _product_edit(self, req: Request, sku: str) -> Response:
        row = self._con.execute("SELECT * FROM products WHERE sku = ?", (sku,)).fetchone()
        if row is None:
            return self._not_found(f"No product with SKU {sku}.")
        error = ""
        vals = dict(row)
        if req.method == "POST":
            price, stock = parse_money(req.arg("price")), req.arg("stock")
            vals.update(name=req.arg("name"), status=req.arg("status"), description=req.arg("description"),
                        featured=1 if req.arg("featured") else 0)
            if not vals["name"]:
                error = "Name is required."
            elif price is None or price <= 0:
                error = "Price must be a positive amount such as 12.50."
            elif whole_number(stock) is None:
                error = "Stock must be a whole number of 0 or more."
            elif vals["status"] not in ("enabled", "disabled"):
                error = "Status must be enabled or disabled."
            else:
                self._con.execute(
                    "UPDATE products SET name=?, price_cents=?, stock=?, status=?, description=?, featured=? WHERE sku=?",
                    (vals["name"], price, int(stock), vals["status"], vals["description"], vals["featured"], sku))
                self._con.commit()
                return redirect(f"/products/{quote(sku)}?msg=" + quote("Product saved."))
            vals.update(price_cents=price or 0, stock=stock)
        form = (f"<form method='post' aria-label='Edit product'>"
                + f"<p>SKU: {P.e(sku)} · Category: {P.e(row['category'])}</p>"
                + P.text_input("name", "Name", vals["name"])
                + P.text_input("price", "Price", req.arg("price") if error else money(vals["price_cents"]))
                + P.text_input("stock", "Stock", vals["stock"], type_="number")
                + P.select("status", "Status", [("enabled", "enabled"), ("disabled", "disabled")], vals["status"])
                + P.textarea("description", "Description", vals["description"])
                + P.checkbox("featured", "Featured on the home page", bool(vals["featured"]))
                + P.button("save", "Save") + "</form>")
        return Response(body=P.layout(f"Edit product {row['name']}", form, flash=req.arg("msg"), error=error))

    def _wizard(self, req: Request) -> Response:
        """Three pages: basics -> pricing -> review. Earlier answers travel as hidden fields."""
        step, error = req.arg("step") if req.method == "POST" else "", ""
        sku, name, cat = req.arg("sku").upper(), req.arg("name"), req.arg("category")
        price, stock, status = req.arg("price"), req.arg("stock"), req.arg("status") or "enabled"
        desc, featured = req.arg("description"), "1" if req.arg("featured") else ""
        show = 1
        if step == "1":
            if not _SKU_RE.match(sku):
                error = "SKU must look like ABC-123 (three capital letters, a dash, 3-5 digits)."
            elif self._con.execute("SELECT 1 FROM products WHERE sku=?", (sku,)).fetchone():
                error = f"SKU {sku} already exists."
            elif not name:
                error = "Name is required."
            elif cat not in CATEGORIES:
                error = "Choose a category."
            show = 1 if error else 2
        elif step in ("2", "3"):
            cents = parse_money(price)
            if cents is None or cents <= 0:
                error = "Price must be a positive amount such as 12.50."
            elif whole_number(stock) is None:
                error = "Stock must be a whole number of 0 or more."
            elif status not in ("enabled", "disabled"):
                error = "Status must be enabled or disabled."
            show = 2 if error else 3
            if step == "3" and not error and _SKU_RE.match(sku) and cat in CATEGORIES and name:
                if self._con.execute("SELECT 1 FROM products WHERE sku=?", (sku,)).fetchone():
                    return Response(body=P.layout("New product", "", error=f"SKU {sku} already exists."))
                self._con.execute("INSERT INTO products VALUES (?,?,?,?,?,?,?,?)",
                                  (sku, name, cat, cents, int(stock), status, desc, 1 if featured else 0))
                self._con.commit()
                return redirect(f"/products/{quote(sku)}?msg=" + quote("Product created."))
        keep1 = P.hidden("sku", sku) + P.hidden("name", name) + P.hidden("category", cat)
        if show == 1:
            inner = (P.hidden("step", "1") + P.text_input("sku", "SKU", sku) + P.text_input("name", "Name", name)
                     + P.select("category", "Category", [("", "Choose…")] + [(c, c) for c in CATEGORIES], cat)
                     + P.button("next", "Next"))
            title = "New product — step 1 of 3: basics"
        elif show == 2:
            inner = (P.hidden("step", "2") + keep1 + P.text_input("price", "Price", price)
                     + P.text_input("stock", "Stock", stock, type_="number")
                     + P.select("status", "Status", [("enabled", "enabled"), ("disabled", "disabled")], status)
                     + P.textarea("description", "Description (optional)", desc)
                     + P.checkbox("featured", "Featured on the home page", bool(featured))
                     + P.button("next", "Next"))
            title = "New product — step 2 of 3: pricing and stock"
        else:
            summary = P.table(("Field", "Value"), [(k, P.e(v)) for k, v in (
                ("SKU", sku), ("Name", name), ("Category", cat), ("Price", money(parse_money(price) or 0)),
                ("Stock", stock), ("Status", status), ("Description", desc), ("Featured", "yes" if featured else "no"))])
            inner = (P.hidden("step", "3") + keep1 + P.hidden("price", price) + P.hidden("stock", stock)
                     + P.hidden("status", status) + P.hidden("description", desc) + P.hidden("featured", featured)
                     + summary + P.button("create", "Create product"))
            title = "New product — step 3 of 3: review"
        form = f"<form method='post' action='/products/new' aria-label='New product'>{inner}</form>"
        return Response(body=P.layout(title, form, error=error))

    # --- stock ------------------------------------------------------------------------------------
    def _stock(self, req: Request) -> Response:
        cat, below, status = req.arg("category"), req.arg("below"), req.arg("status")
        limit = whole_number(below)
        sql, params = where([(bool(cat), "category = ?", [cat]),
                             (limit is not None, "stock < ?", [limit]),
                             (bool(status), "status = ?", [status])])
        rows = self._con.execute(f"SELECT * FROM products WHERE {sql} ORDER BY sku", params).fetchall()
        form = self._filter_form("/stock", P.select("category", "Category", [("", "All categories")] + [(c, c) for c in CATEGORIES], cat)
                                 + P.text_input("below", "Stock below", below, type_="number")
                                 + P.select("status", "Status", [("", "Any status"), ("enabled", "enabled"), ("disabled", "disabled")], status))
        back = "/stock?" + urlencode({"category": cat, "below": below, "status": status})
        select_all = ("<p><input type='checkbox' id='select-all' aria-label='Select all listed products' "
                      "onclick=\"document.querySelectorAll('input[name=sku]').forEach(b => b.checked = this.checked)\">"
                      " <label for='select-all'>Select all listed products</label></p>")
        table = P.table(("Select", "SKU", "Name", "Category", "Stock", "Status"), [
            (f"<input type='checkbox' name='sku' value='{P.e(r['sku'])}' id='select-{P.e(r['sku'])}' aria-label='Select {P.e(r['sku'])}'>",
             P.e(r["sku"]), P.e(r["name"]), P.e(r["category"]), str(r["stock"]), P.e(r["status"])) for r in rows],
            table_id="stock")
        bulk = (f"<form method='post' action='/stock/bulk' aria-label='Bulk stock update'>{P.hidden('back', back)}"
                f"<p id='result-count'>{len(rows)} products listed</p>{select_all}{table}"
                + P.text_input("new-stock", "New stock level for selected products", type_="number")
                + P.button("apply-stock", "Apply to selected") + "</form>")
        return Response(body=P.layout("Stock", form + bulk, flash=req.arg("msg"), error=req.arg("err")))

    def _stock_bulk(self, req: Request) -> Response:
        back = safe_path(req.arg("back"), "/stock", prefix="/stock")
        skus, level = req.args("sku"), req.arg("new-stock")
        sep = "&" if "?" in back else "?"
        if not skus:
            return redirect(back + sep + "err=" + quote("Select at least one product."))
        if whole_number(level) is None:
            return redirect(back + sep + "err=" + quote("New stock level must be a whole number of 0 or more."))
        n = 0
        for sku in skus:
            n += self._con.execute("UPDATE products SET stock=? WHERE sku=?", (int(level), sku)).rowcount
        self._con.commit()
        return redirect(back + sep + "msg=" + quote(f"Updated stock of {n} products to {int(level)}."))

    # --- orders and customers ---------------------------------------------------------------------
    def _orders(self, req: Request) -> Response:
        cust, status, year = req.arg("customer"), req.arg("status"), req.arg("year")
        sql, params = where([(bool(cust), "(LOWER(c.name) LIKE ? OR LOWER(c.email) LIKE ?)", [f"%{cust.lower()}%"] * 2),
                             (bool(status), "o.status = ?", [status]), (bool(year), "substr(o.date, 1, 4) = ?", [year])])
        base = "FROM orders o JOIN customers c ON c.id = o.customer_id WHERE " + sql
        rows, page, total = self._paged(req, f"SELECT COUNT(*) {base}",
                                        f"SELECT o.*, c.name AS cname {base} ORDER BY o.date, o.id", params)
        form = self._filter_form("/orders", P.text_input("customer", "Customer name or email", cust)
                                 + P.select("status", "Status", [("", "Any status")] + [(s, s) for s in ORDER_STATUSES], status)
                                 + P.select("year", "Year", [("", "Any year")] + [(str(y), str(y)) for y in YEARS], year))
        body = form + P.table(("Order", "Date", "Customer", "Status", "Total", "Actions"), [
            (P.e(r["number"]), r["date"], P.e(r["cname"]), r["status"], money(r["total_cents"]),
             P.link(f"view-{r['number']}", "View", f"/orders/{r['number']}")) for r in rows], table_id="orders")
        body += P.pager("/orders", {"customer": cust, "status": status, "year": year}, page, total, "orders")
        return Response(body=P.layout("Orders", body))

    def _order(self, req: Request, number: str) -> Response:
        o = self._con.execute("SELECT o.*, c.name AS cname FROM orders o JOIN customers c ON c.id=o.customer_id "
                              "WHERE number=?", (number,)).fetchone()
        if o is None:
            return self._not_found(f"No order {number}.")
        items = self._con.execute("SELECT i.*, p.name FROM order_items i JOIN products p ON p.sku=i.sku "
                                  "WHERE order_id=?", (o["id"],)).fetchall()
        body = (f"<p>Customer: {P.e(o['cname'])} · Date: {o['date']} · Status: {o['status']} · "
                f"Total: {money(o['total_cents'])}</p>"
                + P.table(("SKU", "Product", "Qty", "Price", "Line total"), [
                    (P.e(i["sku"]), P.e(i["name"]), str(i["qty"]), money(i["price_cents"]),
                     money(i["qty"] * i["price_cents"])) for i in items])
                + f"<form method='post' action='/orders/{number}/status' aria-label='Change status'>"
                + P.select("new-status", "New status", [(s, s) for s in ORDER_STATUSES], o["status"])
                + P.button("update-status", "Update status") + "</form>")
        return Response(body=P.layout(f"Order {number}", body, flash=req.arg("msg")))

    def _order_status(self, req: Request, number: str) -> Response:
        status = req.arg("new-status")
        if status not in ORDER_STATUSES:
            return self._not_found(f"Unknown status {status!r}.")
        if self._con.execute("UPDATE orders SET status=? WHERE number=?", (status, number)).rowcount == 0:
            return self._not_found(f"No order {number}.")
        self._con.commit()
        return redirect(f"/orders/{number}?msg=" + quote(f"Status set to {status}."))

    def _customers(self, req: Request) -> Response:
        q, group = req.arg("q"), req.arg("group")
        sql, params = where([(bool(q), "(LOWER(name) LIKE ? OR LOWER(email) LIKE ?)", [f"%{q.lower()}%"] * 2),
                             (bool(group), '"group" = ?', [group])])
        rows, page, total = self._paged(
            req, f"SELECT COUNT(*) FROM customers WHERE {sql}",
            f"SELECT c.*, (SELECT COUNT(*) FROM orders o WHERE o.customer_id=c.id) AS n FROM customers c "
            f"WHERE {sql} ORDER BY name", params)
        form = self._filter_form("/customers", P.text_input("q", "Search name or email", q)
                                 + P.select("group", "Group", [("", "Any group")] + [(g, g) for g in CUSTOMER_GROUPS], group))
        body = form + P.table(("Name", "Email", "City", "Group", "Orders", "Actions"), [
            (P.e(r["name"]), P.e(r["email"]), P.e(r["city"]), P.e(r["group"]), str(r["n"]),
             P.link(f"customer-{r['id']}", "View", f"/customers/{r['id']}")) for r in rows], table_id="customers")
        body += P.pager("/customers", {"q": q, "group": group}, page, total, "customers")
        return Response(body=P.layout("Customers", body))

    def _customer(self, req: Request, cid: int) -> Response:
        c = self._con.execute("SELECT * FROM customers WHERE id=?", (cid,)).fetchone()
        if c is None:
            return self._not_found(f"No customer {cid}.")
        orders = self._con.execute("SELECT * FROM orders WHERE customer_id=? ORDER BY date, id", (cid,)).fetchall()
        body = (f"<p>Email: {P.e(c['email'])} · City: {P.e(c['city'])} · Group: {P.e(c['group'])}</p>"
                + P.table(("Order", "Date", "Status", "Total"), [
                    (P.link(f"view-{o['number']}", o["number"], f"/orders/{o['number']}"), o["date"], o["status"],
                     money(o["total_cents"])) for o in orders], caption=f"{len(orders)} orders"))
        return Response(body=P.layout(f"Customer {c['name']}", body))

    # --- reviews ----------------------------------------------------------------------------------
    def _reviews(self, req: Request) -> Response:
        product, status, rating = req.arg("product"), req.arg("status"), req.arg("rating")
        stars = whole_number(rating, 1)
        sql, params = where([(bool(product), "(LOWER(p.name) LIKE ? OR LOWER(p.sku) LIKE ?)", [f"%{product.lower()}%"] * 2),
                             (bool(status), "r.status = ?", [status]),
                             (stars is not None, "r.rating = ?", [stars])])
        base = "FROM reviews r JOIN products p ON p.sku = r.sku WHERE " + sql
        rows, page, total = self._paged(req, f"SELECT COUNT(*) {base}", f"SELECT r.*, p.name AS pname {base} ORDER BY r.id",
                                        params)
        here = "/reviews?" + urlencode({k: v for k, v in {"product": product, "status": status, "rating": rating,
                                                           "page": req.arg("page")}.items() if v})

        def actions(r: sqlite3.Row) -> str:
            if r["status"] != "pending":
                return ""
            return (f"<form method='post' action='/reviews/{r['id']}/moderate' aria-label='Moderate review {r['id']}'>"
                    + P.hidden("back", here) + P.button(f"approve-{r['id']}", "Approve", name="action", value="approve")
                    + " " + P.button(f"reject-{r['id']}", "Reject", name="action", value="reject") + "</form>")

        form = self._filter_form("/reviews", P.text_input("product", "Product name or SKU", product)
                                 + P.select("status", "Status", [("", "Any status"), ("pending", "pending"), ("approved", "approved"), ("rejected", "rejected")], status)
                                 + P.select("rating", "Rating", [("", "Any rating")] + [(str(i), f"{i} stars") for i in range(1, 6)], rating))
        body = form + P.table(("ID", "Product", "SKU", "Rating", "Title", "Status", "Date", "Actions"), [
            (str(r["id"]), P.e(r["pname"]), P.e(r["sku"]), str(r["rating"]), P.e(r["title"]), r["status"], r["date"],
             actions(r)) for r in rows], table_id="reviews")
        body += P.pager("/reviews", {"product": product, "status": status, "rating": rating}, page, total, "reviews")
        return Response(body=P.layout("Reviews", body, flash=req.arg("msg")))

    def _moderate(self, req: Request, rid: int) -> Response:
        action = req.arg("action")
        back = safe_path(req.arg("back"), "/reviews", prefix="/reviews")
        if action not in ("approve", "reject"):
            return self._not_found("Unknown moderation action.")
        status = "approved" if action == "approve" else "rejected"
        if self._con.execute("UPDATE reviews SET status=? WHERE id=?", (status, rid)).rowcount == 0:
            return self._not_found(f"No review {rid}.")
        self._con.commit()
        return redirect(back + ("&" if "?" in back else "?") + "msg=" + quote(f"Review {rid} {status}."))

    # --- discounts --------------------------------------------------------------------------------
    def _discounts(self, req: Request) -> Response:
        rows = self._con.execute("SELECT * FROM discount_rules ORDER BY id").fetchall()
        body = P.link("new-discount", "New discount rule", "/discounts/new") + P.table(
            ("Name", "Code", "Percent", "Min subtotal", "Category", "Active", "Starts", "Ends", "Actions"), [
                (P.e(r["name"]), P.e(r["code"]), str(r["percent"]), money(r["min_subtotal_cents"]),
                 P.e(r["category"] or "any"), "yes" if r["active"] else "no", r["starts"], r["ends"],
                 P.link(f"edit-rule-{r['code']}", "Edit", f"/discounts/{r['id']}/edit")) for r in rows],
            table_id="discounts")
        return Response(body=P.layout("Discount rules", body, flash=req.arg("msg")))

    def _discount_form(self, req: Request, rid: int | None) -> Response:
        row = None
        if rid is not None:
            row = self._con.execute("SELECT * FROM discount_rules WHERE id=?", (rid,)).fetchone()
            if row is None:
                return self._not_found(f"No discount rule {rid}.")
        v = dict(row) if row else {"name": "", "code": "", "percent": "", "min_subtotal_cents": 0, "category": "",
                                   "active": 0, "starts": "", "ends": ""}
        error, min_text = "", money(v["min_subtotal_cents"])
        if req.method == "POST":
            v.update(name=req.arg("rule-name"), code=req.arg("code").upper(), category=req.arg("rule-category"),
                     active=1 if req.arg("active") else 0, starts=req.arg("starts"), ends=req.arg("ends"))
            pct, min_text = req.arg("percent"), req.arg("min-subtotal") or "0"
            cents = parse_money(min_text)
            clash = self._con.execute("SELECT id FROM discount_rules WHERE code=?", (v["code"],)).fetchone()
            if not v["name"] or len(v["name"]) > 60:
                error = "Name is required (at most 60 characters)."
            elif not _CODE_RE.match(v["code"]):
                error = "Code must be 4-16 capital letters or digits."
            elif clash is not None and clash["id"] != rid:
                error = f"Code {v['code']} is already used by another rule."
            elif whole_number(pct, 2) is None or not 1 <= int(pct) <= 90:
                error = "Percent must be a whole number from 1 to 90."
            elif cents is None:
                error = "Minimum subtotal must be an amount such as 50.00."
            elif v["category"] not in ("",) + CATEGORIES:
                error = "Unknown category."
            elif not (_valid_date(v["starts"]) and _valid_date(v["ends"])) or v["ends"] < v["starts"]:
                error = "Dates must be YYYY-MM-DD and the end date must not be before the start date."
            else:
                vals = (v["name"], v["code"], int(pct), cents, v["category"], v["active"], v["starts"], v["ends"])
                if rid is None:
                    self._con.execute("INSERT INTO discount_rules (name, code, percent, min_subtotal_cents, category, "
                                      "active, starts, ends) VALUES (?,?,?,?,?,?,?,?)", vals)
                else:
                    self._con.execute("UPDATE discount_rules SET name=?, code=?, percent=?, min_subtotal_cents=?, "
                                      "category=?, active=?, starts=?, ends=? WHERE id=?", (*vals, rid))
                self._con.commit()
                return redirect("/discounts?msg=" + quote(f"Discount rule {v['code']} saved."))
            v["percent"] = pct
        form = ("<form method='post' aria-label='Discount rule'>"
                + P.text_input("rule-name", "Rule name", v["name"]) + P.text_input("code", "Coupon code", v["code"])
                + P.text_input("percent", "Discount percent", v["percent"], type_="number")
                + P.text_input("min-subtotal", "Minimum subtotal", min_text)
                + P.select("rule-category", "Applies to category", [("", "Any category")] + [(c, c) for c in CATEGORIES], v["category"])
                + P.checkbox("active", "Active", bool(v["active"]))
                + P.text_input("starts", "Start date", v["starts"], type_="date")
                + P.text_input("ends", "End date", v["ends"], type_="date")
                + P.button("save-rule", "Save rule") + "</form>")
        title = "New discount rule" if rid is None else f"Edit discount rule {row['code']}"  # type: ignore[index]
        return Response(body=P.layout(title, form, error=error))

    # --- reports ----------------------------------------------------------------------------------
    def _bestsellers(self, req: Request) -> Response:
        year = req.arg("year") or str(YEARS[-1])
        marks = ",".join("?" * len(SOLD_STATUSES))
        rows = self._con.execute(
            "SELECT i.sku, p.name, SUM(i.qty) AS units, SUM(i.qty * i.price_cents) AS revenue FROM order_items i "
            f"JOIN orders o ON o.id = i.order_id JOIN products p ON p.sku = i.sku WHERE o.status IN ({marks}) "
            "AND substr(o.date, 1, 4) = ? GROUP BY i.sku ORDER BY units DESC, i.sku LIMIT 10",
            [*SOLD_STATUSES, year]).fetchall()
        form = self._filter_form("/reports/bestsellers", P.select("year", "Year", [(str(y), str(y)) for y in YEARS], year))
        body = form + P.table(("Rank", "SKU", "Product", "Units sold", "Revenue"), [
            (str(i + 1), P.e(r["sku"]), P.e(r["name"]), str(r["units"]), money(r["revenue"])) for i, r in enumerate(rows)],
            caption=f"Best sellers {year} (orders that are pending, processing or complete)", table_id="bestsellers")
        return Response(body=P.layout("Best sellers report", body))
