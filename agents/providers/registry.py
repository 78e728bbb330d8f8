"""The project's own models, registered with LiteLLM's custom-provider interface once per process.

`oracle/<family>` (the task's reference policy, agents/providers/oracle.py), `flawed/<family>@<profile>` (the
oracle with injected, labelled faults, agents/flawed/) and `showwork/<family>` (the oracle that states its
reasoning, agents/providers/showwork.py). `agents.client.ModelClient` registers them when a role names one;
LiteLLM's provider map is process-global, so registering twice is a no-op.
"""

from __future__ import annotations

import litellm

OWN_PROVIDERS = ("oracle", "flawed", "showwork")  # providers of this project: they receive the per-call `context`


def register_own_providers() -> None:
    """Register the `oracle`, `flawed` and `showwork` providers with LiteLLM once (its registry is process-global)."""
    if any(p.get("provider") == "oracle" for p in (litellm.custom_provider_map or [])):
        return
    # imported here: the providers pull in every task family, which a client of a hosted model never needs
    from agents.flawed.provider import FlawedLLM
    from agents.providers.oracle import OracleLLM
    from agents.providers.showwork import ShowWorkLLM

    litellm.custom_provider_map = [*(litellm.custom_provider_map or []), {"provider": "oracle", "custom_handler": OracleLLM()},
                                   {"provider": "flawed", "custom_handler": FlawedLLM()},
                                   {"provider": "showwork", "custom_handler": ShowWorkLLM()}]
    litellm.utils.custom_llm_setup()


def close_provider_environments() -> None:
    """Close the environments our own providers keep alive between calls (the oracle's live cache, the flawed
    student's conversation store). Episodes cut short by a turn limit never send the final answer that frees
    theirs; call this when a batch of episodes is over (a browser family holds a Chromium per environment)."""
    for entry in litellm.custom_provider_map or []:
        handler = entry.get("custom_handler")
        for holder in (getattr(handler, "cache", None), getattr(handler, "store", None)):
            if holder is not None and hasattr(holder, "close"):
                holder.close()
