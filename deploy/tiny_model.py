"""Build the tiny local Qwen3-architecture model: the embedded default student on machines with no GPU.

Everything is made here, deterministically for a seed: a byte-level BPE tokenizer trained on a generated
corpus, a Qwen-style chat template (training/micro/chat_template.jinja) and randomly initialised weights.
Nothing is ever downloaded. head_dim is 64 because vLLM's CPU attention rejects smaller heads.

    coevo model tiny --out .cache/tiny-model --seed 0
    coevo model tiny --moe --out .cache/tiny-moe      # the Qwen3-MoE twin (fused experts in transformers 5)
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from training.micro.vocab import SPECIAL_TOKENS, TEMPLATE_PATH, TOOL_TOKENS



class TinyModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    vocab_size: int = Field(default=2048, ge=512, description="BPE vocabulary incl. the 256 byte symbols.")
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = Field(default=64, description="64: vLLM CPU attention rejects 16.")
    max_position_embeddings: int = 131072


_WORDS = (
    "the a an of to and in for on with from by as at is are was be this that it not or all any each "
    "file files table row rows column columns total totals department employee hours rate pay overtime late "
    "budget request approve reject escalate manager catalog price quantity stock product products threshold "
    "email send sheet write read list search query select where group order sum count avg min max sensor "
    "reading readings anomaly report upload window range value time timestamp code function module rename "
    "parameter test tests refactor call site page click fill goto submit login admin order orders customer "
    "review discount rule price sku name id status cancelled shipped result error tool answer done check "
    "please find compute update create delete set get open close next previous first last number string"
).split()


def _corpus(seed: int, n_lines: int = 4000) -> list[str]:
    """A deterministic text corpus shaped like what the model will see: prose, JSON, chat markup, code."""
    rng = random.Random(seed)
    lines = [open(TEMPLATE_PATH).read()]
    for _ in range(n_lines):
        kind = rng.randrange(4)
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if kind == 0:
            lines.append(" ".join(words).capitalize() + ".")
        elif kind == 1:
            args = {rng.choice(_WORDS): rng.choice([rng.randint(0, 999), rng.choice(_WORDS)]) for _ in range(3)}
            lines.append('<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>' % (words[0], json.dumps(args)))
        elif kind == 2:
            lines.append(f"<|im_start|>user\n{' '.join(words)}<|im_end|>\n<|im_start|>assistant\n")
        else:
            lines.append(f"def {words[0]}_{words[1]}({words[2]}, {words[3]}=None):\n    return {words[2]} + {rng.randint(0, 99)}")
    return lines


def build_tokenizer(spec: TinyModelSpec):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[],
    )
    fast.add_tokens(TOOL_TOKENS, special_tokens=False)
    fast.chat_template = TEMPLATE_PATH.read_text()
    fast.model_max_length = spec.max_position_embeddings
    return fast


def build_tiny_model(out: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write tokenizer, config and weights to `out`. Same spec -> byte-identical weights."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(spec.seed)  # seeds this process's torch RNG for the init only
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[config.eos_token_id, tokenizer.pad_token_id], pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "tiny_model_spec.json").write_text(spec.model_dump_json(indent=2))
    return out


class TinyMoeSpec(TinyModelSpec):
    """The tiny model's MoE twin (Qwen3-MoE architecture, the paper's student's): every layer routes each token to
    `experts_per_token` of `num_experts` experts; transformers 5 keeps them fused (experts.gate_up_proj, down_proj)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_experts: int = Field(default=4, ge=2, description="Routed experts per layer.")
    experts_per_token: int = Field(default=2, ge=1, description="Experts each token is routed to (top-k).")
    moe_intermediate_size: int = Field(default=64, ge=8, description="Hidden width of one expert's MLP.")


def build_tiny_moe(out: Path, spec: TinyMoeSpec = TinyMoeSpec()) -> Path:
    """The tiny MoE (same tokenizer and chat template as the dense tiny model): ~0.54M parameters, 0.26M of them in
    the experts. Written with per-expert keys (transformers' save format), which vLLM loads."""
    import torch
    from transformers import GenerationConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        moe_intermediate_size=spec.moe_intermediate_size, num_experts=spec.num_experts,
        num_experts_per_tok=spec.experts_per_token, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
        num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = Qwen3MoeForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[eos, tokenizer.pad_token_id],
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "tiny_model_spec.json").write_text(spec.model_dump_json(indent=2))
    return out


def weights_digest(model_dir: Path) -> str:
    return hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()


def is_built(model_dir: Path) -> bool:
    return all((Path(model_dir) / f).exists() for f in ("config.json", "model.safetensors", "tokenizer.json"))
