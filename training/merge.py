"""Merge a LoRA adapter into its base weights (peft `merge_and_unload`): a plain model directory vLLM serves.

    merge_adapter(base_dir, adapter_dir, out_dir)   # out_dir: config, safetensors weights, tokenizer files

The round's promotion gate uses it: the promoted correction adapter becomes the next round's base student,
served as `student-r{t+1}`. Idempotent: a finished merge (`merge.json` beside the weights, naming the same
base and adapter) is left as it is.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

MERGE_FILE = "merge.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "chat_template.jinja", "generation_config.json", "added_tokens.json")


def merged(out_dir: str | Path, base_dir: str | Path, adapter_dir: str | Path) -> bool:
    path = Path(out_dir) / MERGE_FILE
    if not path.exists():
        return False
    info = json.loads(path.read_text())
    return info.get("base") == str(Path(base_dir).resolve()) and info.get("adapter") == str(Path(adapter_dir).resolve())


def merge_adapter(base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """Base + adapter -> one model directory (written to a temporary sibling, then renamed into place)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, adapter, out = Path(base_dir).resolve(), Path(adapter_dir).resolve(), Path(out_dir)
    if merged(out, base, adapter):
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    cfg = json.loads((base / "config.json").read_text())
    dtype = getattr(torch, str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32"), torch.float32)
    model.to(dtype).save_pretrained(tmp, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (base / name).exists():
            shutil.copy2(base / name, tmp / name)
    (tmp / MERGE_FILE).write_text(json.dumps({"base": str(base), "adapter": str(adapter)}, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out
