"""Adapter arrival: after a hot-load, one fixed probe request compares the adapter's logprobs with its base
model's, so an adapter that changes nothing (a stale load, LoRA B still zero, target modules the server did not
apply) is refused before anything is evaluated on it.

    diff = probe_diff(api_base, "student@r1-corr-s0")   # max |logprob(adapter) - logprob(base)| over the probe
    check_arrival(api_base, "student@r1-corr-s0")       # AdapterRefused when diff <= MIN_DIFF

The probe scores a fixed text's own tokens (vLLM `prompt_logprobs`, greedy, one generated token), so both
models are compared on the same positions whatever they would generate. A weak but real adapter (local.yaml's
LoRA moves the student by ~0.008 nats of KL) differs from its base by orders of magnitude more than MIN_DIFF.
"""

from __future__ import annotations

import httpx

PROBE = ("Read the attendance file, total the hours per employee, flag anyone over forty hours, and write the "
         "report with one row per department. Then call submit with the path of the report.")
MIN_DIFF = 1e-6  # the largest |difference| of an adapter that changes nothing is float noise, far below this


class AdapterRefused(RuntimeError):
    """The adapter's logprobs on the probe equal its base model's: it was refused before evaluation."""


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def base_of(api_base: str, name: str, api_key: str | None = None, timeout: float = 30.0) -> str:
    """The served base model an adapter was loaded onto (vLLM's /v1/models `parent`)."""
    r = httpx.get(f"{api_base.rstrip('/')}/models", timeout=timeout, headers=_headers(api_key))
    r.raise_for_status()
    cards = r.json()["data"]
    card = next((c for c in cards if c["id"] == name), None)
    if card is None:
        raise AdapterRefused(f"adapter {name} is not served at {api_base} after its load")
    return card.get("parent") or cards[0]["id"]


def probe_logprobs(api_base: str, model: str, api_key: str | None = None, timeout: float = 120.0) -> list[float]:
    """The logprob of each probe token after the first, under `model`."""
    r = httpx.post(f"{api_base.rstrip('/')}/completions", timeout=timeout, headers=_headers(api_key), json={
        "model": model, "prompt": PROBE, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0, "seed": 0,
        "return_token_ids": True})
    r.raise_for_status()
    choice = r.json()["choices"][0]
    ids = choice["prompt_token_ids"]
    return [float(pos[str(tid)]["logprob"]) for tid, pos in zip(ids[1:], choice["prompt_logprobs"][1:], strict=True)]


def probe_diff(api_base: str, name: str, api_key: str | None = None) -> float:
    """max |logprob under the adapter - logprob under its base| over the probe's tokens."""
    base = probe_logprobs(api_base, base_of(api_base, name, api_key), api_key)
    tuned = probe_logprobs(api_base, name, api_key)
    return max(abs(a - b) for a, b in zip(base, tuned, strict=True))


def check_arrival(api_base: str, name: str, api_key: str | None = None) -> float:
    """The probe's max |difference|; AdapterRefused when it is <= MIN_DIFF."""
    diff = probe_diff(api_base, name, api_key)
    if diff <= MIN_DIFF:
        raise AdapterRefused(f"adapter {name}: its logprobs on the probe equal the base model's (max |difference| "
                             f"{diff:.1e} <= {MIN_DIFF:.0e}): it changes nothing (a stale load, LoRA B still zero, "
                             "target modules the server did not apply); refused before evaluation")
    return diff
