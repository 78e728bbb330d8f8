"""`coevo train` end to end: trajectories -> dataset -> adapter -> hot-loaded into the vLLM CPU server, where it
changes the greedy answer of the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import torch
import typer
from training_helpers import make_trajectory
from typer.testing import CliRunner

from agents.tables.trajectories import write_trajectories
from deploy.vllm_server import served_models, unload_adapter


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # two shared cores: intra-op threads only spin
    yield
    torch.set_num_threads(before)


def greedy(api_base: str, model: str, content: str) -> str:
    r = httpx.post(f"{api_base}/chat/completions", timeout=120, json={
        "model": model, "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": 24, "seed": 0})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"] or ""


@pytest.mark.vllm
def test_cli_trains_and_serves_an_adapter_that_changes_greedy_output(vllm_server: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    from flows.cli import train as cli_train

    app = typer.Typer()
    cli_train.register(app)
    write_trajectories(tmp_path / "traj" / "r.parquet", [make_trajectory(i, 1, with_tools=False) for i in range(8)])
    port = urlparse(vllm_server).port
    # A high lr for a few real steps: enough to move a random tiny model's greedy choice (fixture max rank 16).
    res = CliRunner().invoke(app, [
        "train", "--data", str(tmp_path / "traj"), "--base", str(tiny_model_dir), "--out", str(tmp_path / "a"),
        "--rank", "16", "--epochs", "10", "--lr", "1e-2", "--seeds", "1", "--micro-batch", "8",
        "--no-gradient-checkpointing", "--no-progress", "--serve-port", str(port), "--name", "student@r1",
    ])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "a" / "dataset" / "manifest.json").exists()
    assert (tmp_path / "a" / "seed-0" / "adapter_model.safetensors").exists()
    try:
        assert "student@r1" in served_models(vllm_server)
        prompt = "Check stock for store 3 and email the supplier about low items."
        base, tuned = greedy(vllm_server, "tiny", prompt), greedy(vllm_server, "student@r1", prompt)
        assert tuned != base, (base, tuned)
    finally:
        unload_adapter(vllm_server, "student@r1")
