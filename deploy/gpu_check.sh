#!/usr/bin/env bash
# Device check for a lent single-GPU machine with no network and no vLLM (<= 5 min): LoRA training of the micro
# student (deploy/micro) and the tiny Qwen3-MoE (built here) under `accelerate launch` on the GPU in bf16, adapter
# save/load, merge, a loss that falls, the adapted-parameter share (experts only when asked), and FSDP with the
# model's own wrap class. One table of what passed (also in OUT/gpu_check.md); exit 1 when a check failed.
#   deploy/gpu_check.sh [--out DIR]          # on the GPU (torch with CUDA, transformers, peft, accelerate)
#   deploy/gpu_check.sh --cpu [--out DIR]    # the CPU twin, fp32, no FSDP job (CI: tests/test_gpu_check.py)
# PYTHON picks the interpreter (default .venv/bin/python, else python3). GPU vLLM serving is not checked here
# (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUT=""
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) ARGS+=(--cpu); shift ;;
    --out) OUT="$2"; shift 2 ;;
    --fsdp1) ARGS+=(--fsdp1); shift ;;
    *) echo "usage: deploy/gpu_check.sh [--cpu] [--fsdp1] [--out DIR]" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# What the check imports beyond the standard library; a machine without one is told which, before anything runs.
"$PY" - <<'PYEOF'
import importlib.util, sys
need = ["torch", "transformers", "tokenizers", "safetensors", "peft", "accelerate", "pydantic", "yaml", "polars", "rich"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: {sys.executable} lacks {', '.join(missing)} (the project's training packages: "
             "requirements.lock has the versions)")
import torch, transformers, peft, accelerate
print(f"gpu_check: python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"transformers {transformers.__version__}, peft {peft.__version__}, accelerate {accelerate.__version__}")
PYEOF
exec "$PY" -m deploy.gpu_check run --out "$OUT" "${ARGS[@]}"
