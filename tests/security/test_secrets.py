"""Keys and servers (#12 §5): a role names where its key lives, never the key; servers we start bind to loopback
unless told otherwise and require a key when exposed.

The whole-round test runs `coevo run` (one tiny round) with every API role (expert, reflector, MLE-agent locator,
judge) on the paid-API test double, each with its own marker key, LiteLLM's debug log on and a provider error that
echoes the request headers (the expert's first call); then it greps the run directory, Prefect's database and
files, the command's output, Ray's logs and the dashboard's API responses: the markers appear 0 times.

The flow test runs a real evaluation (`coevo run`, oracle expert, one quick family, its own Ray and Prefect
home in a subprocess) with a fake key in an environment variable, then searches every file the run wrote (run
store, Prefect's database and logs, Ray's session logs, the command's output) and the flow runs' parameters
read back through the Prefect client for the key's value.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from agents.client import ModelClient
from agents.records import ModelRole
from agents.rollout import run_episode
from deploy.vllm_server import (
    ServeSpec, auth_headers, find_server, free_port, is_loopback, served_models, start_server, stop_server,
)
from flows.config import ConfigError, load_config, parse_config, preflight
from harness import baseline
from paid_api_double import PaidApiDouble, echo_headers, gullible
from scripted_model import Step, counter_env, scripted

REPO = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-fake-" + "7f3a9c1e5b2d4086" * 2  # distinctive: any hit is this key, not a coincidence


def test_a_literal_key_in_a_config_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"models": {"expert": {"model": "openai/gpt-4o-mini", "api_key": FAKE_KEY}}}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert "models.expert: api_key:" in msg and "api_key_env: OPENAI_API_KEY" in msg and FAKE_KEY not in msg
    with pytest.raises(ValueError) as e2:  # the record itself, too, and its error never echoes the value
        ModelRole(model="openai/gpt-4o-mini", api_key=FAKE_KEY)
    assert FAKE_KEY not in str(e2.value) and "api_key_env" in str(e2.value)
    assert ModelRole.model_validate({"model": "openai/x", "api_key": None}).api_key_env is None  # old stored configs
    with pytest.raises(ValueError, match="one source"):
        ModelRole(model="openai/x", api_key_env="A", api_key_secret="b")


async def test_the_key_is_read_from_the_environment_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COEVO_TEST_KEY", raising=False)
    role, script = scripted([Step(text="5")], api_key_env="COEVO_TEST_KEY")
    assert "COEVO_TEST_KEY" in role.model_dump_json() and FAKE_KEY not in role.model_dump_json()
    env = counter_env(5)
    traj = await run_episode(role, baseline("stock_alert"), env, seed=0)  # variable unset: this call fails, not the run
    assert traj.stop_reason == "model_error" and "COEVO_TEST_KEY" in traj.error and script.seen == []
    monkeypatch.setenv("COEVO_TEST_KEY", FAKE_KEY)
    assert ModelClient(role).request_kwargs([], None, None, None, None)["api_key"] == FAKE_KEY
    traj = await run_episode(role, baseline("stock_alert"), env, seed=0)
    assert traj.stop_reason == "submitted" and FAKE_KEY not in traj.model_dump_json()
    assert ModelClient(ModelRole(model="hosted_vllm/tiny", api_base="http://127.0.0.1:1/v1")).api_key() == "EMPTY"
    env.close()


def test_preflight_names_an_unset_key_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COEVO_TEST_KEY", raising=False)
    cfg = parse_config({"runs_dir": str(tmp_path), "families": ["payroll_audit"],
                        "models": {"expert": {"model": "oracle/{family}", "api_key_env": "COEVO_TEST_KEY"}},
                        "evaluation": {"pairs": [{"model": "expert"}]}})
    with pytest.raises(ConfigError, match=r"models\.expert\.api_key_env: environment variable COEVO_TEST_KEY is not set"):
        preflight(cfg, tmp_path)
    monkeypatch.setenv("COEVO_TEST_KEY", FAKE_KEY)
    preflight(cfg, tmp_path)


def test_servers_bind_loopback_and_an_exposed_one_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ServeSpec(model="m", name="tiny")
    assert spec.host == "127.0.0.1" and spec.command()[spec.command().index("--host") + 1] == "127.0.0.1"
    monkeypatch.setenv("VLLM_API_KEY", "inherited")
    assert "VLLM_API_KEY" not in spec.environment()  # only the spec decides whether the server takes a key
    for host in ("0.0.0.0", "10.1.2.3", "::", "example.org"):
        with pytest.raises(ValueError, match="api_key_env"):
            ServeSpec(model="m", name="tiny", host=host)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    exposed = ServeSpec(model="m", name="tiny", host="0.0.0.0", api_key_env="COEVO_SERVE_KEY")
    monkeypatch.setenv("COEVO_SERVE_KEY", FAKE_KEY)
    assert exposed.environment()["VLLM_API_KEY"] == FAKE_KEY  # vLLM then guards every /v1 route, LoRA loading included
    assert FAKE_KEY not in " ".join(exposed.command()) and FAKE_KEY not in exposed.model_dump_json()
    monkeypatch.delenv("COEVO_SERVE_KEY")
    with pytest.raises(RuntimeError, match="COEVO_SERVE_KEY"):
        exposed.environment()


def test_a_role_calling_a_keyed_server_names_the_same_variable() -> None:
    data = {"servers": [{"model": "m", "name": "tiny", "port": 8123, "host": "0.0.0.0", "api_key_env": "SERVE_KEY"}],
            "models": {"student": {"model": "hosted_vllm/tiny", "api_base": "http://0.0.0.0:8123/v1"}},
            "evaluation": {"pairs": [{"model": "student"}]}}
    with pytest.raises(ConfigError, match=r"models\.student\.api_key_env: server 'tiny' requires the key in SERVE_KEY"):
        parse_config(data)
    data["models"]["student"]["api_key_env"] = "SERVE_KEY"
    assert parse_config(data).models["student"].api_key_env == "SERVE_KEY"


@pytest.mark.vllm
def test_the_suites_vllm_server_listens_on_loopback_only(vllm_server: str) -> None:
    port = int(vllm_server.rsplit(":", 1)[1].split("/")[0])
    listening = [c for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening and all(is_loopback(c.laddr.ip) for c in listening), listening


@pytest.mark.vllm
@pytest.mark.slow
def test_a_keyed_server_refuses_calls_and_adapter_loads_without_the_key(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COEVO_SERVE_KEY", FAKE_KEY)
    spec = ServeSpec(model=str(tiny_model_dir), name="tiny", port=free_port(), api_key_env="COEVO_SERVE_KEY",
                     enable_lora=True, max_lora_rank=8, max_loras=1, max_model_len=2048, cpu_kvcache_gib=1)
    start_server(spec, state_dir=tmp_path, ready_timeout_s=400)  # its readiness check already needs the key
    try:
        base = spec.api_base
        load = {"lora_name": "x@1", "lora_path": str(tmp_path)}
        assert httpx.get(f"{base}/models", timeout=30).status_code == 401
        assert httpx.post(f"{base}/load_lora_adapter", json=load, timeout=30).status_code == 401
        assert httpx.post(f"{base}/load_lora_adapter", json=load, timeout=30,
                          headers=auth_headers("wrong")).status_code == 401
        assert served_models(base, FAKE_KEY) == ["tiny"]
        assert httpx.post(f"{base}/load_lora_adapter", json=load, timeout=60,
                          headers=auth_headers(FAKE_KEY)).status_code != 401  # past the guard (no adapter there)
        listening = [c for c in psutil.net_connections("inet")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == spec.port]
        assert listening and all(is_loopback(c.laddr.ip) for c in listening)
        assert FAKE_KEY not in " ".join(psutil.Process(find_server(spec.port, tmp_path).pid).cmdline())
    finally:
        stop_server(spec.port, state_dir=tmp_path)


# --- a real flow run with a fake key ------------------------------------------------------------------

READ_PARAMETERS = """
import asyncio, json, sys
from prefect.client.orchestration import get_client
from prefect.blocks.system import Secret

