"""`coevo run --dry-run`: what a round config would do, checked end to end, without starting anything.

Counts are exact where the config fixes them (evaluations, data rollouts, LoRA runs) and upper bounds where
the run decides (search evaluations = the budget; corrections <= failing samples). Times and dollars are
rough: seconds per rollout by model kind (`round.est_rollout_s` overrides), divided by the pool's parallelism.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from agents.records import ModelRole
from flows.config import RunConfig
from flows.placement import check_lora_serving, check_placement
from flows.round.config import RoundConfig
from training.targets import model_layout
from flows.round.context import correction_expert
from flows.store import RunStore, list_runs

LOCAL = ("oracle/", "flawed/", "showwork/")
# Seconds per rollout by model kind, divided by the rollouts that run at once. A CPU-served student is bounded by its
# server's decode, not by actors: "hosted_vllm/cpu" is the wall seconds per rollout of one CPU server at the default
# 32 in flight (`make run`, 2026-12-04, 2 cores: evaluate_arms 135 M0 rollouts through LoRA adapters in 128 s, the
# gate 30 in 46 s -> ~1 s), so CPU roles count their servers, not actors x concurrency. Local policies (oracle, flawed,
# showwork) run in the actors. GPU and API figures are guesses: set round.est_rollout_s for yours.
DEFAULT_S = {"oracle/": 1.0, "flawed/": 1.0, "showwork/": 1.0, "hosted_vllm/cpu": 1.0, "hosted_vllm/gpu": 60.0,
             "api": 60.0}
LORA_S_PER_EXAMPLE = {"cpu": 1.0, "gpu": 20.0}  # cpu: make run, 3 arms of <= 30 rows in 65 s
PROMPT_TOKENS_EST = 4000


class StagePlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stage: str
    rollouts: dict[str, int] = Field(default_factory=dict, description="Role -> rollouts (episodes).")
    lora_runs: int = 0
    note: str = ""


class RoundPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stages: list[StagePlan]
    lines: list[str]
    warnings: list[str]
    errors: list[str]


def _n(v: int | None, default: int) -> int:
    return default if v is None else v


def stage_plans(config: RunConfig) -> list[StagePlan]:
    r: RoundConfig = config.round
    F, ev = len(config.family_names()), config.evaluation
    test = F * _n(ev.n_instances, 60) * ev.seeds
    arms, d = set(r.arms), r.data
    n_train = F * _n(d.instances, 20)
    student_data = n_train * d.student_samples * (int("imit_h0" in arms) + int(bool(arms & {"imit", "corr"})))
    expert_data = n_train * d.expert_seeds * (int("imit_h0" in arms) + int("imit" in arms))
    failing = n_train * d.student_samples if "corr" in arms else 0
    c = r.correction
    probes = failing * (math.ceil(math.log2(max(config.limits.max_turns, 2))) + 1)
    seeds = config.lora.seeds
    gate_n = F * r.gate_instances()[1] * r.gate.val_seeds * (1 + seeds) if "corr" in arms else 0
    keep_replays = failing * 2 * c.replays if c.keep == "controlled" else 0  # decision + control replays
    reflector_calls = 0 if r.search.reflector == "library" else \
        F * r.search.seeds * math.ceil(r.search.budget_rollouts / max(r.search.minibatch_size, 1))
    plans = [
        StagePlan(stage="evaluate_pairs", rollouts={f"pair {p.name}": test for p in ev.pairs}),
        StagePlan(stage="evaluate_h0", rollouts={"student": test, "expert": test}),
        StagePlan(stage="evolve", rollouts={"student": F * r.search.seeds * r.search.budget_rollouts,
                                            "reflector (model calls)": reflector_calls},
                  note="student rollouts <= the search budget (cached evaluations are not repeated)"),
        StagePlan(stage="evaluate_h_star", rollouts={"student": test * (1 + int(r.start_harness != "baseline")),
                                                     "expert": test}),
        StagePlan(stage="arm_data", rollouts={"student": student_data + failing * c.n * c.replays + keep_replays,
                                              "expert": expert_data, "correction_expert": failing * c.n,
                                              "locator_expert": probes},
                  note=f"correction: <= {failing} failing samples x ({c.n} rewrites + {c.n}x{c.replays} replays"
                       + (f" + {c.replays} decision and {c.replays} control replays)" if keep_replays else ")")),
        StagePlan(stage="train", lora_runs=len(arms) * seeds, note=f"{len(arms)} arms x {seeds} training seeds"),
        StagePlan(stage="evaluate_arms", rollouts={"student": test * len(arms) * seeds}),
        StagePlan(stage="attribute", note=f"attributor {config.attribution.attributor if config.attribution else 'heuristic'}"),
        StagePlan(stage="gate", rollouts={"student": gate_n}, note=f"val split, the {r.gate_instances()[1]} instances "
                  f"per family after the search's {r.gate_instances()[0]}: M_t + each correction seed"),
        StagePlan(stage="report"),
    ]
    return [p for p in plans if p.stage in r.stages]


def _role_s(config: RunConfig, role: ModelRole) -> tuple[float, int]:
    """(seconds per rollout, parallel rollouts) of a role, for the estimate."""
    r = config.round
    est = {**DEFAULT_S, **r.est_rollout_s}
    par = config.ray.actors
    for prefix in LOCAL:
        if role.model.startswith(prefix):
            return est[prefix], par
    if role.provider == "hosted_vllm":
        spec = config.server_for(role)
        dev = spec.device if spec else "cpu"
        if dev == "cpu":  # one CPU server's decode is the bound, whatever the actors
            return est["hosted_vllm/cpu"], 1
        return est[f"hosted_vllm/{dev}"], par * config.ray.concurrency_per_server
    return est["api"], par * config.ray.concurrency_per_server


def _cost(config: RunConfig, role: ModelRole, rollouts: int) -> float | None:
    if role.model.startswith(LOCAL) or role.provider == "hosted_vllm":
        return 0.0
    if not (role.input_cost_per_token or role.output_cost_per_token):
        return None
    calls = rollouts * config.limits.max_turns
    return calls * (PROMPT_TOKENS_EST * role.input_cost_per_token + role.max_tokens * role.output_cost_per_token)


def _paths(config: RunConfig, root: Path) -> tuple[list[str], list[str]]:
    """Model directories: a missing absolute path is a warning (weights live on the GPU host), a missing
    relative one an error (unless the run builds it: `tiny_model.out`)."""
    r: RoundConfig = config.round
    tiny = (root / config.tiny_model.out).resolve() if config.tiny_model else None
    warnings, errors = [], []
    items = [(f"servers.{i}.model", s.model) for i, s in enumerate(config.servers)]
    items += [("round.student_weights", r.student_weights)] if r.student_weights else []
    for key, path in items:
        p = (root / path).resolve()
        if p.exists() or p == tiny:
            continue
        (warnings if Path(path).is_absolute() else errors).append(
            f"{key}: '{path}' is not on this machine" + (" (needed on the GPU host)" if Path(path).is_absolute() else ""))
    if r.start_harness != "baseline":
        missing = [f for f in config.family_names() if not (root / r.start_harness / f"{f}.yaml").is_file()]
        if missing:
            errors.append(f"round.start_harness: no {missing[0]}.yaml under '{r.start_harness}'")
    if r.accelerate_config and not (root / r.accelerate_config).is_file():
        errors.append(f"round.accelerate_config: '{r.accelerate_config}' does not exist")
    return warnings, errors


def check_round(config: RunConfig, root: Path) -> tuple[list[str], list[str]]:
    """(warnings, errors): model paths, the training base vs the served model, the accelerate config vs the
    servers (devices, tensor-parallel sizes, precision), sequence length vs the server's window."""
    r: RoundConfig = config.round
    warnings, errors = _paths(config, root)
    for name in sorted(_roles_used(config)):
        var = config.models[name].api_key_env
        if var and not os.environ.get(var):
            warnings.append(f"models.{name}.api_key_env: {var} is not set here (needed when the run starts)")
    spec = config.server_for(config.models[r.student]) if r.uses_roles else None
    if spec is not None and r.student_weights:
        if (root / spec.model).resolve() != (root / r.student_weights).resolve():
            errors.append(f"round.student_weights: '{r.student_weights}' is not the model the student's server "
                          f"'{spec.name}' serves ('{spec.model}'): adapters would be trained on other weights")
        if config.trains and spec.max_model_len is not None and spec.max_model_len < config.length.max_len:
            warnings.append(f"servers.{spec.name}.max_model_len {spec.max_model_len} < length.max_len "
                            f"{config.length.max_len}: evaluated contexts are shorter than trained ones")
    if r.accelerate_config and (root / r.accelerate_config).is_file():
        errors += _check_accelerate(config, root / r.accelerate_config, spec.device if spec else "cpu")
        errors += _check_fsdp_wrap(root / r.accelerate_config, root / (r.student_weights or "."),
                                   config.lora.target_experts)
    elif spec is not None and spec.device == "gpu":
        warnings.append("round.accelerate_config is unset: LoRA trains in the flow's own process (one device)")
    placed = check_placement(config, root)
    serve_errors, serve_warnings = check_lora_serving(config, root)
    return warnings + placed.warnings + serve_warnings, errors + placed.errors + serve_errors


