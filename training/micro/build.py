"""Build the micro student M0: a small Qwen3-architecture model trained from scratch on demonstrations.

    coevo model micro --out deploy/micro --seed 0

Steps, all deterministic for a spec on one machine (same spec -> byte-identical weights):
1. demonstrations on `pretrain` instances (indices >= 1000), each under a harness drawn from the mixture of
   `training.micro.mixture` (h0, hK, random typed-edit variations): a show-your-work policy where one exists
   (training/micro/policies.py: code_refactor renames, anomaly_detection, payroll_audit easy instances; each
   reads its harness: an unstated knowledge item is often missed), else `flawed/<family>@native` (SIMULATED
   policy); plus `rename_copies` copies of every rename demonstration with fresh random names
   (training/micro/augment.py), so the names can only be copied, never guessed (and `sku_copies` copies of every
   website_admin one with a fresh SKU, 0 by default);
2. a byte-level BPE tokenizer trained on the rendered demonstrations, digits split one per token (numbers
   and ids are then copied digit by digit), the Qwen-style chat template of the tiny model, `<tool_call>`
   tool format (served with vLLM's hermes parser);
3. a Qwen3-architecture model (head_dim 64: vLLM CPU) initialised from the seed and trained full-parameter
   (`training.pretrain`, with a progress bar) in two phases: the copy phase (batches of short synthetic copy
   sequences, training/micro/curriculum.py: the copying circuits form after ~1,200 such steps, which a few
   hundred demonstrations never showed), then the demonstrations' assistant tokens shuffled with packed copy
   sequences (so copying is not forgotten);
4. weights, tokenizer, the spec and a build record (demonstration and training figures) written to --out.
Served like the tiny model (`coevo serve start --model DIR`), LoRA-trainable with `coevo train`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from training.micro.mixture import write_named_harnesses
from training.micro.reading import ReadingSpec, options as reading_options
from training.micro.vocab import SPECIAL_TOKENS, TEMPLATE_PATH, TOOL_TOKENS
from training.pretrain import PretrainConfig, PretrainReport

FAMILIES = ("code_refactor", "anomaly_detection", "payroll_audit")  # the families with a show-your-work policy
DEMO_WEIGHTS = {"code_refactor": 1.0, "anomaly_detection": 1.0, "payroll_audit": 1.0, "website_admin": 0.6}
BUILD_RECORD = "micro_build.json"
HARNESS_DIR = "harness_hK"  # hK of each family (training.micro.mixture.named_harness), for --harness
COPY_FORMED_LOSS = 0.3  # copy-phase loss (last 10% of steps) under which the copying circuit formed: formed
# phases end near 0.03, unformed ones plateau near 1.1 (docs/students.md, the fifth build)


class MicroSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    families: tuple[str, ...] = FAMILIES
    demos_per_family: int = Field(default=500, ge=1, description="pretrain instances 1000.. per family (x weight)")
    demo_weights: dict[str, float] = Field(
        default_factory=lambda: dict(DEMO_WEIGHTS),
        description="family -> multiplier of demos_per_family (families with a show-your-work policy get more)")
    show_work_only: tuple[str, ...] = Field(
        default=("code_refactor", "payroll_audit", "website_admin"),
        description="families demonstrated only on instances a show-your-work policy covers (code_refactor: "
                    "renames; payroll_audit: easy instances; website_admin: price_of, set_price, disable_product)")
    anomaly_program: Literal["paste", "values", "flag"] = Field(
        default="paste", description="anomaly_detection's show-your-work program (tasks/anomaly_detection/"
                                     "show_work.py): the parameter file pasted, each range as a VALUES row, or "
                                     "the VALUES rows after a first line that is the decision (flag)")
    refactor_program: Literal["grep", "flag", "kinds"] = Field(
        default="grep", description="code_refactor's program (tasks/code_refactor/show_work.py): renames with the "
                                    "scope after the old name (grep) or a first-word flag `tests=1|0` (flag); "
                                    "kinds: flag, and every other refactoring kind with the same flag")
    show_work: bool = Field(default=True, description="instances a show-your-work policy covers use it "
                                                      "(training/micro/policies.py) instead of the flawed policy")
    profile: str = Field(default="native", description="flawed/<family>@<profile> demonstrates")
    p_h0: float = Field(default=0.25, ge=0, le=1, description="share of demonstrations under h0")
    p_hk: float = Field(default=0.25, ge=0, le=1, description="share under hK (h0 + every knowledge item)")
    only_successful: bool = Field(default=False, description="keep only demonstrations that scored 1.0")
    copy_examples: int = Field(default=800, ge=0, description="packed synthetic copy sequences shuffled in with the "
                                                            "demonstrations (training/micro/curriculum.py)")
    copy_tokens: int = Field(default=1024, gt=0, description="length of one packed copy sequence (tokens)")
    copy_phase_steps: int = Field(default=2500, ge=0, description="steps of the copy phase before the demonstrations "
                                                               "(batches of short copy sequences; 0: none)")
    copy_phase_batch: int = Field(default=16, ge=1)
    copy_phase_len: int = Field(default=192, ge=16, description="tokens per copy-phase sequence")
    copy_phase_lr: float = Field(default=3e-3, gt=0, description="constant after a 50-step warmup")
    copy_phase_stop_loss: float | None = Field(
        default=None, gt=0, description="stop the copy phase once its mean loss over 100 steps is below this "
                                        "(copy_phase_steps is then the maximum); None in every committed M0")
    rename_copies: int = Field(default=2, ge=0, description="copies of each show-your-work rename demonstration "
                                                            "with fresh random names (training/micro/augment.py)")
    sku_copies: int = Field(default=0, ge=0, description="copies of each website_admin show-your-work demonstration "
                                                        "with a fresh random SKU (training/micro/augment.py)")
    vocab_size: int = Field(default=4096, ge=600)
    hidden_size: int = 192
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 3
    num_key_value_heads: int = 3
    head_dim: int = Field(default=64, description="64: vLLM CPU attention rejects smaller heads")
    max_len: int = Field(default=6144, gt=0, description="demonstrations longer than this (tokens) are dropped")
    max_position_embeddings: int = 32768
    train: PretrainConfig = PretrainConfig(steps=3300, warmup_steps=50, checkpoint_every=100)
    reading: ReadingSpec | None = Field(
        default=None, description="the harness-reading recipe (M1, training/micro/reading.py); None: M0's mixture")

    def programs(self) -> dict[str, str]:
        """family -> its show-your-work program (the policies' `program` option)."""
        return {"anomaly_detection": self.anomaly_program, "code_refactor": self.refactor_program}


def m1_spec() -> MicroSpec:
    """M1, the student that reads its harness (docs/students.md): the harness-reading recipe
    (training/micro/reading.py) on a wider model (4 layers x 4 heads of 64, hidden 256), the decision programs
    (each family's harness-dependent choice is a named flag near its turn's start), and reading blocks."""
    return MicroSpec(
        demos_per_family=250, demo_weights={"code_refactor": 1.0, "anomaly_detection": 1.2, "payroll_audit": 0.8},
        show_work_only=("code_refactor", "payroll_audit"), anomaly_program="flag", refactor_program="flag",
        rename_copies=1, copy_examples=300, copy_phase_stop_loss=0.1, hidden_size=256, intermediate_size=512,
        num_attention_heads=4, num_key_value_heads=4,
        # after the copy phase, one epoch of 1,300 demonstrations (250 renames + 250 fresh-name copies, 300
        # anomaly_detection + 300 fresh-id copies, 200 payroll_audit), 300 copy sequences and 150 minimal pairs;
        # then the reading blocks: one family's pairs densely (75% of a block's steps), each family in turn, then
        # every family's (a block alone is forgotten under the next: docs/students.md, pilot 7)
        train=PretrainConfig(steps=1750, warmup_steps=100, checkpoint_every=100, weight_anneal_to=0.5),
        reading=ReadingSpec(pairs=150, blocks=("code_refactor:300", "anomaly_detection:400", "payroll_audit:300",
                                               "mixed:600")))


def m1_kinds_spec() -> MicroSpec:
    """M1's recipe with code_refactor demonstrated on every refactoring kind (program "kinds": add_parameter,
    extract_function and move_module beside the renames, each with a fresh-value copy), twice as many
    code_refactor instances (renames are ~27% of them) and one epoch's more steps for them. Measured once (seed 0,
    docs/students.md "build 5"): no gain on code_refactor, payroll_audit's reading weakened; not committed."""
    base = m1_spec()
    return base.model_copy(update={
        "refactor_program": "kinds",
        "demo_weights": {**base.demo_weights, "code_refactor": 2.0},
        "train": base.train.model_copy(update={"steps": base.train.steps + 500})})


# name -> the spec `coevo model micro --recipe NAME` starts from
RECIPES = {"m0": MicroSpec, "m1": m1_spec, "m1-kinds": m1_kinds_spec}


def _indices(spec: MicroSpec, family: str) -> list[int]:
    """The pretrain indices a family is demonstrated on: the first n (n = demos_per_family x weight), or, for a
    family in `show_work_only`, the first n that its show-your-work policy covers."""
    n = max(1, round(spec.demos_per_family * spec.demo_weights.get(family, 1.0)))
    easy = spec.reading is not None and family in spec.reading.easy_only
    if family not in spec.show_work_only and not easy:
        return list(range(1000, 1000 + n))
    return covered_indices(family, n, spec.programs().get(family, ""), 1000, easy)


def covered_indices(family: str, n: int, program: str, first: int, easy_only: bool) -> list[int]:
    """The first `n` pretrain indices from `first` on that the family's show-your-work policy covers under
    `program` (easy instances only with `easy_only`)."""
    import tasks
    from training.micro.policies import has_policy

    fam, out, index = tasks.get(family), [], first
    while len(out) < n:
        inst = fam.generate(index)
        if has_policy(inst, program) and (not easy_only or inst.difficulty == "easy"):
            out.append(index)
        index += 1
    return out


async def _demos_async(spec: MicroSpec, concurrency: int = 4, progress: bool = True) -> list[tuple[str, Any]]:
    import tasks
    from agents.client import ModelRole
    from agents.rollout import run_episode
    from training.micro.mixture import draw
    from training.micro.policies import ShowWorkClient, has_policy

    sem = asyncio.Semaphore(concurrency)

    async def one(family: str, index: int, label: str, harness: Any) -> tuple[str, Any]:
        fam = tasks.get(family)
        inst = fam.generate(index)
        show = spec.show_work and has_policy(inst, spec.programs().get(family, ""))
        options = reading_options(family, spec.programs())
        model = ShowWorkClient(family, options) if show else ModelRole(model=f"flawed/{family}@{spec.profile}")
        async with sem:
            env = fam.make_env(inst)
            try:
                with env:
                    traj = await run_episode(model, harness, env, seed=spec.seed * 1_000_003 + index,
                                             tag=f"micro-demo:{'showwork' if show else spec.profile}:{label}")
            finally:
                if show:
                    model.close()
        bar.update(1)
        return label, traj

    from tqdm import tqdm

    rng = random.Random(spec.seed)
    n_total = sum(len(_indices(spec, f)) for f in spec.families)
    bar = tqdm(total=n_total, desc="micro demonstrations", unit="demo", disable=not progress, dynamic_ncols=True)
    jobs = []
    for family in spec.families:
        for index in _indices(spec, family):
            label, harness = draw(family, rng, spec.p_h0, spec.p_hk)  # drawn in a fixed order: seeded
            jobs.append(one(family, index, label, harness))
    try:
        return list(await asyncio.gather(*jobs))
    finally:
        bar.close()


def demonstrations(spec: MicroSpec, progress: bool = True) -> list[tuple[str, Any]]:
    """(mixture label, Trajectory) for every demonstration, in a fixed order, then the renamed copies."""
    from agents.providers.registry import close_provider_environments

    try:
        pairs = asyncio.run(_demos_async(spec, progress=progress))
    finally:
        close_provider_environments()
    return pairs + _renamed(pairs, spec) + _reskued(pairs, spec)


def _renamed(pairs: list[tuple[str, Any]], spec: MicroSpec) -> list[tuple[str, Any]]:
    """`spec.rename_copies` random-name copies of every show-your-work rename demonstration (seeded)."""
    from training.micro.augment import renamed_copies
    from tasks.code_refactor.show_work import rename_request

    rng, out = random.Random(f"rename:{spec.seed}"), []
    for label, traj in pairs if spec.rename_copies else []:
        names = rename_request(traj.instance) if ":showwork:" in traj.tag else None
        if names is not None:
            out.extend((label, t) for t in renamed_copies(traj, *names, spec.rename_copies, rng))
    return out


def _reskued(pairs: list[tuple[str, Any]], spec: MicroSpec) -> list[tuple[str, Any]]:
    """`spec.sku_copies` fresh-SKU copies of every website_admin show-your-work demonstration (seeded)."""
    from training.micro.augment import resku_copies
    from tasks.website_admin.show_work import sku_of

    rng, out = random.Random(f"sku:{spec.seed}"), []
    for label, traj in pairs if spec.sku_copies else []:
        if traj.instance.family == "website_admin" and ":showwork:" in traj.tag:
            out.extend((label, t) for t in resku_copies(traj, sku_of(traj.instance), spec.sku_copies, rng))
    return out


def _template_renderer() -> Any:
    """A throwaway tokenizer that only renders the chat template to text (before the real one exists)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                   unk_token="<unk>")
    fast.chat_template = TEMPLATE_PATH.read_text()
    return fast


def rendered_texts(trajectories: list[Any]) -> list[str]:
    """The demonstrations as chat-template text (those `build_dataset` would drop as unconvertible are left out:
    a malformed tool call of the `native` policy has no canonical form)."""
    from training.convert import ConversionError, to_student_messages

    r = _template_renderer()
    texts = []
    for t in trajectories:
        try:
            texts.append(r.apply_chat_template(to_student_messages(t.messages), tools=t.tools or None,
                                               tokenize=False))
        except ConversionError:
            continue
    return texts


def build_tokenizer(texts: list[str], spec: MicroSpec) -> Any:
    """Byte-level BPE trained on the demonstrations; every digit is its own pre-token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEMPLATE_PATH.read_text(), *texts], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, additional_special_tokens=[])
    fast.add_tokens(TOOL_TOKENS, special_tokens=False)
    fast.chat_template = TEMPLATE_PATH.read_text()
    fast.model_max_length = spec.max_position_embeddings
    return fast


