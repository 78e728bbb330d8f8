#!/usr/bin/env bash
# Measure M0 (deploy/micro) on the test split: h0 and hK (its training mixture's named harness), 3 seeds,
# temperature 0.7, first N test instances per family. Writes runs/micro-eval/<h0|hK>/<family>/ and prints the
# success table of each; deploy/micro/summarize.py computes the per-family rates and paired bootstraps.
#   usage: deploy/micro/evaluate.sh N [families...]      (from the repo root)
set -euo pipefail
N=${1:-5}; shift || true
FAMILIES=${*:-"code_refactor anomaly_detection payroll_audit"}
PORT=${MICRO_PORT:-8131}
PY="${PYTHON:-.venv/bin/python}"
export LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONPATH=$PWD
$PY -m flows.cli serve start --model "${MICRO_MODEL:-deploy/micro}" --name micro --port "$PORT" --max-model-len 16384 \
    --max-lora-rank 16 --max-loras 1
trap '$PY -m flows.cli serve stop --port "$PORT"' EXIT
for F in $FAMILIES; do
  for H in h0 hK; do
    HARNESS=baseline; [ "$H" = hK ] && HARNESS=${MICRO_MODEL:-deploy/micro}/harness_hK/$F.yaml
    $PY -m flows.cli rollout --model hosted_vllm/micro --api-base "http://127.0.0.1:$PORT/v1" --harness "$HARNESS" \
        --family "$F" --split test --n "$N" --seeds 3 --temperature 0.7 --max-tokens-per-turn 1024 \
        --actors 1 --concurrency 6 --tag "micro-$H" --out "${EVAL_OUT:-runs/micro-eval}/$H/$F"
  done
done