def _roles_used(config: RunConfig) -> set[str]:
    """The roles (names under `models`) the round's stages call."""
    searches = "reflector" in config.models and "evolve" in config.round.stages
    return config.roles_called() | ({"reflector"} if searches else set())


def _check_fsdp_wrap(path: Path, weights: Path, experts: bool = False) -> list[str]:
    """An FSDP config that names a wrap class must name the student's decoder layer (the train stage passes the
    model's own class to `accelerate launch` when the config names none); expert LoRA needs FSDP2."""
    try:
        acc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []  # _check_accelerate reports it
    if acc.get("distributed_type") != "FSDP":
        return []
    fsdp = acc.get("fsdp_config") or {}
    if experts and int(fsdp.get("fsdp_version", 1)) == 1:
        return [f"round.accelerate_config: {path.name} uses FSDP1, which cannot train LoRA on fused experts "
                "(lora.target_experts; peft's expert wrapper reads a view of FSDP1's flat buffer that FSDP1 "
                "rewrites in place: failed on an H200, 2026-12-04); set fsdp_config.fsdp_version: 2"]
    named = fsdp.get("fsdp_transformer_layer_cls_to_wrap")
    if not named or not (weights / "config.json").is_file():
        return []
    layer = model_layout(weights).decoder_layer
    if layer and named != layer:
        return [f"round.accelerate_config: {path.name} wraps {named} but the student's decoder layer is {layer}; "
                "remove fsdp_transformer_layer_cls_to_wrap (the train stage passes the model's own)"]
    return []


