"""Hand-built agent trajectories for the training tests: realistic shape (system, user, assistant tool calls,
tool results, final answer), seeded, with known text in every role so masks can be checked by decoding."""

from __future__ import annotations

import json
import random
from typing import Any

from agents.records import Trajectory
from tasks.records import TaskInstance, ToolSpec, Verdict

TOOLS = [
    ToolSpec(name="list_products", description="List one page of the shop inventory.",
             parameters={"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]}).openai(),
    ToolSpec(name="send_email", description="Send an email to a supplier.",
             parameters={"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
                         "required": ["to", "subject"]}).openai(),
]
SYSTEM = "You are a purchasing agent. Use the tools, then answer."


def make_trajectory(index: int, n_tool_turns: int = 2, *, seed: int = 0, tag: str = "rollout",
                    with_tools: bool = True) -> Trajectory:
    """A conversation with `n_tool_turns` tool-calling assistant turns and one final answer turn.

    `with_tools=False` leaves the tool schemas out of the system turn: ~3x shorter sequences for training tests.
    """
    rng = random.Random(f"{seed}:{index}")
    skus = [f"SKU-{rng.randint(100, 999)}" for _ in range(n_tool_turns)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Check stock for store {index} and email the supplier about low items."},
    ]
    for k in range(n_tool_turns):
        call_id = f"call_{index}_{k}"
        if k % 2 == 0:
            call = {"name": "list_products", "arguments": json.dumps({"page": k + 1})}
            result = json.dumps({"page": k + 1, "products": [{"sku": skus[k], "stock": rng.randint(0, 20)}]})
        else:
            call = {"name": "send_email", "arguments": json.dumps({"to": "orders@acme.example", "subject": f"Low {skus[k]}"})}
            result = f"email {k} sent"
        messages.append({"role": "assistant", "content": f"Step {k}: I will call {call['name']}.",
                         "tool_calls": [{"id": call_id, "type": "function", "function": call}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    messages.append({"role": "assistant", "content": f"Done. Low items: {', '.join(skus)}."})
    inst = TaskInstance(id=f"stock_alert/{index}", family="stock_alert", index=index % 100, split="train",
                        instruction=messages[1]["content"], difficulty="easy", seed=index)
    t = Trajectory(instance=inst, harness_id="h0", model_id="oracle/stock_alert", seed=seed, messages=messages,
                   tools=TOOLS if with_tools else [], stop_reason="submitted", verdict=Verdict(score=1.0), tag=tag)
    return t.with_id()
