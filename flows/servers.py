"""The run's vLLM servers: start (or reuse), check and restart, stop. Plain functions; stages wrap them.

Server state (pid, log) lives under `<run>/logs/servers/` so a restarted stage, or `coevo run --resume`,
finds and cleans up what an earlier attempt began. A server already answering on a configured port with
the configured name is reused and left running at the end (the run did not start it).
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from deploy import vllm_server
from deploy.vllm_server import ServeSpec
from flows.config import RunConfig

log = logging.getLogger(__name__)


class ServerRecord(BaseModel):
    """What the run knows about one server: JSON-able, so it can be a stage result (no handles, no clients)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    port: int
    api_base: str
    owned: bool
    pid: int | None = None
    log_path: str | None = None


class ServerUnavailable(RuntimeError):
    """A server the run depends on stopped answering: transient, the stage retries after restarting it."""


def resolve_spec(spec: ServeSpec, repo_root: Path) -> ServeSpec:
    """Relative model/template paths are relative to the repo root (where `make run` runs)."""
    update = {"model": str((repo_root / spec.model).resolve())}
    if spec.chat_template:
        update["chat_template"] = str((repo_root / spec.chat_template).resolve())
    return spec.model_copy(update=update)


def _serves(spec: ServeSpec) -> bool:
    try:
        return vllm_server.is_ready(spec.api_base) and spec.name in vllm_server.served_models(spec.api_base)
    except Exception:  # noqa: BLE001 - anything but a clean answer means "not our server"
        return False


def _load_adapters(config: RunConfig, spec: ServeSpec, repo_root: Path) -> None:
    for a in config.adapters:
        if a.server == spec.name:
            vllm_server.load_adapter(spec.api_base, a.name, repo_root / a.path)


def start_all(config: RunConfig, state_dir: Path, repo_root: Path, ready_timeout_s: float = 400.0) -> list[ServerRecord]:
    """Start every configured server (reuse one already serving the same name on its port), load adapters."""
    records = []
    for raw in config.servers:
        spec = resolve_spec(raw, repo_root)
        if _serves(spec):
            log.warning("reusing the server already serving '%s' at %s (the run will not stop it)", spec.name, spec.api_base)
            records.append(ServerRecord(name=spec.name, port=spec.port, api_base=spec.api_base, owned=False))
        else:
            vllm_server.stop_server(spec.port, state_dir=state_dir)  # a dead one an earlier attempt left behind
            h = vllm_server.start_server(spec, state_dir=state_dir, ready_timeout_s=ready_timeout_s)
            records.append(ServerRecord(name=spec.name, port=spec.port, api_base=spec.api_base, owned=True,
                                        pid=h.pid, log_path=h.log_path))
        _load_adapters(config, spec, repo_root)
    return records


def ensure_up(config: RunConfig, state_dir: Path, repo_root: Path, ready_timeout_s: float = 400.0) -> list[str]:
    """Restart every configured server that stopped answering (and reload its adapters); names restarted."""
    restarted = []
    for raw in config.servers:
        spec = resolve_spec(raw, repo_root)
        if _serves(spec):
            continue
        log.warning("server '%s' at %s is not answering: restarting it", spec.name, spec.api_base)
        vllm_server.stop_server(spec.port, state_dir=state_dir)
        vllm_server.start_server(spec, state_dir=state_dir, ready_timeout_s=ready_timeout_s)
        _load_adapters(config, spec, repo_root)
        restarted.append(spec.name)
    return restarted


def stop_owned(config: RunConfig, state_dir: Path) -> list[int]:
    """Stop the servers this run started (recorded under `state_dir`); returns their ports."""
    stopped = []
    for spec in config.servers:
        if vllm_server.stop_server(spec.port, state_dir=state_dir):
            stopped.append(spec.port)
    return stopped


def down_servers(config: RunConfig) -> list[str]:
    """Names of configured servers not answering right now."""
    return [s.name for s in config.servers if not _serves(s)]
