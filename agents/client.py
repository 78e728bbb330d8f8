"""One async model client for every role, over `litellm.acompletion`.

Roles are `ModelRole`s: `hosted_vllm/<name>` at an `api_base` (our vLLM servers, LoRA adapters included
under their versioned names), `oracle/<family>` (the task's reference policy behind LiteLLM's custom
provider interface, registered on first use by agents/providers/registry.py), or any hosted provider string.

Keys: a role names where its key lives (`api_key_env`, or a Prefect Secret block `api_key_secret`), never the
key itself; the client reads it at call time, so configs, run stores and Prefect parameters never hold one.
A key it sends is remembered (agents/redact.py): an error message that quotes it (a provider echoing the request
headers) and every log record of the process have it replaced by [redacted].

Error policy: transient failures (connection refused, timeouts, 5xx, rate limits) are retried with
exponential backoff; what remains raises `ModelCallError` with a `kind` the rollout maps to a stop reason
(`context_overflow` for a prompt over the window, `model_error` otherwise).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import

import litellm
from pydantic import BaseModel, ConfigDict, Field

from agents.providers.registry import OWN_PROVIDERS, register_own_providers
from agents.records import InjectedFault, ModelRole, ToolChoice, parse_tool_calls
from agents.redact import redact, remember
from agents.vllm_http import BadRequestHTTPError, TransientHTTPError, Transport, logprobs_of, post_chat, transport_from_env
from tasks.records import ToolCall

log = logging.getLogger(__name__)
litellm.suppress_debug_info = True
if os.environ.get("LITELLM_LOG", "").upper() == "DEBUG":  # LiteLLM's documented switch; this version needs the call
    litellm._turn_on_debug()
litellm.drop_params = True  # hosted providers reject vLLM-only extras rather than ignore them

_TRANSIENT = (
    litellm.exceptions.APIConnectionError,
    litellm.exceptions.Timeout,
    litellm.exceptions.RateLimitError,
    litellm.exceptions.ServiceUnavailableError,
    litellm.exceptions.InternalServerError,
    TransientHTTPError,
)
_CONTEXT_MARKERS = ("maximum context length", "context length", "context_length_exceeded", "too long")


class ModelCallError(RuntimeError):
    def __init__(self, kind: Literal["context_overflow", "model_error"], message: str) -> None:
        super().__init__(redact(message))  # a provider's error may quote the request, key included
        self.kind = kind


class ModelResponse(BaseModel):
    """What one model call returned, normalised across providers."""

    model_config = ConfigDict(extra="forbid")

    message: dict[str, Any] = Field(description="OpenAI-format assistant message (role, content, tool_calls).")
    tool_calls: list[ToolCall] = Field(default_factory=list, description="Parsed; raw string args if bad JSON.")
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(default=None, description="Sampled tokens' logprobs (None: provider has none).")
    injected_faults: list[InjectedFault] = Field(
        default_factory=list, description="Simulated students only: faults this reply carries (turn set by the runtime).")

    @property
    def content(self) -> str:
        return self.message.get("content") or ""


class ModelClient:
    """Async client for one role. Cheap to create; holds no connection state of its own.

    `complete(..., context={"instance_id": ...})`: per-call facts our own providers need (the instance a
    conversation belongs to: instructions can repeat within a family). Other providers never see it.
    """

    def __init__(self, role: ModelRole, transport: Transport | None = None) -> None:
        self.role = role
        self._secret: str | None = None  # the Secret block's value once loaded (never serialised or logged)
        if role.provider in OWN_PROVIDERS:
            register_own_providers()
        # hosted_vllm goes through the lean HTTP path (agents/vllm_http.py) unless told to use LiteLLM
        self.lean = role.provider == "hosted_vllm" and (transport or transport_from_env()) == "auto"

    def api_key(self) -> str | None:
        """The key sent with each call, resolved now: the `api_key_env` variable, the loaded `api_key_secret`
        block (`await load_key()` first), else 'EMPTY' for our vLLM servers started without a key."""
        r = self.role
        if r.api_key_env:
            value = os.environ.get(r.api_key_env)
            if not value:
                raise ModelCallError("model_error", f"{r.model}: environment variable {r.api_key_env} (api_key_env) "
                                                    "is not set in this process")
            return value
        if r.api_key_secret:
            if self._secret is None:
                raise ModelCallError("model_error", f"{r.model}: Secret block '{r.api_key_secret}' not loaded yet "
                                                    "(await ModelClient.load_key() first)")
            return self._secret
        return "EMPTY" if r.provider == "hosted_vllm" else None

    async def load_key(self) -> None:
        """Load the role's Prefect Secret block (`api_key_secret`) once; a no-op for other roles."""
        name = self.role.api_key_secret
        if not name or self._secret is not None:
            return
        try:
            from prefect.blocks.system import Secret

            value = (await Secret.aload(name)).get()
        except Exception as e:  # no Prefect API, no such block, ...: this call's failure, not a crash
            raise ModelCallError("model_error", f"{self.role.model}: Secret block '{name}' (api_key_secret) could "
                                                f"not be loaded: {type(e).__name__}: {str(e)[:200]}") from None
        self._secret = str(value)

    def request_kwargs(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       tool_choice: ToolChoice | None, seed: int | None, max_tokens: int | None,
                       context: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The `litellm.acompletion` arguments of one call (also what a benchmark replays to the server)."""
        r = self.role
        kw: dict[str, Any] = {
            "model": r.model, "messages": messages, "temperature": r.temperature, "top_p": r.top_p,
            "max_tokens": max_tokens or r.max_tokens, "timeout": r.timeout_s,
        }
        if r.api_base:
            kw["api_base"] = r.api_base
        kw["api_key"] = self.api_key()
        remember(kw["api_key"])
        extra = dict(r.extra_body)
        if tools:
            tool_kw: dict[str, Any] = {"tools": _strict(tools) if r.strict_tools else tools}
            if tool_choice is not None:
                tool_kw["tool_choice"] = tool_choice
            # LiteLLM's hosted_vllm config deletes `strict` from tool schemas; the request body's extra fields
            # reach vLLM unchanged, so strict tools travel there.
            (extra if r.strict_tools and r.provider == "hosted_vllm" else kw).update(tool_kw)
        if seed is not None:
            kw["seed"] = seed
        if r.provider == "hosted_vllm" and r.return_token_ids:
            extra["return_token_ids"] = True
            extra["logprobs"] = True  # the sampled tokens' logprobs, kept per turn
        if context and r.provider in OWN_PROVIDERS:
            extra.update(context)
        if extra:
            kw["extra_body"] = extra
        return kw

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        tool_choice: ToolChoice | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> ModelResponse:
        await self.load_key()
        kwargs = self.request_kwargs(messages, tools, tool_choice, seed, max_tokens, context)
        delay = 0.5
        for attempt in range(self.role.retries + 1):
            t0 = time.perf_counter()
            try:
                return await self._send(kwargs, t0)
            except _TRANSIENT as e:
                if attempt == self.role.retries:
                    raise ModelCallError("model_error", f"{type(e).__name__} after {attempt + 1} tries: {e}") from e
                log.warning("model %s: %s (try %d), retrying in %.1fs", self.role.model, type(e).__name__, attempt + 1, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 8.0)
            except (litellm.exceptions.ContextWindowExceededError,) as e:
                raise ModelCallError("context_overflow", str(e)) from e
            except (litellm.exceptions.BadRequestError, BadRequestHTTPError) as e:
                kind = "context_overflow" if any(m in str(e).lower() for m in _CONTEXT_MARKERS) else "model_error"
                raise ModelCallError(kind, str(e)) from e
            except Exception as e:  # anything else from a provider is this call's failure, not a crash
                raise ModelCallError("model_error", f"{type(e).__name__}: {e}") from e
        raise AssertionError("unreachable")

    async def _send(self, kwargs: dict[str, Any], t0: float) -> ModelResponse:
        if self.lean:
            data = await post_chat(kwargs)
            return self._normalise_json(data, time.perf_counter() - t0)
        resp = await litellm.acompletion(**kwargs)
        return self._normalise(resp, time.perf_counter() - t0)

    def _normalise_json(self, data: dict[str, Any], latency: float) -> ModelResponse:
        """The lean path's decoded JSON -> the same record `_normalise` makes from LiteLLM's object."""
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        message = _assistant_message(msg.get("content"), msg.get("tool_calls") or [])
        usage = data.get("usage") or {}
        pt, ct = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        return ModelResponse(
            message=message, tool_calls=parse_tool_calls(message.get("tool_calls")),
            finish_reason=choice.get("finish_reason"), prompt_tokens=pt, completion_tokens=ct,
            cost_usd=pt * self.role.input_cost_per_token + ct * self.role.output_cost_per_token,
            latency_s=latency, prompt_token_ids=_get(data, "prompt_token_ids"),
            completion_token_ids=_get(choice, "token_ids"), logprobs=logprobs_of(choice),
        )

    def _normalise(self, resp: Any, latency: float) -> ModelResponse:
        choice = resp.choices[0]
        msg = choice.message
        raw_calls = [tc.model_dump() if hasattr(tc, "model_dump") else dict(tc) for tc in (msg.tool_calls or [])]
        message = _assistant_message(msg.content, raw_calls)
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        return ModelResponse(
            message=message,
            tool_calls=parse_tool_calls(message.get("tool_calls")),
            finish_reason=choice.finish_reason,
            prompt_tokens=pt,
            completion_tokens=ct,
            cost_usd=self._cost(resp, pt, ct),
            latency_s=latency,
            prompt_token_ids=_get(resp, "prompt_token_ids"),
            completion_token_ids=_get(choice, "token_ids") or _get(msg, "token_ids"),
            logprobs=logprobs_of(choice),
            injected_faults=_injected_faults(msg),  # flawed/<family>: simulation ground truth
        )

    def _cost(self, resp: Any, prompt_tokens: int, completion_tokens: int) -> float:
        r = self.role
        if r.input_cost_per_token or r.output_cost_per_token or r.provider in ("hosted_vllm", *OWN_PROVIDERS):
            return prompt_tokens * r.input_cost_per_token + completion_tokens * r.output_cost_per_token
        try:  # hosted providers: LiteLLM's local price map
            return float(litellm.completion_cost(completion_response=resp))
        except Exception:
            log.warning("no price known for %s; counting its cost as 0.0 (set input/output_cost_per_token)", r.model)
            return 0.0


def _assistant_message(content: str | None, raw_calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if raw_calls:
        message["tool_calls"] = [
            {"id": tc.get("id") or f"call_{i}", "type": "function",
             "function": {"name": (tc.get("function") or {}).get("name"), "arguments": (tc.get("function") or {}).get("arguments")}}
            for i, tc in enumerate(raw_calls)
        ]
    return message


def _strict(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**t, "function": {**t["function"], "strict": True}} if "function" in t else t for t in tools]


def _injected_faults(msg: Any) -> list[InjectedFault]:
    """Ground truth a simulated student (`flawed/<family>`) sends in provider_specific_fields."""
    fields = getattr(msg, "provider_specific_fields", None) or {}
    return [InjectedFault.model_validate(f) for f in fields.get("injected_faults") or []]


def _get(obj: Any, name: str) -> list[int] | None:
    val = getattr(obj, name, None)
    if val is None and hasattr(obj, "model_extra") and obj.model_extra:
        val = obj.model_extra.get(name)
    if val is None and isinstance(obj, dict):
        val = obj.get(name)
    return list(val) if val else None
