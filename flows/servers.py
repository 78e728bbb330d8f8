"""The run's vLLM servers as one resource scope: start (or reuse), health-check, restart, stop, in one place.

    with ModelServers(config, run_dir / "logs" / "servers", repo_root, logger=logger) as servers:
        servers.run("evaluate[student]", evaluate, config, ...)    # a stage, guarded
        servers.serve_adapter("tiny", api_base, "student@r1", adapter_dir)

Entering starts every configured server (reusing one already serving the same name on its port, which the
run then leaves running) and loads the configured adapters; leaving stops the servers the run started, also
after a failure. `run(stage, fn, ...)` is how every stage of a flow runs: servers that are down are restarted
before it, and when the stage fails while one of them is down, that server is restarted once (logged, and
kept in `restarts`) and the stage runs once more; a second failure is the stage's. A restarted server
reloads every adapter the run loaded into it. Stages themselves never start or restart a server; they only
report an outage (`ServerUnavailable`) when their model calls failed against a server that stopped answering.

Server state (pid, log) lives under `state_dir` (`<run>/logs/servers/`) so a retried stage, or `coevo run
--resume`, finds and cleans up what an earlier attempt began.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from deploy import vllm_server
from deploy.vllm_server import ServerStartError, ServeSpec
from flows.config import RunConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


class ServerRecord(BaseModel):
    """What the run knows about one server: JSON-able, so it can be a stage result (no handles, no clients)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    port: int
    api_base: str
    owned: bool
    pid: int | None = None
    log_path: str | None = None


