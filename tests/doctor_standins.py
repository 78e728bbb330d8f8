"""Stand-in model directories for `coevo doctor`: the config.json fields of the real students (as published with
their weights) and a small tokenizer built here that carries Qwen's special tokens; no weights. The doctor reads
only these files, so it checks the GPU configs against the real architectures on a machine without them."""

from __future__ import annotations

import json
from pathlib import Path

from template_model import build_tokenizer

_QWEN3 = {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
          "head_dim": 128, "hidden_act": "silu", "initializer_range": 0.02, "rms_norm_eps": 1e-06,
          "rope_scaling": None, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
          "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
CONFIGS = {
    "Qwen3-Coder-30B-A3B-Instruct": {
        **_QWEN3, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "decoder_sparse_step": 1,
        "hidden_size": 2048, "intermediate_size": 5472, "max_position_embeddings": 262144, "max_window_layers": 28,
        "mlp_only_layers": [], "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
        "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
        "output_router_logits": False, "rope_theta": 10000000, "router_aux_loss_coef": 0.0},
    "Qwen3-8B": {
        **_QWEN3, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36,
        "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rope_theta": 1000000},
}


MAX_LENGTH = {"Qwen3-Coder-30B-A3B-Instruct": 262144, "Qwen3-8B": 131072}  # their tokenizer_config.json


def build_standin(out: Path, name: str) -> Path:
    """`out` with `name`'s config.json and a tokenizer (its tokenizer_config's model_max_length)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIGS[name], indent=2))
    tok = build_tokenizer()
    tok.model_max_length = MAX_LENGTH[name]
    tok.save_pretrained(out)
    return out
