"""The checks of `coevo doctor` (flows/doctor.py), one function per area, each returning findings, and the
records they are made of."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.records import ModelRole
from flows.doctor_model import ModelFacts, lora_cover, template_problem

if TYPE_CHECKING:
    from flows.config import RunConfig

GIB = 1024 ** 3
Level = Literal["ok", "finding", "refused"]
OWN = ("oracle", "flawed", "showwork")  # providers of this project: no key, no price
PAPER_PASS_RATE = 0.78  # the student's h* pass rate the paper reports (78.0%)
PAPER_RATE_NOTE = " (the paper's student on h*; `coevo doctor --pass-rate` states yours)"
THINKING_ROOM = 2048  # max_tokens below this cuts a thinking judge's or locator's answer


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    level: Level = Field(description="ok, finding (worth knowing, not a failure) or refused.")
    key: str = Field(description="The config key it is about, e.g. servers.0.max_model_len.")
    text: str = Field(description="What was found, with the figures.")
    fix: str = Field(default="", description="How to fix a refusal.")

    def line(self) -> str:
        tag = {"ok": "ok      ", "finding": "finding ", "refused": "REFUSED "}[self.level]
        return f"{tag}{self.key}: {self.text}" + (f"; fix: {self.fix}" if self.fix else "")


class GpuSpec(BaseModel):
    """The GPUs a run gets: found here or assumed (`--assume-gpus 8x141GB`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=1, description="GPUs on the node.")
    memory_gib: float = Field(gt=0, description="Memory per GPU.")
    source: Literal["found", "assumed"] = Field(description="nvidia-smi found them, or --assume-gpus.")


def used_roles(config: RunConfig) -> dict[str, ModelRole]:
    """Config key -> role of every model the run will call (bare model strings in specs become roles)."""
    r = config.round
    pairs = config.evaluation.pairs if "evaluate_pairs" in r.stages else []
    used = {f"models.{p.model}": config.models[p.model] for p in pairs}
    if r.uses_roles:
        spec = r.correction.expert  # as flows.round.context.correction_expert: a role name, a model string or unset
        rewriter = (config.models.get(spec) or ModelRole(model=spec)) if spec else config.models[r.expert]
        used |= {f"models.{r.student}": config.models[r.student], f"models.{r.expert}": config.models[r.expert],
                 "round.correction.expert": rewriter}
        spec = r.correction.locator_expert
        used[f"models.{spec}" if spec in config.models else "round.correction.locator_expert"] = \
            config.models.get(spec) or ModelRole(model=spec)
        specs = (("reflector", r.search.reflector, "llm"), ("locator", r.correction.locator, "mle_agent"),
                 ("judge", r.correction.selector, "judge"))
        for key, spec, role in specs:
            name, _, model = spec.partition(":")
            if name == role and model:
                used[f"models.{key}"] = (config.models[key].model_copy(update={"model": model})
                                         if key in config.models else ModelRole(model=model))
    if config.attribution is not None and config.attribution.enabled and config.attribution.attributor != "heuristic":
        model = config.attribution.attributor.partition(":")[2]
        base = config.models.get("judge")
        used["models.judge"] = base.model_copy(update={"model": model}) if base and model else \
            (base or ModelRole(model=model))
    return used


def role_needs(key: str, role: ModelRole) -> str:
    """'own' (our providers), 'served' (a vLLM server) or 'paid' (an API that takes a key and costs money)."""
    provider = role.model.split("/", 1)[0]
    return "own" if provider in OWN else "served" if provider == "hosted_vllm" else "paid"


def yield_estimate(config: RunConfig, pass_rate: float, keep_rate: float = 1.0) -> tuple[int, int, int, int]:
    """(student rollouts on the train split, the failures expected at `pass_rate`, the corrections kept of them
    at `keep_rate`, corrections asked)."""
    r = config.round
    assert r is not None
    rollouts = len(config.family_names()) * (r.data.instances or 20) * r.data.student_samples
    failures = rollouts * (1 - pass_rate)
    return rollouts, round(failures), round(failures * keep_rate), r.data.corrections


def samples_for(config: RunConfig, pass_rate: float, keep_rate: float = 1.0) -> int:
    """Student samples per train instance that yield the corrections asked at this pass and keep rate."""
    r = config.round
    assert r is not None
    per = len(config.family_names()) * (r.data.instances or 20) * (1 - pass_rate) * keep_rate
    return math.ceil(r.data.corrections / per) if per > 0 else 0