class ServerRestart(BaseModel):
    """One restart the scope made: which server, during which stage, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str
    stage: str
    reason: str


class ServerUnavailable(RuntimeError):
    """A server a stage depends on stopped answering; the scope restarts it and runs the stage again once."""


def resolve_spec(spec: ServeSpec, repo_root: Path) -> ServeSpec:
    """Relative model/template paths are relative to the repo root (where `make run` runs); a template of ours
    named (or `auto`) becomes its file (deploy/chat_templates.py)."""
    spec = spec.model_copy(update={"model": str((repo_root / spec.model).resolve())})
    template = spec.template_file()
    return spec.model_copy(update={"chat_template": str((repo_root / template).resolve()) if template else None})


def training_template(config: RunConfig, role: str, repo_root: Path) -> tuple[Path | None, dict[str, bool]]:
    """The template file (None: the tokenizer's own) and fixed template variables the server of `role` renders
    with (none when the run does not manage that server): training renders the same way (`training.fit`)."""
    spec = config.server_for(config.models[role])
    if spec is None:
        return None, {}
    resolved = resolve_spec(spec, repo_root)
    return (Path(resolved.chat_template) if resolved.chat_template else None), resolved.template_kwargs()


def unreachable(api_bases: Iterable[str], api_key: str | None = None) -> list[str]:
    """The URLs among these that do not answer a health check right now (with the key a guarded server needs)."""
    return [b for b in api_bases if not vllm_server.is_ready(b, api_key=api_key)]


def _serves(spec: ServeSpec) -> bool:
    try:
        key = spec.api_key()
        return vllm_server.is_ready(spec.api_base, api_key=key) and spec.name in vllm_server.served_models(spec.api_base, key)
    except Exception:  # noqa: BLE001 - anything but a clean answer means "not our server"
        return False


class ModelServers:
    """The configured servers of one run (a context manager); see the module docstring."""

    def __init__(self, config: RunConfig, state_dir: Path, repo_root: Path, *, ready_timeout_s: float = 400.0,
                 logger: Any = None) -> None:
        self.state_dir, self.ready_timeout_s = state_dir, ready_timeout_s
        self.specs = [resolve_spec(s, repo_root) for s in config.servers]
        # (server name, adapter name, adapter dir): loaded after every (re)start of that server
        self.adapters: list[tuple[str, str, Path]] = [(a.server, a.name, repo_root / a.path) for a in config.adapters]
        self.records: dict[str, ServerRecord] = {}
        self.restarts: list[ServerRestart] = []
        self.log = logger or log

    def __enter__(self) -> "ModelServers":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> list[ServerRecord]:
        """Start (or reuse) every configured server and load its adapters; a failed start is tried once more."""
        for spec in self.specs:
            if _serves(spec):
                self.log.warning("reusing the server already serving '%s' at %s (the run will not stop it)",
                                 spec.name, spec.api_base)
                self.records[spec.name] = ServerRecord(name=spec.name, port=spec.port, api_base=spec.api_base, owned=False)
            else:
                try:
                    self._launch(spec)
                except ServerStartError as e:
                    self.log.warning("server '%s' did not start (%s): trying once more", spec.name, e)
                    self._launch(spec)
            self._load_adapters(spec)
            self.log.info("server %s at %s (%s)", spec.name, spec.api_base,
                          "started" if self.records[spec.name].owned else "reused")
        return list(self.records.values())

    def _launch(self, spec: ServeSpec) -> None:
        vllm_server.stop_server(spec.port, state_dir=self.state_dir)  # a dead one an earlier attempt left behind
        h = vllm_server.start_server(spec, state_dir=self.state_dir, ready_timeout_s=self.ready_timeout_s)
        self.records[spec.name] = ServerRecord(name=spec.name, port=spec.port, api_base=spec.api_base, owned=True,
                                               pid=h.pid, log_path=h.log_path)

    def _load_adapters(self, spec: ServeSpec) -> None:
        for server, name, path in self.adapters:
            if server == spec.name:
                vllm_server.load_adapter(spec.api_base, name, path, api_key=spec.api_key())

    def down(self) -> list[str]:
        """Health check: names of the run's servers that do not answer (with their served name) right now."""
        return [s.name for s in self.specs if not _serves(s)]

    def restart(self, names: list[str], stage: str, reason: str) -> None:
        """Stop, start and reload the adapters of these servers (the run owns them afterwards)."""
        for spec in (s for s in self.specs if s.name in names):
            self.log.warning("server '%s' at %s %s (stage %s): restarting it", spec.name, spec.api_base, reason, stage)
            self._launch(spec)
            self._load_adapters(spec)
            self.restarts.append(ServerRestart(server=spec.name, stage=stage, reason=reason))

    def run(self, stage: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one stage against answering servers; restart a server that died during it once, then rerun it."""
        dead = self.down()
        if dead:
            self.restart(dead, stage, "was not answering before the stage")
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            dead = self.down()
            if not dead:
                raise
            self.restart(dead, stage, f"stopped answering during the stage ({type(e).__name__})")
        return fn(*args, **kwargs)

    @contextlib.contextmanager
    def released(self, name: str | None, mode: str) -> Iterator[None]:
        """The server `name` gives its memory back for the block (round.placement.student_during_train): `sleep`
        (vLLM sleep mode level 1, then woken) or `stop` (stopped, then started again); its adapters are loaded
        again afterwards, also when the block fails. `keep`, no name, or a server the run did not start: nothing."""
        spec = next((s for s in self.specs if s.name == name), None)
        rec = self.records.get(name or "")
        if mode == "keep" or spec is None or rec is None or not rec.owned:
            if spec is not None and mode != "keep":
                self.log.warning("server '%s' was reused, not started by the run: it keeps serving (%s asked)",
                                 spec.name, mode)
            yield
            return
        self.log.info("server %s: %s while the stage trains", spec.name, "asleep" if mode == "sleep" else "stopped")
        if mode == "sleep":
            vllm_server.sleep(spec.api_base)
        else:
            vllm_server.stop_server(spec.port, state_dir=self.state_dir)
        try:
            yield
        finally:
            if mode == "sleep":
                vllm_server.wake_up(spec.api_base)
            else:
                self._launch(spec)
            self._load_adapters(spec)
            self.log.info("server %s: %s", spec.name, "awake" if mode == "sleep" else "started again")

    def serve_adapter(self, server: str | None, api_base: str, name: str, path: Path) -> None:
        """Load an adapter now; when `server` is one of the run's, also after every restart of it."""
        spec = next((s for s in self.specs if s.name == server), None)
        vllm_server.load_adapter(api_base, name, path, api_key=spec.api_key() if spec else None)
        if server is not None:
            self.adapters.append((server, name, path))

    def stop(self) -> list[int]:
        """Stop the servers this run started (recorded under `state_dir`); returns their ports."""
        return [s.port for s in self.specs if vllm_server.stop_server(s.port, state_dir=self.state_dir)]
