"""Session fixtures shared by the whole suite: the tiny model, ONE vLLM CPU server, ONE local Ray.

The vLLM server starts once per session (~30 s) on a free port and is stopped at the end. Prefect and
LiteLLM are pointed at temp/local state so tests never touch the user's home.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="coevo-prefect-"))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # the telemetry heartbeat races startup writes on SQLite
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny model `make setup` builds (built here if missing, e.g. when pytest runs on its own)."""
    from deploy.tiny_model import build_tiny_model, is_built

    path = REPO / ".cache" / "tiny-model"
    if not is_built(path):
        build_tiny_model(path)
    return path


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real vLLM CPU server on the tiny model, served as `tiny`; yields its api_base."""
    from deploy.vllm_server import ServeSpec, free_port, start_server, stop_server

    state_dir = tmp_path_factory.mktemp("vllm-state")
    # 16384: the LLM reflector's prompt carries its answer schema whole (~6.4k tokens of the tiny tokenizer)
    spec = ServeSpec(model=str(tiny_model_dir), name="tiny", port=free_port(), max_lora_rank=16, max_loras=2,
                     max_model_len=16384, cpu_kvcache_gib=1)
    handle = start_server(spec, state_dir=state_dir, ready_timeout_s=400)
    try:
        yield handle.api_base
    finally:
        stop_server(spec.port, state_dir=state_dir)


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray for the whole session (2 CPUs, no dashboard)."""
    import ray

    from agents.pool.driver import LOCAL_RAY_SYSTEM_CONFIG

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _free_provider_environments() -> Iterator[None]:
    """After each test module: close the environments the oracle and flawed providers keep alive between
    calls (episodes cut short by a turn limit never free theirs), so no Chromium outlives its module."""
    yield
    import sys

    if "agents.providers.registry" in sys.modules:
        sys.modules["agents.providers.registry"].close_provider_environments()
