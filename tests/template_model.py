"""A tiny model for the chat-template tests, built here (nothing downloaded): a byte-level BPE tokenizer with
Qwen2's pre-tokenizer regex that carries the special tokens of Qwen3, Qwen3-Coder and Gemma 4, and a
one-layer Qwen3-architecture model whose weights are set by hand so that greedy decoding follows a fixed
program: after a newline it writes `<think>hmm</think>` then `\\n\\ndone` and ends its turn. It answers like a
thinking model on the real vLLM server, so the reasoning parser has real think text to split off.
"""

from __future__ import annotations

from pathlib import Path

# Qwen2/Qwen3's pre-tokenizer split (public in their tokenizer.json): runs of newlines are one piece, so a
# rendering that ends in "\n\n" tokenizes the same as one that goes on after it.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<bos>", "<|turn>", "<turn|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
         "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>', "<|tool>", "<tool|>",
         "<|channel>", "<channel|>"]
# The program: token -> the token greedy decoding writes after it (every other token -> <|im_end|>).
PROGRAM = [("\n", "<think>"), ("<think>", "hmm"), ("hmm", "</think>"), ("</think>", "\n\n"), ("\n\n", "done"),
           ("done", "<|im_end|>")]
WORDS = ("hmm done read file path total rows payroll stock check the a of to and for with name arguments value "
         "function parameter tools user assistant system model response call").split()


def _corpus() -> list[str]:
    lines = []
    for i in range(400):
        w = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6)]
        lines += [" ".join(w), "\n\n".join(w[:3]), '{"name": "%s", "arguments": {"path": "%s.csv"}}' % (w[0], w[1]),
                  "<parameter=%s>\n%s\n</parameter>" % (w[2], w[3]), "hmm\n\ndone\n"]
    return lines


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<bos>", unk_token=None)
    fast.add_tokens(ADDED, special_tokens=False)  # as in Qwen's tokenizer: parsers must see them in the text
    return fast


def build_template_model(out: Path) -> Path:
    """Tokenizer + the program model under `out` (see the module docstring)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    assert all(len(tok.tokenize(t)) == 1 for t, _ in PROGRAM), [tok.tokenize(t) for t, _ in PROGRAM]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=8192,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=end,
                      pad_token_id=tok.pad_token_id, torch_dtype="float32")
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb[:, 0] = 1.0  # state 0 (any token off the program) -> <|im_end|>
        head[end, 0] = 10.0
        for state, (token, nxt) in enumerate(PROGRAM, start=1):
            tid = tok.convert_tokens_to_ids(tok.tokenize(token))[0]
            emb[tid].zero_()
            emb[tid, state] = 1.0
            head[tok.convert_tokens_to_ids(tok.tokenize(nxt))[0], state] = 10.0
    model.generation_config = GenerationConfig(eos_token_id=[end], pad_token_id=tok.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