def init_model(spec: MicroSpec, tokenizer: Any) -> Any:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32", attn_implementation="sdpa",
    )
    torch.manual_seed(spec.seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[config.eos_token_id, tokenizer.pad_token_id],
                                               pad_token_id=tokenizer.pad_token_id)
    return model


class DemoFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")

    demonstrations: int
    kept: int
    by_family: dict[str, dict[str, float]] = Field(description="family -> n, kept, success share, mean tokens")
    by_harness: dict[str, int]
    dropped: dict[str, int]
    tokens: int
    trained_tokens: int
    seconds: float


def _figures(pairs: list[tuple[str, Any]], built: Any, seconds: float) -> DemoFigures:
    kept_ids = {e.trajectory_id for e in built.examples}
    by_family: dict[str, dict[str, float]] = {}
    for family in sorted({t.instance.family for _, t in pairs}):
        ts = [t for _, t in pairs if t.instance.family == family]
        ex = [e for e in built.examples if e.family == family]
        by_family[family] = {"n": len(ts), "kept": len(ex), "show_work": sum(":showwork:" in t.tag for t in ts),
                             "renamed_copies": sum(t.tag.endswith(":renamed") for t in ts),
                             "sku_copies": sum(t.tag.endswith(":resku") for t in ts),
                             "success": round(sum(t.verdict.score >= 1.0 for t in ts) / len(ts), 3),
                             "mean_tokens": round(sum(e.n_tokens for e in ex) / max(1, len(ex)), 1)}
    labels: dict[str, int] = {}
    for label, t in pairs:
        if t.id in kept_ids:
            labels[label] = labels.get(label, 0) + 1
    return DemoFigures(demonstrations=len(pairs), kept=len(built.examples), by_family=by_family,
                       by_harness=labels, dropped=built.manifest.stats.dropped, tokens=built.manifest.stats.tokens,
                       trained_tokens=built.manifest.stats.trained_tokens, seconds=round(seconds, 1))


