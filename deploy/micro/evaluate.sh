#!/usr/bin/env bash
# Measure a micro student on the test split: h0 and its named harnesses, 3 seeds, temperature 0.7, first N test
# instances per family. Writes $EVAL_OUT/<harness>/<family>/; deploy/micro/summarize.py computes the per-family
# rates and the paired bootstraps against h0.
#   usage: deploy/micro/evaluate.sh N [families...]      (from the repo root)
#   MICRO_MODEL   the student's directory (default deploy/micro; M1: deploy/micro1)
#   HARNESSES     which harnesses (default "h0 hK"): h0 = the baseline; hK = $MICRO_MODEL/harness_hK/<family>.yaml
#                 (every knowledge item in the card's words); hKp = $MICRO_MODEL/harness_hKp/<family>.yaml (the
#                 same items in held-out wordings, M1)
#   EVAL_OUT      output root (default runs/micro-eval); MICRO_PORT (default 8131)
#   CONCURRENCY   rollouts in flight (default 6; vLLM CPU decodes more tokens per second with more in flight)
# A harness x family whose trajectories.parquet is already under EVAL_OUT is skipped (rerun after an interruption).
set -euo pipefail
N=${1:-5}; shift || true
FAMILIES=${*:-"code_refactor anomaly_detection payroll_audit"}
MODEL=${MICRO_MODEL:-deploy/micro}
PORT=${MICRO_PORT:-8131}
PY="${PYTHON:-.venv/bin/python}"
export LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONPATH=$PWD
$PY -m flows.cli serve start --model "$MODEL" --name micro --port "$PORT" --max-model-len 16384 \
    --max-lora-rank 16 --max-loras 1
trap '$PY -m flows.cli serve stop --port "$PORT"' EXIT
for F in $FAMILIES; do
  for H in ${HARNESSES:-h0 hK}; do
    OUT="${EVAL_OUT:-runs/micro-eval}/$H/$F"
    [ -f "$OUT/trajectories.parquet" ] && { echo "skip $H $F: $OUT has its trajectories"; continue; }
    HARNESS=baseline; [ "$H" != h0 ] && HARNESS=$MODEL/harness_$H/$F.yaml
    $PY -m flows.cli rollout --model hosted_vllm/micro --api-base "http://127.0.0.1:$PORT/v1" --harness "$HARNESS" \
        --family "$F" --split test --n "$N" --seeds 3 --temperature 0.7 --max-tokens-per-turn 1024 \
        --actors 1 --concurrency "${CONCURRENCY:-6}" --tag "micro-$H" --out "$OUT"
  done
done
