"""LoRA-SFT on the tiny model (CPU): loss falls, 3 seeds -> 3 adapters, adapters load in transformers,
a run killed after a checkpoint resumes to the identical adapter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from training_helpers import make_trajectory

from training.config import TrainConfig
from training.dataset import build_dataset, load_dataset, load_tokenizer, manifest_sha256, write_dataset
from training.lora import SUMMARY_FILE, TrainSummary, train_adapter, train_seeds

REPO = Path(__file__).resolve().parent.parent
FAST = dict(gradient_checkpointing=False, warmup_ratio=0.1)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    # Two cores shared with other test workers: torch's intra-op threads spin-wait and run 10-30x slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def dataset(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tok = load_tokenizer(tiny_model_dir)
    # No tool schemas in the system turn: ~200-token examples keep CPU training to seconds.
    trajs = [make_trajectory(i, n_tool_turns=1 + i % 2, with_tools=False) for i in range(8)]
    built = build_dataset(trajs, tok, mask="assistant")
    return write_dataset(built, tmp_path_factory.mktemp("train") / "ds")


def adapter_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "adapter_model.safetensors"))


def test_loss_falls_three_seeds_and_adapter_loads_in_transformers(dataset: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    config = TrainConfig(lr=3e-3, epochs=16, micro_batch=8, **FAST)  # 8 examples = 1 step per epoch: 16 steps
    summaries = train_seeds(dataset, tiny_model_dir, tmp_path, config, seeds=(0, 1, 2), show_progress=False)
    assert [s.seed for s in summaries] == [0, 1, 2]
    for s in summaries:
        curve = [c.loss for c in s.loss_curve]
        assert len(curve) == 16 and s.steps == 16
        assert sum(curve[-4:]) / 4 < sum(curve[:4]) / 4 - 0.5, curve  # falls by more than half a nat
        assert s.trained_tokens_per_s > 0 and s.data_manifest_sha256 == manifest_sha256(dataset)
        saved = TrainSummary.model_validate_json((tmp_path / f"seed-{s.seed}" / SUMMARY_FILE).read_text())
        assert saved.loss_curve == s.loss_curve
    tensors = [adapter_tensors(tmp_path / f"seed-{s}") for s in (0, 1, 2)]
    assert set(tensors[0]) == set(tensors[1])
    assert all(any(k.endswith(m + ".lora_A.weight") for k in tensors[0]) for m in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    assert not any("embed" in k or "lm_head" in k for k in tensors[0])  # nothing vLLM's LoRA loader rejects
    assert not torch.equal(tensors[0][next(iter(tensors[0]))], tensors[1][next(iter(tensors[0]))])
    assert not (tmp_path / "seed-0" / "checkpoints").exists()

    # Finished seeds are not retrained (a retried flow stage finds them).
    again = train_seeds(dataset, tiny_model_dir, tmp_path, config, seeds=(0,), show_progress=False)
    assert again[0].wall_s == summaries[0].wall_s

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    examples, _ = load_dataset(dataset)
    ids = torch.tensor([examples[0].input_ids])
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits
        tuned = PeftModel.from_pretrained(base, str(tmp_path / "seed-0")).eval()
        tuned_logits = tuned(input_ids=ids).logits
    labels = torch.tensor(examples[0].labels)[1:]
    keep = labels != -100

    def nll(logits: torch.Tensor) -> float:
        return torch.nn.functional.cross_entropy(logits[0, :-1][keep], labels[keep]).item()

    assert nll(tuned_logits) < nll(base_logits) - 0.5


DRIVER = """
import sys, time, torch
torch.set_num_threads(1)
from training.config import TrainConfig
from training.dataset import load_dataset, manifest_sha256
from training.lora import train_adapter
data, out, base = sys.argv[1:4]
examples, _ = load_dataset(data)
config = TrainConfig.model_validate_json(sys.argv[4])
# Slow each step down so the test can kill the run mid-way; the training itself is unchanged.
train_adapter(examples, out, base=base, config=config, seed=7, data_hash=manifest_sha256(data),
              on_step=lambda s: time.sleep(0.5))
"""


def test_resume_after_kill_gives_the_identical_adapter(dataset: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    config = TrainConfig(lr=1e-3, epochs=4, checkpoint_every=2, effective_batch=4, micro_batch=2, dropout=0.1, **FAST)
    examples, _ = load_dataset(dataset)
    data_hash = manifest_sha256(dataset)
    whole = train_adapter(examples, tmp_path / "whole", base=tiny_model_dir, config=config, seed=7, data_hash=data_hash)
    assert whole.steps == 8

    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(dataset), str(killed), str(tiny_model_dir),
                             config.model_dump_json()], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = killed / "checkpoints" / "step-0000004" / "trainer_state.json"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, f"trainer exited early: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / SUMMARY_FILE).exists()  # it really died before the end

    # A checkpoint only resumes its own run: another lr is refused, and the checkpoint stays usable.
    with pytest.raises(ValueError, match="another config"):
        train_adapter(examples, killed, base=tiny_model_dir, config=config.model_copy(update={"lr": 5e-3}), seed=7,
                      data_hash=data_hash)
    resumed = train_adapter(examples, killed, base=tiny_model_dir, config=config, seed=7, data_hash=data_hash)
    assert resumed.resumed_from_step >= 4
    assert [c.loss for c in resumed.loss_curve] == [c.loss for c in whole.loss_curve]
    a, b = adapter_tensors(tmp_path / "whole"), adapter_tensors(killed)
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