def build_micro_model(out: Path, spec: MicroSpec = MicroSpec(), *, work_dir: Path | None = None,
                      progress: bool = True) -> Path:
    """Build the micro student into `out` (see the module docstring). `work_dir` holds the training checkpoint
    (resumable)."""
    from training.config import LengthRule
    from training.dataset import build_dataset
    from training.micro.curriculum import copy_examples
    from training.pretrain import pretrain

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    demos = _all_demonstrations(spec, progress)
    pairs = [(label, t) for label, t, _ in demos]
    if spec.only_successful:
        pairs = [(label, t) for label, t in pairs if t.verdict.score >= 1.0]
    trajs = [t for _, t in pairs]
    tokenizer = build_tokenizer(rendered_texts(trajs), spec)
    built = build_dataset(trajs, tokenizer, length=LengthRule(max_len=spec.max_len, raise_above=1.0))
    examples: list[Any] = [(e.input_ids, e.labels) for e in built.examples]
    records = spec.reading.records if spec.reading else 0.0
    examples += copy_examples(tokenizer, spec.copy_examples, spec.seed, spec.copy_tokens, records)
    pairs_batches: list[Any] = []
    pool: list[Any] = []
    if spec.reading:
        from training.micro.reading import decision_pool, pair_batches

        pool = decision_pool(demos, spec.reading, spec.programs())
        pairs_batches = pair_batches(pool, tokenizer, spec.reading, spec.seed, progress)
    figures = _figures(pairs, built, time.perf_counter() - t0)
    model = init_model(spec, tokenizer)
    cfg = spec.train.model_copy(update={"seed": spec.seed})
    spec_key = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:16]  # resume only the same spec
    work = Path(work_dir or out / ".work") / spec_key
    phase = _copy_phase(model, tokenizer, spec, work / "copy_phase", progress)
    reading = _reading_phase(model, spec, examples[:len(built.examples)], pairs_batches, work / "reading_phase",
                             progress)
    n_first = spec.reading.phase_pairs if spec.reading else 0
    report = pretrain(model, examples + pairs_batches[n_first:], cfg, work, progress=progress)
    points = _probe_points(spec, progress)
    blocks = reading_blocks(model, tokenizer, spec, pool, examples[:len(built.examples)], points, work, progress)
    probe = probe_record(model, tokenizer, points)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "micro_model_spec.json").write_text(spec.model_dump_json(indent=2))
    write_named_harnesses(out / HARNESS_DIR, spec.families)
    _write_record(out, spec, model, figures, report, time.perf_counter() - t0, phase, probe, reading, blocks)
    return out


