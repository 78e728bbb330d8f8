"""budget_approval environment: a company service (directory, documents, message threads, direct messages
with deterministic keyword-driven replies) and a small file store, all in memory."""

from __future__ import annotations

import re
from typing import Any

from tasks.base import Environment
from tasks.budget_approval.data import BudgetPayload, Message, money
from tasks.budget_approval.verify import AGENT, BudgetApprovalSnapshot, verify
from tasks.records import Verdict
from tasks.runtime.textstore import TextStore
from tasks.tooling import ToolError, tool

MAX_MESSAGE_CHARS = 5_000
MAX_MESSAGES = 300
_CUST_RE = re.compile(r"\bCUST-\d+\b", re.IGNORECASE)
_REQ_RE = re.compile(r"\bREQ-\d+\b", re.IGNORECASE)


class BudgetApprovalEnv(Environment):
    payload: BudgetPayload

    def _setup(self) -> None:
        self.payload = BudgetPayload.model_validate(self.instance.payload)
        p = self.payload
        self.threads: dict[str, dict[str, Any]] = {}
        for r in p.requests:
            self.threads[r.thread_id] = {"subject": f"Purchase request {r.id} ({r.department})",
                                         "messages": [m.model_dump() for m in r.messages]}
        for o in p.other_threads:
            self.threads[o.thread_id] = {"subject": o.subject, "messages": [m.model_dump() for m in o.messages]}
        self.threads = dict(sorted(self.threads.items()))
        self.dms: dict[str, list[dict[str, str]]] = {}  # contact id -> [{"sender", "text"}]
        self.docs_read: set[str] = set()
        self.threads_read: set[str] = set()
        self.searches: list[str] = []
        self.listed_documents = False
        self.listed_threads = False
        self.files = TextStore(kind="file", max_chars=50_000, max_items=50)
        self.n_sent = 0

    def snapshot(self) -> BudgetApprovalSnapshot:
        return BudgetApprovalSnapshot(
            docs_read=sorted(self.docs_read),
            threads={t: [Message(**m) for m in v["messages"]] for t, v in self.threads.items()},
            dms={c: [Message(**m) for m in msgs] for c, msgs in self.dms.items()},
            files=self.files.snapshot(),
        )

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())

    def state(self) -> dict[str, Any]:
        """The mutable state as plain data (tests compare it; replay must reproduce it)."""
        return {
            "threads": {k: list(v["messages"]) for k, v in self.threads.items()},
            "dms": {k: list(v) for k, v in self.dms.items()}, "docs_read": sorted(self.docs_read),
            "threads_read": sorted(self.threads_read), "searches": list(self.searches),
            "listed": [self.listed_documents, self.listed_threads], "files": self.files.snapshot(),
        }

    def _contact_name(self, cid: str) -> str:
        return AGENT if cid == AGENT else next(c.name for c in self.payload.contacts if c.id == cid)

    def _check_text(self, text: str) -> str:
        if not text.strip():
            raise ToolError("the message text is empty")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ToolError(f"messages are limited to {MAX_MESSAGE_CHARS} characters")
        if self.n_sent >= MAX_MESSAGES:
            raise ToolError(f"message limit reached ({MAX_MESSAGES})")
        return text

    # --- directory ----------------------------------------------------------------------------
    @tool
    def search_contacts(self, query: str) -> list[dict[str, str]]:
        """Search the company directory by name, role, department or email (case-insensitive substring;
        an empty query lists everyone).

        Args:
            query: text to look for, e.g. 'procurement' or 'Finance Director'.
        """
        if len(query) > 200:
            raise ToolError("query is limited to 200 characters")
        q = query.strip().casefold()
        self.searches.append(q)
        return [c.model_dump() for c in self.payload.contacts
                if q in f"{c.name} {c.role} {c.department} {c.email}".casefold()]

    # --- documents ----------------------------------------------------------------------------
    @tool
    def list_documents(self) -> list[dict[str, str]]:
        """List the documents in the company document store (id and title)."""
        self.listed_documents = True
        return [{"id": d.id, "title": d.title} for d in self.payload.documents]

    @tool
    def read_document(self, doc_id: str) -> dict[str, str]:
        """Read one document.

        Args:
            doc_id: document id from list_documents, e.g. 'DOC-3'.
        """
        doc = next((d for d in self.payload.documents if d.id.casefold() == doc_id.strip().casefold()), None)
        if doc is None:
            raise ToolError(f"no document '{doc_id[:50]}'; ids: {', '.join(d.id for d in self.payload.documents)}")
        self.docs_read.add(doc.id)
        return {"id": doc.id, "title": doc.title, "body": doc.body}

    # --- message threads ----------------------------------------------------------------------
    def _thread(self, thread_id: str) -> str:
        tid = thread_id.strip().upper()
        if tid not in self.threads:
            raise ToolError(f"no thread '{thread_id[:50]}'; ids: {', '.join(self.threads)}")
        return tid

    @tool
    def list_threads(self) -> list[dict[str, Any]]:
        """List the inbox's message threads (id, subject, first sender, number of messages)."""
        self.listed_threads = True
        return [{"thread_id": t, "subject": v["subject"], "from": self._contact_name(v["messages"][0]["sender"]),
                 "messages": len(v["messages"])} for t, v in self.threads.items()]

    @tool
    def read_thread(self, thread_id: str) -> dict[str, Any]:
        """Read every message of a thread, oldest first.

        Args:
            thread_id: thread id from list_threads, e.g. 'TH-42'.
        """
        tid = self._thread(thread_id)
        self.threads_read.add(tid)
        t = self.threads[tid]
        return {"thread_id": tid, "subject": t["subject"],
                "messages": [{"from": self._contact_name(m["sender"]), "text": m["text"]} for m in t["messages"]]}

    @tool
    def reply_to_thread(self, thread_id: str, text: str) -> str:
        """Post a reply in a thread (visible to its participants).

        Args:
            thread_id: thread id.
            text: the reply.
        """
        tid = self._thread(thread_id)
        self._check_text(text)
        self.threads[tid]["messages"].append({"sender": AGENT, "text": text})
        self.n_sent += 1
        return f"reply posted in {tid}"

    # --- direct messages ----------------------------------------------------------------------
    @tool
    def send_message(self, to: str, text: str) -> dict[str, str]:
        """Send a direct message to a colleague; their answer comes back in the result.

        Args:
            to: the colleague's contact id (e.g. 'U07') or email address.
            text: the message.
        """
        key = to.strip().casefold()
        who = next((c for c in self.payload.contacts if key in (c.id.casefold(), c.email.casefold())), None)
        if who is None:
            raise ToolError(f"no contact '{to[:80]}'; use search_contacts to find the id or email")
        self._check_text(text)
        answer = self._auto_reply(who.id, text)
        self.dms.setdefault(who.id, []).extend([{"sender": AGENT, "text": text}, {"sender": who.id, "text": answer}])
        self.n_sent += 1
        return {"to": who.name, "reply": answer}

    def _auto_reply(self, cid: str, text: str) -> str:
        """Deterministic keyword-driven replies: the colleague's answer depends only on who and what."""
        p = self.payload
        if cid == p.procurement_id:
            codes = sorted({c.upper() for c in _CUST_RE.findall(text)})
            if not codes:
                return ("Procurement here. Tell me which custom item codes (CUST-...) you need quotes for; catalog "
                        "items are priced in the current Product catalog.")
            quotes = [f"{c}: {money(p.custom_quotes[c])} per unit" if c in p.custom_quotes
                      else f"{c}: I have no quote on file for that code" for c in codes]
            return "Our quotes: " + "; ".join(quotes) + "."
        if cid == p.director_id:
            ids = sorted({r.upper() for r in _REQ_RE.findall(text)})
            if not ids:
                return "Which request is this about? Please name the request id (REQ-....)."
            return f"Thanks, I will review {', '.join(ids)} myself."
        if any(r.manager_id == cid for r in p.requests):
            return "Thanks! I'll wait for your decision in the request thread."
        return "I'm not involved in purchase approvals; the approval policy document explains who is."

    # --- files --------------------------------------------------------------------------------
    @tool
    def list_files(self) -> list[dict[str, object]]:
        """List the files in the shared file store."""
        return self.files.list()

    @tool
    def read_file(self, path: str) -> str:
        """Read a file from the shared file store.

        Args:
            path: file path, e.g. 'approvals/summary.csv'.
        """
        return self.files.get(path)

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file in the shared file store.

        Args:
            path: file path, e.g. 'approvals/summary.csv'.
            content: the whole file content.
        """
        key = self.files.put(path, content)
        return f"wrote {len(content)} characters to {key}"