def key_set(var: str | None) -> bool:
    return bool(var and os.environ.get(var))


def _student_servers(config: RunConfig, root: Path) -> list[tuple[int, Any]]:
    """(index, spec) of the servers that serve the student's weights (training renders what they render)."""
    weights = (root / config.round.student_weights).resolve() if config.round.student_weights else None
    return [(i, s) for i, s in enumerate(config.servers) if weights is None or (root / s.model).resolve() == weights]


def check_window(config: RunConfig, i: int, spec: Any, facts: ModelFacts, model_dir: Path) -> list[Finding]:
    out = []
    key = f"servers.{i}.max_model_len"
    if spec.max_model_len and spec.max_model_len > facts.window:
        factor = 2 ** math.ceil(math.log2(spec.max_model_len / facts.window))
        out.append(Finding(level="refused", key=key, text=(
            f"{spec.max_model_len} > the model's window {facts.window} ({facts.window_from}; rope scaling "
            f"{facts.rope}): vLLM refuses to start"), fix=(
            f"lower it to {facts.window}, or add rope scaling to {model_dir}/config.json as the model card "
            f"describes (rope_parameters: {{rope_type: yarn, factor: {factor}.0, original_max_position_embeddings: "
            f"{facts.window}}}, max_position_embeddings: {facts.window * factor}) so serving and training use it")))
    elif spec.max_model_len:
        out.append(Finding(level="ok", key=key, text=f"{spec.max_model_len} <= the model's window {facts.window} "
                                                     f"({facts.window_from}; rope scaling {facts.rope})"))
    length = config.length if config.trains else None
    if length is not None and length.raised_max_len > facts.window:
        out.append(Finding(level="refused", key="length.max_len", text=(
            f"{length.max_len}, raised 2x to {length.raised_max_len} when >{length.raise_above:.0%} of the "
            f"examples are longer, passes the model's window {facts.window}"),
            fix=f"set length.max_len <= {facts.window // 2}, or give the model rope scaling (above)"))
    return out


def check_template(i: int, spec: Any, root: Path, model_dir: Path) -> list[Finding]:
    from deploy.chat_templates import choose_template, template_spec

    ours = template_spec(spec.chat_template, model_dir)
    template = spec.model_copy(update={"model": str(model_dir)}).template_file()  # as flows.servers.resolve_spec
    template = str((root / template).resolve()) if template else None
    problem = template_problem(model_dir, template, spec.template_kwargs(), ours.tokens if ours else ())
    name = ours.name if ours else (spec.chat_template or "the tokenizer's own")
    key = f"servers.{i}.chat_template"
    if problem:
        best = choose_template(model_dir)
        return [Finding(level="refused", key=key, text=f"{name}: {problem}", fix=(
            f"set servers.{i}.chat_template: {best.name} (ours: prefix-stable, think text never trained)" if best
            else "give a Jinja file that renders every earlier turn identically (deploy/templates/ shows how)"))]
    out = [Finding(level="ok", key=key, text=f"{name} renders a 3-turn tool-calling trajectory prefix-stably "
                                            "(training trains the token ids the server rendered)")]
    if ours and spec.tool_call_parser != ours.tool_call_parser:
        out.append(Finding(level="refused", key=f"servers.{i}.tool_call_parser", text=(
            f"{spec.tool_call_parser}, but chat_template {ours.name} writes calls that {ours.tool_call_parser} reads"),
            fix=f"set tool_call_parser: {ours.tool_call_parser}"))
    if ours and ours.thinking and spec.enable_thinking is not False and not spec.reasoning_parser:
        out.append(Finding(level="refused", key=f"servers.{i}.reasoning_parser", text=(
            f"{ours.name} thinks by default and no reasoning parser is set: think text would land in the content"),
            fix=f"set reasoning_parser: {ours.reasoning_parser}, or enable_thinking: false"))
    return out


def check_servers(config: RunConfig, root: Path, facts: ModelFacts) -> list[Finding]:
    out = []
    for i, spec in _student_servers(config, root):
        model_dir = (root / spec.model).resolve()
        out += check_window(config, i, spec, facts, model_dir)
        out += check_template(i, spec, root, model_dir)
    return out