def _check_accelerate(config: RunConfig, path: Path, device: str) -> list[str]:
    lora = config.lora
    try:
        acc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        return [f"round.accelerate_config: {path}: {e}"]
    errors = []
    n = int(acc.get("num_processes", 1))
    if device == "gpu" and acc.get("use_cpu"):
        errors.append(f"round.accelerate_config: {path.name} trains on CPU but the student is served on GPU")
    if lora.effective_batch % (n * lora.micro_batch):
        errors.append(f"lora.effective_batch {lora.effective_batch} is not a multiple of num_processes {n} x "
                      f"micro_batch {lora.micro_batch} ({path.name})")
    tp = max((s.tensor_parallel_size for s in config.servers), default=1)
    if device == "gpu" and n % tp and tp % n:
        errors.append(f"round.accelerate_config: num_processes {n} and the servers' tensor_parallel_size {tp} do not "
                      "divide one another (training and serving share the node's GPUs)")
    mp = acc.get("mixed_precision", "no")
    if lora.precision == "bf16" and mp not in ("bf16",):
        errors.append(f"lora.precision bf16 but {path.name} has mixed_precision {mp!r}")
    return errors


def _doctor(config: RunConfig, root: Path, errors: list[str]) -> list[str]:
    """`coevo doctor`'s checks (flows/doctor.py) as plan lines; its refusals join `errors` (key variables unset
    here are findings: a dry run may run away from the machine that runs the round)."""
    from flows.doctor import detect_gpus, diagnose

    gpus = detect_gpus() if any(s.device == "gpu" for s in config.servers) else None
    report = diagnose(config, root, gpus, keys=False)
    errors += [f.line().removeprefix("REFUSED ") for f in report.refused]
    return ["preflight (coevo doctor):"] + [f"  {line}" for line in report.lines()]


def _plan_roles(config: RunConfig) -> dict[str, ModelRole | None]:
    """The model behind each rollout count of `stage_plans` (for its time and cost)."""
    r = config.round
    roles: dict[str, ModelRole | None] = {f"pair {p.name}": config.role_template(p.model, p.adapter)
                                          for p in config.evaluation.pairs if p.model in config.models}
    if r.uses_roles:
        roles |= {"student": config.models[r.student].model_copy(update={"temperature": r.temperature}),
                  "expert": config.models[r.expert], "correction_expert": correction_expert(config),
                  "locator_expert": config.models.get(r.correction.locator_expert)
                  or ModelRole(model=r.correction.locator_expert)}
    roles["reflector (model calls)"] = config.models.get("reflector")
    return roles


