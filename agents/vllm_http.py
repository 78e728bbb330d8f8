"""A lean OpenAI-compatible transport for `hosted_vllm/<name>` calls (our own vLLM servers).

`ModelClient` builds one request (`request_kwargs`, the same for both transports); for `hosted_vllm` it
sends it here by default instead of through `litellm.acompletion`, whose per-call work (request
transformation, response object construction, logging hooks) cost ~3-4x the CPU of the bare HTTP call on
this machine (`benchmarks/rollout_throughput.py --transport both`). The body is what LiteLLM's hosted_vllm
route sends: the model name without its provider prefix, the OpenAI fields, and `extra_body` merged at the
top level. Retries, error kinds, cost and records stay in `ModelClient`, identical for both transports.

`COEVO_MODEL_TRANSPORT=litellm` (or `ModelClient(role, transport="litellm")`) routes every call through
LiteLLM again.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Literal

import httpx

Transport = Literal["auto", "litellm"]
TRANSPORT_ENV = "COEVO_MODEL_TRANSPORT"
_BODY_FIELDS = ("messages", "temperature", "top_p", "max_tokens", "tools", "tool_choice", "seed")
# One connection pool per (event loop, server): an httpx.AsyncClient must not cross event loops.
_CLIENTS: dict[tuple[int, str], httpx.AsyncClient] = {}


class TransientHTTPError(RuntimeError):
    """Connection refused or reset, a timeout, a 5xx or a 429: worth retrying."""


class BadRequestHTTPError(RuntimeError):
    """A 4xx other than 429: the request itself is wrong (e.g. a prompt over the context window)."""


def transport_from_env(default: Transport = "auto") -> Transport:
    value = os.environ.get(TRANSPORT_ENV, default)
    if value not in ("auto", "litellm"):
        raise ValueError(f"{TRANSPORT_ENV}={value!r}: expected 'auto' or 'litellm'")
    return value  # type: ignore[return-value]


def request_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`ModelClient.request_kwargs` -> the JSON body vLLM receives."""
    body: dict[str, Any] = {"model": str(kwargs["model"]).split("/", 1)[1]}
    body.update({k: kwargs[k] for k in _BODY_FIELDS if kwargs.get(k) is not None})
    body.update(kwargs.get("extra_body") or {})
    return body


def _client(api_base: str) -> httpx.AsyncClient:
    key = (id(asyncio.get_running_loop()), api_base)
    client = _CLIENTS.get(key)
    if client is None or client.is_closed:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        client = _CLIENTS[key] = httpx.AsyncClient(base_url=api_base.rstrip("/"), limits=limits)
    return client


async def post_chat(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Send one chat completion; the decoded JSON response, or a Transient/BadRequest error."""
    api_base = kwargs.get("api_base")
    if not api_base:
        raise BadRequestHTTPError(f"model {kwargs['model']}: hosted_vllm needs an api_base")
    headers = {"Authorization": f"Bearer {kwargs.get('api_key') or 'EMPTY'}"}
    try:
        r = await _client(api_base).post("/chat/completions", content=json.dumps(request_body(kwargs)),
                                         headers={**headers, "Content-Type": "application/json"},
                                         timeout=kwargs.get("timeout"))
    except (httpx.TransportError, httpx.TimeoutException) as e:
        raise TransientHTTPError(f"{type(e).__name__}: {e}") from e
    if r.status_code == 429 or r.status_code >= 500:
        raise TransientHTTPError(f"HTTP {r.status_code}: {r.text[:500]}")
    if r.status_code >= 400:
        raise BadRequestHTTPError(f"HTTP {r.status_code}: {r.text[:2000]}")
    return r.json()


def logprobs_of(choice: Any) -> list[float] | None:
    """The sampled tokens' logprobs from an OpenAI-format choice (a dict or LiteLLM's object), or None."""
    lp = choice.get("logprobs") if isinstance(choice, dict) else getattr(choice, "logprobs", None)
    if lp is None:
        return None
    content = lp.get("content") if isinstance(lp, dict) else getattr(lp, "content", None)
    if not content:
        return None
    return [float(t["logprob"] if isinstance(t, dict) else t.logprob) for t in content]