def _all_demonstrations(spec: MicroSpec, progress: bool) -> list[tuple[str, Any, frozenset[str] | None]]:
    """(label, Trajectory, applied items or None) of every demonstration: M0's mixture, or the harness-reading
    recipe's generated harnesses when `spec.reading` is set."""
    if spec.reading is None:
        return [(label, t, None) for label, t in demonstrations(spec, progress)]
    from training.micro.reading import demonstrations as reading_demonstrations

    indices = {f: _indices(spec, f) for f in spec.families}
    return reading_demonstrations(spec.families, indices, spec.reading, spec.seed, spec.programs(),
                                  spec.rename_copies, progress)


def _probe_points(spec: MicroSpec, progress: bool) -> list[Any]:
    """The harness-dependence probe's decision points (validation instances; the harness-reading recipe only)."""
    if spec.reading is None:
        return []
    from training.micro.reading import probe_points

    return probe_points(spec.families, spec.reading, spec.programs(), progress)


def probe_record(model: Any, tokenizer: Any, points: list[Any]) -> dict[str, Any] | None:
    """The harness-dependence probe: P(applied action) under h0 and hK per family (None without points)."""
    if not points:
        return None
    from harness.baseline import baseline
    from training.micro.mixture import named_harness
    from training.micro.reading import probe

    t0 = time.perf_counter()
    result = probe(model, tokenizer, points, {"h0": baseline, "hK": named_harness})
    return {"points": len(points), "seconds": round(time.perf_counter() - t0, 1), "apply_probability": result}