def measured_rounds(config: RunConfig, root: Path) -> list[str]:
    """The estimate's check: the stage seconds of the newest finished round of the newest run under `runs_dir`
    with this config's name (the rough figure above is often off by a factor of 2-3 on a CPU server)."""
    runs = root / config.runs_dir
    for run_id in reversed(list_runs(runs)):
        try:
            store = RunStore.open_existing(runs, run_id)
            name = store.load_config_dict().get("name")
            rounds = store.done("rounds")
        except (OSError, ValueError, yaml.YAMLError):
            continue  # a run this code cannot read is no measurement
        rounds = {t: rec for t, rec in rounds.items() if not rec.get("stopped")}  # not one stopped after its search
        if name != config.name or not rounds:
            continue
        t, rec = max(rounds.items(), key=lambda kv: int(kv[0].removeprefix("r")))
        stages = [s for s in rec.get("stages", []) if s.get("wall_s")]
        wall = sum(s["wall_s"] for s in stages)
        longest = sorted(stages, key=lambda s: -s["wall_s"])[:3]
        return [f"measured: run {run_id}, round {t}: {wall / 60:.0f} min of stage time ("
                + ", ".join(f"{s['stage']} {s['wall_s'] / 60:.0f}" for s in longest)
                + " min; on the machine and load that ran it)"]
    return []


def plan_round(config: RunConfig, root: Path, rounds: int = 1) -> RoundPlan:
    """The dry-run: stages, rollouts and model calls per role, LoRA runs, time and API cost, checks."""
    r: RoundConfig = config.round
    plans = stage_plans(config)
    warnings, errors = check_round(config, root)
    roles = _plan_roles(config)
    lines = [f"round config: {len(config.family_names())} families ({', '.join(config.family_names())}); test "
             f"{config.evaluation.n_instances or 'all'} instances x {config.evaluation.seeds} seeds"
             + (f"; arms {', '.join(r.arms)}; {config.lora.seeds} training seed(s)" if config.trains else "")
             + (f"; search {r.search.seeds} seed(s) x {r.search.budget_rollouts} evaluations ({r.search.reflector})"
                if "evolve" in r.stages else "") + f"; rounds {rounds}",
             f"stages: serve -> {' -> '.join(r.stages)}"]
    total_s, cost, unknown = 0.0, 0.0, set()
    for p in plans:
        parts = [f"{k} {v}" for k, v in p.rollouts.items() if v]
        lines.append(f"  {p.stage:16s} " + (", ".join(parts) or "-") + (f"; LoRA runs {p.lora_runs}" if p.lora_runs else "")
                     + (f"  ({p.note})" if p.note else ""))
        for role_name, n in p.rollouts.items():
            role = roles.get(role_name)
            if role is None or not n:
                continue
            s, par = _role_s(config, role)
            total_s += n * s / par
            c = _cost(config, role, n)
            if c is None:
                unknown.add(role_name)
            else:
                cost += c
    per_role: dict[str, int] = {}
    for p in plans:
        for k, v in p.rollouts.items():
            per_role[k] = per_role.get(k, 0) + v
    lines.append("rollouts per role per round: " + ", ".join(f"{k} {v}" for k, v in per_role.items())
                 + f"; model calls <= rollouts x max_turns {config.limits.max_turns}")
    lora = sum(p.lora_runs for p in plans)
    spec = config.server_for(config.models[r.student]) if r.uses_roles else None
    ex = min(r.data.corrections + r.data.self_successes, len(config.family_names()) * _n(r.data.instances, 20)
             * max(r.data.student_samples, r.data.expert_seeds))
    total_s += lora * ex * config.lora.epochs * LORA_S_PER_EXAMPLE[spec.device if spec else "cpu"]
    if config.trains:
        lines.append(f"LoRA runs per round: {lora} (<= {ex} examples x {config.lora.epochs} epochs each"
                     + ("; experts adapted too" if config.lora.target_experts else "") + ")")
    lines += check_placement(config, root).lines
    lines += _doctor(config, root, errors)
    lines.append(f"estimate per round (rough): {total_s / 60:.0f} min wall; x{rounds} rounds = {rounds * total_s / 3600:.1f} h")
    lines += measured_rounds(config, root)
    lines.append(f"API cost estimate per round: ${cost:.2f}" + (f" + unknown for {', '.join(sorted(unknown))} (set "
                 "input/output_cost_per_token on those roles)" if unknown else "")
                 + (f"; run budget ${r.budget_usd:.2f}" if r.budget_usd else "; no run budget set"))
    return RoundPlan(stages=plans, lines=lines, warnings=warnings, errors=errors)