def check_lora(config: RunConfig, key: str, meta: Any) -> list[Finding]:
    if not config.trains:
        return []
    lora, sec = config.lora, "lora"  # the section the findings name
    arch = type(meta).__name__
    try:
        kinds, share, missing = lora_cover(meta, lora)
    except ValueError as e:
        return [Finding(level="refused", key=f"{sec}.target_modules", text=f"{arch}: {e}",
                        fix="name projections this architecture has (or set target_experts for fused MoE experts)")]
    total = sum(p.numel() for p in meta.parameters())
    out = [Finding(level="ok", key=sec, text=f"{arch}: LoRA rank {lora.rank} on {', '.join(kinds)}, which cover "
                                             f"{share:.1%} of its {_size(total)} parameters")]
    if missing:
        out.append(Finding(level="finding", key=f"{sec}.target_modules", text=(
            f"{', '.join(missing)} match no adapted weight of {arch}" + (" (its experts are fused 3-D weights: "
            "target_experts reaches them)" if not lora.target_experts and any(
                p.ndim == 3 for p in meta.parameters()) else ""))))
    return out


def _priced(role: ModelRole) -> bool:
    if role.input_cost_per_token or role.output_cost_per_token:
        return True
    import agents.client  # noqa: F401 - sets LITELLM_LOCAL_MODEL_COST_MAP before litellm loads
    import litellm

    try:
        info = litellm.get_model_info(role.model)
    except Exception:  # noqa: BLE001 - litellm raises for an unknown model
        return False
    return bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))


def _role_findings(key: str, role: ModelRole, keys: bool) -> list[Finding]:
    needs = role_needs(key, role)
    base = key if key.startswith("models.") else f"models.{key.rsplit('.', 1)[-1]}"
    out = []
    if needs == "served" and not role.api_base:
        out.append(Finding(level="refused", key=f"{base}.api_base", text=f"{role.model} has no server URL: every "
                           "call would fail", fix="set api_base: http://HOST:PORT/v1 on the role"))
    if needs == "paid" and not (role.api_key_env or role.api_key_secret):
        out.append(Finding(level="refused", key=f"{base}.api_key_env", text=f"{role.model} names no key variable",
                           fix="name the variable holding its key, e.g. api_key_env: GEMINI_API_KEY"))
    elif needs == "paid" and role.api_key_env and not key_set(role.api_key_env):
        out.append(Finding(level="refused" if keys else "finding", key=f"{base}.api_key_env", text=(
            f"{role.api_key_env} is not set in this environment"),
            fix=f"export {role.api_key_env}=..." if keys else ""))
    if needs == "paid" and not _priced(role):
        out.append(Finding(level="refused", key=f"{base}.input_cost_per_token", text=(
            f"LiteLLM has no price for {role.model}: the run's budget could not count its calls"),
            fix="set input_cost_per_token and output_cost_per_token (USD per token) on the role"))
    if base.split(".")[-1] in ("judge", "locator") and needs != "own" and role.max_tokens < THINKING_ROOM:
        out.append(Finding(level="finding", key=f"{base}.max_tokens", text=(
            f"{role.max_tokens}: a thinking model's answer would be cut (it thinks first); {THINKING_ROOM}+ "
            "leaves it room")))
    return out