def reading_blocks(model: Any, tokenizer: Any, spec: MicroSpec, pool: list[Any], demo_examples: list[Any],
                    points: list[Any], work: Path, progress: bool) -> list[dict[str, Any]]:
    """The reading blocks (`reading.blocks`), after the main phase, in order: each a share `block_pairs` of one
    family's minimal pairs drawn from `pool` (every family's for 'mixed') and the rest demonstrations (seeded),
    trained at `block_lr`; the probe (at `points`) after each. A finished block is loaded from `work/block_<i>`,
    not run again."""
    from training.micro.reading import pair_batches
    from training.pretrain import pretrain

    if spec.reading is None or not spec.reading.blocks:
        return []
    reading, out = spec.reading, []
    for i, (name, steps) in enumerate(reading.parsed_blocks()):
        n_pairs = max(1, round(steps * reading.block_pairs))
        seed = spec.seed * 1000 + i

        def run(name: str = name, steps: int = steps, n_pairs: int = n_pairs, seed: int = seed) -> PretrainReport:
            rng = random.Random(f"reading-block:{seed}")
            pairs = pair_batches(pool, tokenizer, reading, seed, progress, family=None if name == "mixed" else name,
                                 n=n_pairs)
            examples = pairs + rng.sample(demo_examples, min(steps - len(pairs), len(demo_examples)))
            cfg = PretrainConfig(steps=len(examples), lr=reading.block_lr, min_lr_ratio=0.5, warmup_steps=20,
                                 seed=seed, threads=spec.train.threads, checkpoint_every=100)
            return pretrain(model, examples, cfg, work / f"block_{i}", progress=progress)

        report = resumable_phase(model, work / f"block_{i}", "block", run)
        out.append({"block": f"{name}:{steps}", "pairs": n_pairs, "first_loss": report.first_loss,
                    "last_loss": report.last_loss, "wall_s": report.wall_s, "probe": probe_record(model, tokenizer, points)})
    return out


