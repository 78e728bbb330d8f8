"""HTML building blocks for the shop-admin app: plain semantic HTML (labels, tables, nav, role=alert/status)
so both a browser's accessibility tree and our compact snapshot read well. Every control has a stable id:
that id is the `ref` the browser tools and the oracle use."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from urllib.parse import urlencode

PER_PAGE = 20
NAV = (("Dashboard", "/"), ("Products", "/products"), ("Stock", "/stock"), ("Orders", "/orders"),
       ("Customers", "/customers"), ("Reviews", "/reviews"), ("Discounts", "/discounts"),
       ("Reports", "/reports/bestsellers"), ("New product", "/products/new"), ("Sign out", "/logout"))


def e(value: object) -> str:
    return escape(str(value), quote=True)


def layout(title: str, body: str, *, nav: bool = True, flash: str = "", error: str = "") -> str:
    links = "".join(f'<li><a id="nav-{e(t.lower().replace(" ", "-"))}" href="{h}">{e(t)}</a></li>' for t, h in NAV)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{e(title)} · Shop admin</title>"
        "<style>body{font-family:sans-serif;margin:1em}nav ul{list-style:none;padding:0;display:flex;gap:1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
        + (f"<nav aria-label='Main'><ul>{links}</ul></nav>" if nav else "")
        + f"<main><h1>{e(title)}</h1>"
        + (f"<p role='status' id='flash'>{e(flash)}</p>" if flash else "")
        + (f"<p role='alert' id='error'>{e(error)}</p>" if error else "")
        + body + "</main></body></html>"
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, caption: str = "", table_id: str = "") -> str:
    """`rows` hold ready HTML (escape cell text with `e`)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    tid = f" id='{e(table_id)}'" if table_id else ""
    return f"<table{tid}>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pager(path: str, params: dict[str, str], page: int, total: int, noun: str) -> str:
    pages = max(1, -(-total // PER_PAGE))
    first = (page - 1) * PER_PAGE + 1 if total else 0
    last = min(total, page * PER_PAGE)
    parts = [f"<p id='result-count'>Showing {first}–{last} of {total} {e(noun)} (page {page} of {pages})</p>"]
    links = []

    def href(p: int) -> str:
        return e(f"{path}?{urlencode({**{k: v for k, v in params.items() if v}, 'page': p})}")

    if page > 1:
        links.append(f"<a id='prev-page' href='{href(page - 1)}'>Previous page</a>")
    if page < pages:
        links.append(f"<a id='next-page' href='{href(page + 1)}'>Next page</a>")
    if links:
        parts.append("<nav aria-label='Pagination'>" + " ".join(links) + "</nav>")
    return "".join(parts)


def text_input(id_: str, label: str, value: object = "", *, type_: str = "text", name: str | None = None) -> str:
    return (f"<p><label for='{e(id_)}'>{e(label)}</label> "
            f"<input id='{e(id_)}' name='{e(name or id_)}' type='{type_}' value='{e(value)}'></p>")


def textarea(id_: str, label: str, value: str = "") -> str:
    return f"<p><label for='{e(id_)}'>{e(label)}</label> <textarea id='{e(id_)}' name='{e(id_)}'>{e(value)}</textarea></p>"


def select(id_: str, label: str, options: Sequence[tuple[str, str]], selected: str = "", *, name: str | None = None) -> str:
    opts = "".join(
        f"<option value='{e(v)}'{' selected' if v == selected else ''}>{e(t)}</option>" for v, t in options
    )
    return f"<p><label for='{e(id_)}'>{e(label)}</label> <select id='{e(id_)}' name='{e(name or id_)}'>{opts}</select></p>"


def checkbox(id_: str, label: str, checked: bool, *, name: str | None = None, value: str = "1") -> str:
    return (f"<p><input type='checkbox' id='{e(id_)}' name='{e(name or id_)}' value='{e(value)}'"
            f"{' checked' if checked else ''}> <label for='{e(id_)}'>{e(label)}</label></p>")


def button(id_: str, text: str, *, name: str = "", value: str = "") -> str:
    nv = f" name='{e(name)}' value='{e(value)}'" if name else ""
    return f"<button type='submit' id='{e(id_)}'{nv}>{e(text)}</button>"


def hidden(name: str, value: object) -> str:
    return f"<input type='hidden' name='{e(name)}' value='{e(value)}'>"


def link(id_: str, text: str, href: str) -> str:
    return f"<a id='{e(id_)}' href='{e(href)}'>{e(text)}</a>"