def _size(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"


def check_roles(config: RunConfig, keys: bool) -> list[Finding]:
    out: list[Finding] = []
    paid = []
    for key, role in used_roles(config).items():
        found = [f for f in _role_findings(key, role, keys) if f not in out]  # a role used twice: once
        out += found
        if role_needs(key, role) == "paid":
            paid.append(key)
        if not found and role_needs(key, role) != "own":
            out.append(Finding(level="ok", key=key, text=f"{role.model}: " + (
                "key variable set, priced" if role_needs(key, role) == "paid" else f"served at {role.api_base}")))
    if paid and config.round.budget_usd is None:
        out.append(Finding(level="refused", key="round.budget_usd", text=f"paid roles ({', '.join(paid)}) and no "
                           "run budget", fix="set round.budget_usd (dollars; spent -> the round stops, resumable)"))
    elif paid:
        out.append(Finding(level="ok", key="round.budget_usd", text=f"${config.round.budget_usd:.2f} over "
                                                                    f"{len(paid)} paid role(s)"))
    return out


def check_yield(config: RunConfig, pass_rate: float, keep_rate: float = 1.0) -> list[Finding]:
    """Enough failing samples for the corrections asked, at one correction per failure kept at `keep_rate` (1.0:
    every failure's correction kept, an upper bound; the keep rule drops most of them: docs/results.md)."""
    if "corr" not in config.round.arms or "arm_data" not in config.round.stages:
        return []
    rollouts, failures, expected, asked = yield_estimate(config, pass_rate, keep_rate)
    r = config.round
    kept = ("at most one correction each" if keep_rate >= 1.0 else
            f"at a {keep_rate:.0%} keep rate ~{expected} corrections kept")
    text = (f"{len(config.family_names())} families x {r.data.instances or 20} train instances x "
            f"{r.data.student_samples} student samples = {rollouts} rollouts; at a {pass_rate:.1%} pass rate"
            f"{PAPER_RATE_NOTE if pass_rate == PAPER_PASS_RATE else ''} ~{failures} fail, {kept}")
    if expected >= asked:
        return [Finding(level="ok", key="round.data.corrections", text=f"{text}: enough for the {asked} asked")]
    return [Finding(level="finding", key="round.data.corrections", text=(
        f"{text}: ~{expected} < the {asked} asked; {samples_for(config, pass_rate, keep_rate)} samples per "
        f"instance (round.data.student_samples) would give ~{asked}"))]


def check_gpus(config: RunConfig, root: Path, gpus: GpuSpec | None, facts: ModelFacts | None) -> list[Finding]:
    served = [(i, s) for i, s in enumerate(config.servers) if s.device == "gpu"]
    if not served:
        return []
    if gpus is None:
        return [Finding(level="finding", key="servers", text="no GPU found here: the memory and placement checks "
                        "are skipped (pass --assume-gpus COUNTxMEMORY, e.g. 8x141GB)")]
    out = [Finding(level="ok", key="gpus", text=f"{gpus.count} x {gpus.memory_gib:g} GiB ({gpus.source})")]
    weights = (root / config.round.student_weights).resolve() if config.round.student_weights else None
    for i, s in served:
        if facts is not None and (weights is None or (root / s.model).resolve() == weights):
            out += _server_memory(i, s, gpus, facts)
    from flows.placement import check_placement

    placed = check_placement(config, root, gpu_count=gpus.count)
    out += [Finding(level="refused", key="placement", text=e, fix="see docs/gpu.md") for e in placed.errors]
    if not placed.errors:
        out.append(Finding(level="ok", key="placement", text="; ".join(line.strip() for line in placed.lines[1:])))
    return out


def _server_memory(i: int, s: Any, gpus: GpuSpec, facts: ModelFacts) -> list[Finding]:
    dtype_bytes = 4 if s.dtype in ("float32", "fp32") else 2
    tp = s.tensor_parallel_size
    share = s.gpu_memory_utilization or 0.9
    limit = gpus.memory_gib * share
    per_gpu = facts.params * dtype_bytes / tp / GIB
    kv = facts.kv_bytes_per_token * (s.max_model_len or facts.window) / tp / GIB
    if tp > gpus.count:
        return [Finding(level="refused", key=f"servers.{i}.tensor_parallel_size", text=f"{tp} > {gpus.count} GPUs",
                        fix=f"at most {gpus.count}")]
    if per_gpu + kv > limit:
        key = f"servers.{i}.tensor_parallel_size" if per_gpu > limit else f"servers.{i}.max_model_len"
        return [Finding(level="refused", key=key, text=(
            f"{per_gpu:.1f} GiB of weights + {kv:.1f} GiB of KV cache for one {s.max_model_len}-token sequence per "
            f"GPU > {limit:.0f} GiB ({share:.2f} of {gpus.memory_gib:g} GiB)"), fix="raise tensor_parallel_size "
            "or gpu_memory_utilization, or lower max_model_len")]
    return [Finding(level="ok", key=f"servers.{i}", text=(
        f"{_size(facts.params)} parameters: {per_gpu:.1f} GiB of weights per GPU over {tp} + {kv:.1f} GiB of "
        f"KV cache per {s.max_model_len}-token sequence, within {limit:.0f} GiB ({share:.2f} of "
        f"{gpus.memory_gib:g} GiB): ~{int((limit - per_gpu) / kv) if kv else 0} full-length sequences at once"))]
