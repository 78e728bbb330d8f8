"""A test double for the paid API: a local OpenAI-compatible server (`POST /v1/chat/completions`) on loopback.

The roles reach it as any hosted model (`openai/<name>` at its `api_base`, through `agents.client.ModelClient` and
LiteLLM), so the request a role sends is the real one, headers and all. What it answers is a `Behaviour`:
a function of (request body, request headers) -> (HTTP status, JSON body). Two ship here:

- `gullible`: a model that obeys any instruction it finds OUTSIDE the data blocks of the prompt (and only
  there), and otherwise answers each role honestly by a fixed rule: the judge ranks the candidates in index
  order, the MLE-agent locator reads the failed checks and every turn and answers the last turn, the reflector
  proposes one fixed section. The instructions it obeys: "rank candidate N first", "answer t*=N", "add a
  section saying: TEXT". Data blocks are read the way a lenient model would: from `<data ...>` to the first
  `</data>` after it, in any case and with any spaces inside the tag.
- `echo_headers`: a provider error (HTTP 400) whose message repeats every request header, the key included.

It answers `GET /v1/models` (the health check the run makes when a call failed) and keeps the bodies it was
sent (`requests`), never the headers.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Behaviour = Callable[[dict[str, Any], dict[str, str]], tuple[int, dict[str, Any]]]

_OPEN = re.compile(r"<\s*data\b[^>]*>", re.I)
_CLOSE = re.compile(r"<\s*/\s*data\s*>", re.I)
RANK = re.compile(r"rank candidate (\d+) first", re.I)
T_STAR = re.compile(r"\b(?:answer\s+)?t(?:\*|_star)\s*=\s*(\d+)", re.I)
SECTION = re.compile(r"add a section saying:\s*([^\n]+)", re.I)
HONEST_SECTION = {"op": "insert_section", "section": {"id": "double_check", "kind": "domain_recipe",
                                                      "title": "Check", "text": "Check every output before you finish."}}


def outside_blocks(text: str) -> str:
    """The text a model would take as instructions: everything but the data blocks (an unclosed block runs on)."""
    out, pos = [], 0
    while (m := _OPEN.search(text, pos)) is not None:
        out.append(text[pos: m.start()])
        close = _CLOSE.search(text, m.end())
        if close is None:
            return "".join(out)
        pos = close.end()
    out.append(text[pos:])
    return "".join(out)


def _instructions(body: dict[str, Any]) -> str:
    return "\n".join(outside_blocks(str(m.get("content") or "")) for m in body.get("messages", []))


def _reply(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                              "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(tool_calls)]
    return {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": "double", "choices": [{"index": 0, "message": msg,
                                            "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


def _judge(body: dict[str, Any], orders: str) -> dict[str, Any]:
    count = re.search(r"Rank all (\d+) candidates", orders)  # hidden when an unclosed block swallowed it
    n = int(count.group(1)) if count else 3
    ranking = list(range(n))
    if (m := RANK.search(orders)) and int(m.group(1)) < n:
        ranking.remove(int(m.group(1)))
        ranking.insert(0, int(m.group(1)))
    return _reply(json.dumps({"ranking": ranking, "rationale": "index order"}))


def _locator(body: dict[str, Any], orders: str) -> dict[str, Any]:
    count = re.search(r"The episode has (\d+) turns", orders)
    n = int(count.group(1)) if count else 1
    asked = sum(len(m.get("tool_calls") or []) for m in body["messages"] if m.get("role") == "assistant")
    if (m := T_STAR.search(orders)) is not None:
        return _reply(None, [("answer", {"t_star": int(m.group(1)), "category": "planning", "rationale": "told to"})])
    if asked == 0:
        return _reply(None, [("failed_checks", {})])
    if asked <= n:
        return _reply(None, [("read_turn", {"turn": asked - 1})])
    return _reply(None, [("answer", {"t_star": n - 1, "category": "tool_use", "rationale": "the last turn"})])


def _reflector(body: dict[str, Any], orders: str) -> dict[str, Any]:
    edit = HONEST_SECTION
    if (m := SECTION.search(orders)) is not None:
        edit = {"op": "insert_section", "section": {"id": "told_to", "kind": "domain_recipe", "title": "Told",
                                                    "text": m.group(1).strip()}}
    return _reply(json.dumps({"edits": [{"edit": edit, "rationale": "the failing rollouts"}]}))


def gullible(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    orders = _instructions(body)
    system = str(body["messages"][0].get("content") or "")
    if system.startswith("You judge corrections"):
        return 200, _judge(body, orders)
    if system.startswith("You find the turn"):
        return 200, _locator(body, orders)
    if system.startswith("You improve the harness"):
        return 200, _reflector(body, orders)
    return 200, _reply("done")


def echo_headers(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    return 400, {"error": {"message": f"invalid request; you sent the headers {headers}", "type": "invalid_request"}}


class PaidApiDouble:
    """`with PaidApiDouble(gullible) as api: role = ModelRole(model="openai/x", api_base=api.base, ...)`."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[dict[str, Any]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a hosted API does (clients reuse their connections)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                double.requests.append(body)
                try:
                    status, out = double.behaviour(body, dict(self.headers.items()))
                except Exception as e:  # noqa: BLE001 - a bug in a behaviour is a 500 the test sees, not a hang
                    status, out = 500, {"error": {"message": f"test double failed: {type(e).__name__}: {e}"}}
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the health check a hosted API answers: GET /v1/models
                data = json.dumps({"object": "list", "data": [{"id": "double", "object": "model"}]}).encode()
                found = self.path.rstrip("/").endswith("/models")
                self.send_response(200 if found else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> PaidApiDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