async def main():
    async with get_client() as c:
        runs = await c.read_flow_runs()
        out = [{"name": r.name, "parameters": r.parameters} for r in runs]
        for r in runs:
            full = await c.read_flow_run(r.id)
            out.append({"name": full.name, "parameters": full.parameters})
    # a Secret block resolved by the client at call time
    key = sys.stdin.read().strip()  # not on the command line: argv is readable by every user
    await Secret(value=key).save("coevo-test-key", overwrite=True)
    from agents.client import ModelClient
    from agents.records import ModelRole
    client = ModelClient(ModelRole(model="openai/x", api_key_secret="coevo-test-key"))
    await client.load_key()
    print(json.dumps({"runs": out, "secret_ok": client.api_key() == key}))

asyncio.run(main())
"""


def _readable(p: Path, data: bytes) -> bytes:
    """A file's bytes as a grep should see them: Parquet tables decoded (their pages are compressed), gzip
    opened; anything else as it is."""
    if p.suffix == ".parquet":
        import polars as pl

        try:
            return data + pl.read_parquet(p).write_ndjson().encode()
        except Exception:  # noqa: BLE001 - a torn or foreign file: its raw bytes are still searched
            return data
    if data[:2] == b"\x1f\x8b":
        import gzip

        try:
            return data + gzip.decompress(data)
        except OSError:
            return data
    return data


def _files_holding(root: Path, needle: bytes) -> list[str]:
    hits, searched, size = [], 0, 0
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            searched, size = searched + 1, size + len(data)
            if needle in _readable(p, data):
                hits.append(str(p))
    print(f"searched {searched} files ({size / 1e6:.1f} MB) under {root}: {len(hits)} hold the key")
    return hits


@pytest.mark.slow
def test_a_flow_run_with_a_key_writes_it_nowhere(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RAY_"))}
        env.update(PREFECT_HOME=str(short / "prefect"), RAY_TMPDIR=str(short / "ray"), COEVO_TEST_KEY=FAKE_KEY,
                   PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True",
                   PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="240")
        cfg = {"name": "keytest", "runs_dir": str(tmp_path / "runs"), "families": ["payroll_audit"],
               "models": {"expert": {"model": "oracle/{family}", "api_key_env": "COEVO_TEST_KEY"}},
               "evaluation": {"n_instances": 1, "seeds": 1, "bootstrap_samples": 50, "pairs": [{"model": "expert"}]},
               "limits": {"max_turns": 8, "wall_s": 120}, "ray": {"num_cpus": 1, "actors": 1}}
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        run = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config", str(tmp_path / "cfg.yaml")],
                             cwd=tmp_path, env=env, capture_output=True, timeout=900)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out.decode(errors="replace")[-3000:]
        assert FAKE_KEY.encode() not in out
        (run_dir,) = (tmp_path / "runs").iterdir()
        assert "COEVO_TEST_KEY" in (run_dir / "config.yaml").read_text()  # the name is stored, the value never
        assert list(run_dir.rglob("*.parquet")), "the run wrote no trajectories"
        # every file the run wrote, Prefect's database (flow-run parameters, logs, artifacts) and Ray's logs included
        assert _files_holding(tmp_path, FAKE_KEY.encode()) == []
        assert _files_holding(short, FAKE_KEY.encode()) == []
        assert list((short / "prefect").glob("*.db")) and list((short / "ray").rglob("*.log"))  # they were searched
        read = subprocess.run([sys.executable, "-c", READ_PARAMETERS], cwd=REPO, env=env, input=FAKE_KEY.encode(),
                              capture_output=True, timeout=600)
        assert read.returncode == 0, read.stderr.decode(errors="replace")[-3000:]
        got = json.loads(read.stdout.decode().strip().splitlines()[-1])
        params = json.dumps([r["parameters"] for r in got["runs"]])
        assert len(got["runs"]) >= 4 and "COEVO_TEST_KEY" in params  # evaluation + evaluate[expert], each read twice
        assert FAKE_KEY not in params and got["secret_ok"]
        print(f"flow runs read back: {len(got['runs']) // 2}; parameters holding the key: 0")  # (the Secret block is saved only after the search)
    finally:
        shutil.rmtree(short, ignore_errors=True)


# --- a whole round with every API role on its own marker key ------------------------------------------------

ROLES = ("expert", "reflector", "locator", "judge")
DASHBOARD_API = ("flow_runs/filter", "task_runs/filter", "logs/filter", "artifacts/filter", "variables/filter",
                 "block_documents/filter", "deployments/filter")


class EchoingDouble:
    """The paid-API test double's gullible model, except the expert's first call: a provider error (HTTP 400)
    whose message repeats the request headers, its key included. Remembers every key it was sent."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.echoed = 0

    def __call__(self, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
        key = (headers.get("Authorization") or headers.get("authorization") or "").removeprefix("Bearer ").strip()
        first = key not in self.keys
        self.keys.add(key)
        if first and key.startswith("coevoMARKexpert"):
            self.echoed += 1
            return echo_headers(body, headers)
        return gullible(body, headers)


def _dashboard_responses(env: dict[str, str], log: Path) -> str:
    """Every listing the dashboard's API gives (and each flow run read alone), as one text."""
    from tests.ops_helpers import dashboard

    out = []
    with dashboard(free_port(), env, log) as url:
        for path in DASHBOARD_API:
            r = httpx.post(f"{url}/api/{path}", json={"limit": 200}, timeout=60)
            assert r.status_code == 200, (path, r.text[:300])
            out.append(r.text)
        for run in json.loads(out[0]):
            out.append(httpx.get(f"{url}/api/flow_runs/{run['id']}", timeout=60).text)
    return "\n".join(out)


@pytest.mark.vllm
@pytest.mark.slow
def test_a_whole_round_writes_no_role_key_anywhere(tmp_path: Path, vllm_server: str, tiny_model_dir: Path) -> None:
    from test_flows_round import round_config

    markers = {role: f"coevoMARK{role}" + os.urandom(12).hex() for role in ROLES}
    short = Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))
    double = EchoingDouble()
    try:
        with PaidApiDouble(double) as api:
            raw = round_config(tmp_path, vllm_server, tiny_model_dir)
            raw["round"]["index"] = 200_000 + os.getpid() % 100_000
            raw["round"].update(arms=["corr"])
            raw["evaluation"]["n_instances"] = 1
            raw["round"]["search"].update(budget_rollouts=3, minibatch_size=1, train_instances=1, val_instances=1)
            raw["round"]["data"].update(instances=1)
            raw["round"]["gate"].update(val_instances=1)
            for role in ROLES:
                raw["models"][role] = {"model": f"openai/{role}", "api_base": api.base, "max_tokens": 256,
                                       "api_key_env": f"COEVO_MARK_{role.upper()}", "input_cost_per_token": 1e-9,
                                       "output_cost_per_token": 1e-9}
            raw["round"]["search"]["reflector"] = "llm:openai/reflector"
            raw["round"]["budget_usd"] = 5.0  # paid roles need a run budget (preflight)
            raw["round"]["correction"].update(locator="mle_agent:openai/locator", selector="judge:openai/judge")
            raw["attribution"] = {"attributor": "judge"}
            (tmp_path / "round.yaml").write_text(yaml.safe_dump(raw))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RAY_"))}
            env.update(PREFECT_HOME=str(short / "prefect"), RAY_TMPDIR=str(short / "ray"), PYTHONPATH=str(REPO),
                       LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="DEBUG",
                       PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="240",
                       **{f"COEVO_MARK_{r.upper()}": m for r, m in markers.items()})
            run = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config", str(tmp_path / "round.yaml")],
                                 cwd=tmp_path, env=env, capture_output=True, timeout=1800)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out.decode(errors="replace")[-3000:]
        assert set(markers.values()) <= double.keys and double.echoed == 1  # every role called with its key
        assert b"LiteLLM:DEBUG" in out  # LiteLLM's debug log was on
        (tmp_path / "command-output.txt").write_bytes(out)
        (tmp_path / "dashboard-api.json").write_text(_dashboard_responses(env, tmp_path / "dashboard.log"))
        hits = {role: _files_holding(tmp_path, m.encode()) + _files_holding(short, m.encode())
                for role, m in markers.items()}
        assert list((short / "prefect").glob("*.db")) and list((short / "ray").rglob("*.log"))  # they were searched
        print(f"whole round, {len(markers)} API roles on marker keys: marker hits {sum(map(len, hits.values()))}")
        assert hits == {role: [] for role in ROLES}
        assert _files_holding(tmp_path, b"[redacted]")  # the echoed headers were stored, with the key taken out
    finally:
        shutil.rmtree(short, ignore_errors=True)