def resumable_phase(model: Any, work: Path, name: str, run: Callable[[], PretrainReport]) -> PretrainReport:
    """Train one phase into `model` with `run`, saving the weights as `work/model_after_<name>.pt`; a finished
    phase (its report and weights in `work`) is loaded instead, not run again."""
    import torch

    done, weights = work / "pretrain_report.json", work / f"model_after_{name}.pt"
    if done.exists() and weights.exists():
        model.load_state_dict(torch.load(weights))
        return PretrainReport.model_validate_json(done.read_text())
    report = run()
    torch.save(model.state_dict(), weights)
    return report


def _copy_phase(model: Any, tokenizer: Any, spec: MicroSpec, work: Path, progress: bool) -> PretrainReport | None:
    """Train the copy phase (if any) into `model`; a finished phase is loaded from `work`, not run again."""
    from training.micro.curriculum import copy_batches
    from training.pretrain import pretrain

    if not spec.copy_phase_steps:
        return None

    def run() -> PretrainReport:
        cfg = PretrainConfig(steps=spec.copy_phase_steps, lr=spec.copy_phase_lr, min_lr_ratio=1.0, warmup_steps=50,
                             seed=spec.seed, threads=spec.train.threads, checkpoint_every=200,
                             stop_below=spec.copy_phase_stop_loss)
        batches = copy_batches(tokenizer, spec.copy_phase_steps, spec.copy_phase_batch, spec.copy_phase_len,
                               spec.seed, spec.reading.records if spec.reading else 0.0)
        return pretrain(model, batches, cfg, work, progress=progress)

    return resumable_phase(model, work, "copy_phase", run)


def _reading_phase(model: Any, spec: MicroSpec, demos: list[Any], pairs: list[Any], work: Path,
                   progress: bool) -> PretrainReport | None:
    """The harness-reading recipe's first training phase, after the copy phase: the first
    `reading.phase_pairs` minimal pairs with `reading.phase_demos` demonstrations (seeded sample) shuffled in, so
    the pairs dominate while the circuit that reads the harness forms; a finished phase is loaded, not rerun."""
    from training.pretrain import pretrain

    if spec.reading is None or not spec.reading.phase_pairs or not pairs:
        return None
    reading = spec.reading

    def run() -> PretrainReport:
        rng = random.Random(f"reading-phase:{spec.seed}")
        chosen = rng.sample(demos, min(reading.phase_demos, len(demos)))
        examples = pairs[:reading.phase_pairs] + chosen
        cfg = spec.train.model_copy(update={"steps": len(examples), "seed": spec.seed, "weight_anneal_to": 1.0})
        return pretrain(model, examples, cfg, work, progress=progress)

    return resumable_phase(model, work, "reading_phase", run)


def _write_record(out: Path, spec: MicroSpec, model: Any, figures: DemoFigures, report: PretrainReport,
                  seconds: float, phase: PretrainReport | None, probe: dict[str, Any] | None = None,
                  reading: PretrainReport | None = None, blocks: list[dict[str, Any]] | None = None) -> None:
    record = {"spec": spec.model_dump(mode="json"), "parameters": sum(p.numel() for p in model.parameters()),
              "weights_sha256": weights_digest(out), "demonstrations": figures.model_dump(),
              "copy_phase": phase.model_dump(exclude={"losses"}) if phase else None,
              "copy_phase_loss_every_100_steps": phase.losses[::100] if phase else [],
              "copy_phase_formed": phase.last_loss < COPY_FORMED_LOSS if phase else None,
              "training": report.model_dump(exclude={"losses"}),
              "loss_every_50_steps": report.losses[::50], "build_seconds": round(seconds, 1)}
    if probe is not None:
        record["probe"] = probe
    if reading is not None:
        record["reading_phase"] = reading.model_dump(exclude={"losses"})
        record["reading_phase_loss_every_50_steps"] = reading.losses[::50]
    if blocks:
        record["reading_blocks"] = blocks
    (out / BUILD_RECORD).write_text(json.dumps(record, indent=1))


def weights_digest(model_dir: Path) -> str:
    return hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()
