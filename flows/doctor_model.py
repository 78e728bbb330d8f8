"""What `coevo doctor` reads from a model directory: its window (as vLLM derives it), its size and KV-cache cost on
the meta device (no weights read), the LoRA targets it has, and whether its chat template renders a multi-turn
tool-calling trajectory prefix-stably with the tokenizer on disk (flows/doctor.py turns these into findings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# rope types whose max_position_embeddings is already the scaled window (vLLM applies no factor to them)
PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


class ModelFacts(BaseModel):
    """A model directory's config.json, read the way vLLM reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architecture: str = Field(description="config.json architectures[0].")
    window: int = Field(description="The longest context vLLM accepts: max_position_embeddings (capped by the "
                                    "tokenizer's model_max_length) times a non-YaRN rope factor.")
    window_from: str = Field(description="Where the window comes from, for the report.")
    rope: str = Field(description="The rope scaling in config.json, or 'none'.")
    params: int = Field(description="Parameters (counted on the meta device).")
    kv_bytes_per_token: int = Field(description="K and V cache bytes per token over all layers, in bf16.")


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg


def read_window(model_dir: Path) -> tuple[int, str, str]:
    """(window, where it comes from, the rope scaling) as vLLM's _get_and_verify_max_len derives them."""
    cfg = _text_config(json.loads((model_dir / "config.json").read_text()))
    mpe = int(cfg.get("max_position_embeddings") or 2048)
    source = f"max_position_embeddings {mpe}"
    try:
        tok_max = json.loads((model_dir / "tokenizer_config.json").read_text()).get("model_max_length")
    except (OSError, ValueError):
        tok_max = None
    if isinstance(tok_max, int | float) and tok_max < mpe:
        mpe, source = int(tok_max), f"the tokenizer's model_max_length {int(tok_max)}"
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rope.get("rope_type") or rope.get("type") or "default"
    factor = float(rope.get("factor") or 1.0) if kind not in PRESCALED_ROPE and kind != "default" else 1.0
    described = "none" if kind == "default" else f"{kind} x{rope.get('factor')}"
    if factor != 1.0:
        source += f" x rope factor {factor:g}"
    return int(mpe * factor), source, described


def meta_model(model_dir: Path) -> Any:
    """The model built from its config on the meta device: module names and shapes, no memory, no weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def model_facts(model_dir: Path) -> tuple[ModelFacts, Any]:
    """(facts, the meta model) of a model directory with a config.json."""
    window, source, rope = read_window(model_dir)
    model = meta_model(model_dir)
    cfg = _text_config(json.loads((model_dir / "config.json").read_text()))
    heads = int(cfg.get("num_key_value_heads") or cfg.get("num_attention_heads") or 1)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    kv = 2 * int(cfg["num_hidden_layers"]) * heads * head_dim * 2
    return ModelFacts(architecture=type(model).__name__, window=window, window_from=source, rope=rope,
                      params=sum(p.numel() for p in model.parameters()), kv_bytes_per_token=kv), model


def lora_cover(model: Any, lora: Any) -> tuple[list[str], float, list[str]]:
    """(adapted weight kinds, the share of the model's parameters they cover, target_modules found nowhere);
    ValueError when nothing matches (training.targets.lora_targets)."""
    from training.targets import EXPERTS, lora_targets

    modules, params = lora_targets(model, lora)
    named = dict(model.named_modules())
    wanted = set(modules)
    covered, kinds = 0, set()
    for name, m in named.items():
        leaf = name.rsplit(".", 1)[-1]
        if (name in wanted or leaf in wanted) and hasattr(m, "weight") and f".{EXPERTS}." not in f".{name}.":
            covered, kinds = covered + m.weight.numel(), kinds | {leaf}
    for name, p in model.named_parameters():
        if p.ndim == 3 and f"{EXPERTS}.{name.rsplit('.', 1)[-1]}" in params:
            covered, kinds = covered + p.numel(), kinds | {f"{EXPERTS}.{name.rsplit('.', 1)[-1]}"}
    total = sum(p.numel() for p in model.parameters())
    def reached(t: str, k: str) -> bool:  # experts.gate_up_proj reaches gate_proj and up_proj
        return t == k or (k.startswith(f"{EXPERTS}.") and t.removesuffix("_proj") in k.split(".")[-1].split("_"))

    missing = [t for t in lora.target_modules if not any(reached(t, k) for k in kinds)]
    return sorted(kinds), covered / total if total else 0.0, missing


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


SAMPLE_TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
SAMPLE = [  # a multi-turn tool-calling trajectory, as a rollout stores it
    {"role": "system", "content": "You audit payroll files."},
    {"role": "user", "content": "Total the hours in a.csv and b.csv."},
    {"role": "assistant", "content": None, "tool_calls": [_call(0, "read_file", {"path": "a.csv"})]},
    {"role": "tool", "tool_call_id": "call_0", "content": "Ada,3"},
    {"role": "assistant", "content": "Now b.csv.", "tool_calls": [_call(1, "read_file", {"path": "b.csv"})]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Bo,4"},
    {"role": "assistant", "content": "The total is 7."},
]


def template_problem(model_dir: Path, template: str | None, kwargs: dict[str, bool],
                     tokens: tuple[str, ...] = ()) -> str:
    """Why training cannot render what this server renders ('' when it can): a missing tokenizer or template,
    a marker of our template the tokenizer lacks, or a template that is not prefix-stable on SAMPLE."""
    from training.convert import to_student_messages
    from training.dataset import load_tokenizer
    from training.render import PrefixStabilityError, render

    try:
        tok = load_tokenizer(model_dir, template, kwargs)
    except (OSError, ValueError) as e:
        return f"cannot load the tokenizer and chat template: {str(e).splitlines()[0]}"
    vocab = tok.get_vocab()
    lacking = [t for t in tokens if t not in vocab]
    if lacking:
        return f"the tokenizer has no single token for {', '.join(lacking)}"
    try:
        render(tok, to_student_messages(SAMPLE), SAMPLE_TOOLS, "assistant")
    except PrefixStabilityError as e:
        return str(e).split("; use a template")[0]
    except Exception as e:  # noqa: BLE001 - a template that raises on a tool conversation is the finding
        return f"the template fails on a tool-calling conversation: {type(e).__name__}: {str(e)[:200]}"
    return ""
