"""`RunConfig`: the YAML a run is launched from, validated up front.

Unknown keys and bad values are errors that name the key (`evaluation.seeds: ...`), raised before any
server starts. Model strings may contain `{family}`, filled per task instance (e.g. `oracle/{family}`, the
embedded-default expert: each family's reference policy).

A config file may start from another: `extends: local.yaml` (relative to the file) overlays it on that base by
deep merge (mappings key by key; lists, scalars and null replace), chains allowed, cycles refused. The merged
data is validated once, after the merge; a run stores the resolved result (`resolved`) in its directory.
The reference of every field is docs/configuration.md (`coevo config schema`).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator, model_validator

import tasks
from agents.jobs import Limits
from agents.records import ModelRole, ToolChoice
from analysis.attribution import parse_spec
from analysis.fit import FitConfig
from deploy.vllm_server import ServeSpec
from flows.errors import ConfigError
from flows.round.config import PAIRS_STAGES, RoundConfig, read_forward_round
from tasks import show_work
from tasks.base import SPLIT_RANGES
from tasks.records import Split
from training.config import LengthRule, TrainConfig


class TinyModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out: str = Field(default=".cache/tiny-model", description="Where the tiny model is built (if missing).")
    seed: int = Field(default=0, description="Seed of the build: same seed, byte-identical weights and tokenizer.")


class EvalPair(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="A role name from `models`.")
    harness: str = Field(default="baseline", description="'baseline' (h0 per family) or a harness JSON file.")
    adapter: str | None = Field(default=None, description="A name from `adapters`: call the role's server under it.")
    label: str | None = Field(default=None, description="Column name in tables; default '<model>' (+ '@<adapter>').")
    tool_choice: ToolChoice | None = Field(
        default=None, description="Passed to every model call: 'auto', 'required', 'none' or a named function "
                                  "{type: function, function: {name: ...}}.")

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        base = self.model if self.adapter is None else f"{self.model}@{self.adapter.split('@')[-1]}"
        return base if self.harness == "baseline" else f"{base}+{Path(self.harness).stem}"


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: Split = Field(default="test", description="The split evaluated (train 0-19, val 20-39, test 40-99).")
    n_instances: int | None = Field(default=5, gt=0, description="First N of the split per family; null = all.")
    seeds: int = Field(default=3, gt=0, description="Seeds 0..S-1; each instance runs once per seed.")
    pairs: list[EvalPair] = Field(default_factory=lambda: [EvalPair(model="student"), EvalPair(model="expert")],
                                  description="The (model, harness) pairs evaluated, each a column of the report.")
    bootstrap_samples: int = Field(default=2000, gt=0, description="Draws for the paired bootstrap CI.")

    @field_validator("pairs")
    @classmethod
    def _unique_labels(cls, v: list[EvalPair]) -> list[EvalPair]:
        names = [p.name for p in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"pair label(s) {dup} repeat; give each pair a distinct `label`")
        if not v:
            raise ValueError("at least one (model, harness) pair is needed")
        return v


class AttributionConfig(BaseModel):
    """The `attribution:` section of a run config: the `attribute` stage after evaluation (docs/attribution.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="false: the section is kept but nothing is attributed (a config "
                                                    "without `round:` leaves the `attribute` stage out; a "
                                                    "`round.stages` that lists it is refused).")
    attributor: str = Field(default="heuristic", description="'heuristic', 'judge' (the `judge` role of `models`) "
                                                             "or 'judge:MODEL'.")
    concurrency: int = Field(default=4, ge=1, description="Trajectories attributed at once.")
    bootstrap_samples: int = Field(default=2000, ge=100, description="Draws for the composition shifts' CIs.")
    seed: int = Field(default=0, description="Seed of the bootstrap.")
    fit: FitConfig = Field(default_factory=FitConfig)

    @field_validator("attributor")
    @classmethod
    def _known(cls, v: str) -> str:
        if v != "judge":
            parse_spec(v)  # ValueError names the accepted forms
        return v


class AdapterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Versioned served name, e.g. 'student@r1'.")
    path: str = Field(description="PEFT adapter directory.")
    server: str = Field(description="`name` of the server (under `servers`) that loads it.")


class RayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(default=None, description="null = start a local Ray; else ray://host:10001 or 'auto'.")
    num_cpus: int | None = Field(default=2, gt=0, description="CPUs of the local Ray (null = every CPU); unused "
                                 "with an address.")
    actors: int = Field(default=2, gt=0, description="Rollout actors in the pool.")
    concurrency_per_server: int = Field(default=8, gt=0, description="At most this many episodes in flight per "
                                        "model server (api_base).")
    family_limits: dict[str, PositiveInt] | None = Field(default=None, description="At most this many episodes of a "
                                                 "task family in flight over the pool (a latency bound for heavy "
                                                 "families, paid in throughput); null = no family limit.")

    @field_validator("family_limits")
    @classmethod
    def _known_families(cls, v: dict[str, int] | None) -> dict[str, int] | None:
        for family in v or {}:
            if family not in tasks.FAMILY_TABLE:
                raise ValueError(f"unknown task family '{family}'; known: {', '.join(tasks.FAMILY_TABLE)}")
        return v


def nested_training_settings(data: Any) -> list[tuple[str, str]]:
    """(section, key) of each training setting (`lora`, `length`) a raw config still nests under `round:` or
    `training:`, where they lived before their one home moved to the top level."""
    if not isinstance(data, dict):
        return []
    return [(section, key) for section in ("round", "training") if isinstance(data.get(section), dict)
            for key in ("lora", "length") if key in data[section]]


# Keys a run may have stored before they were removed (they no longer do anything), with their defaults.
RETIRED: dict[str, dict[str, Any]] = {"": {"training": None},
                                      "attribution": {"base_pair": None, "expert_pair": None, "shifts": []}}


def read_forward(raw: dict[str, Any]) -> dict[str, Any]:
    """A config a run stored under an older layout, in today's: the training settings moved to the top level,
    the retired keys (`RETIRED`) dropped, so an older run still resumes."""
    for section, key in nested_training_settings(raw):
        raw.setdefault(key, raw[section].pop(key))
    if isinstance(raw.get("round"), dict):
        read_forward_round(raw["round"])  # the gate apart from the search's val instances
    for section, keys in RETIRED.items():
        where = raw if not section else raw.get(section)
        for key in keys:
            if isinstance(where, dict):
                where.pop(key, None)
    return raw


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)  # errors never echo a value (a key)

    name: str = Field(default="run", pattern=r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$",
                      description="Part of the run id (<time>-<name>): letters, digits, . _ @ + - (no path).")
    runs_dir: str = Field(default="runs", description="Where runs live: runs_dir/<run_id>/ (relative to the "
                          "working directory).")
    tiny_model: TinyModelConfig | None = Field(default=None, description="Build the tiny local model first.")
    servers: list[ServeSpec] = Field(default_factory=list, description="vLLM servers the run starts and stops.")
    adapters: list[AdapterConfig] = Field(default_factory=list, description="LoRA adapters loaded after start.")
    models: dict[str, ModelRole] = Field(description="Role name -> model (student, expert, reflector, ...).")
    families: list[str] = Field(default_factory=lambda: ["all"], description="Task families; ['all'] = every landed one.")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    limits: Limits = Field(default_factory=Limits, description="Per-episode limits (agents.jobs.Limits).")
    ray: RayConfig = Field(default_factory=RayConfig)
    lora: TrainConfig = Field(default_factory=TrainConfig, description="LoRA-SFT settings (training.config."
                              "TrainConfig: rank, epochs, lr, seeds, ...) of whatever the run trains: the round's arms "
                              "(`seeds` = training seeds per arm). The defaults are the paper's recipe; `rank` must "
                              "be at most the serving server's max_lora_rank.")
    length: LengthRule = Field(default_factory=LengthRule, description="Sequence length of the training examples "
                               "(training.config.LengthRule): max_len, raised to 2x when more than raise_above of "
                               "the examples exceed it; longer examples are dropped and counted.")
    attribution: AttributionConfig | None = Field(default=None, description="Attribute the failing rollouts "
                                                  "after evaluation (attribute stage); null = no attribution.")
    round: RoundConfig = Field(default_factory=lambda: RoundConfig(stages=PAIRS_STAGES), description="The stages "
                               "each round runs (flows/round/flow.py); absent or null = the round [evaluate_pairs, "
                               "attribute, report]: the `evaluation.pairs` side by side (attribute when "
                               "`attribution:` is on).")

    @model_validator(mode="before")
    @classmethod
    def _one_lora_home(cls, data: Any) -> Any:
        """`lora:` and `length:` live at the top level only; a section that still carries them is named."""
        found = nested_training_settings(data)
        if found:
            section, key = found[0]
            raise ValueError(f"{section}.{key}: the training settings have one home, the top-level `{key}:`; move "
                             f"this block there (one level up, out of `{section}:`)")
        return data

    @model_validator(mode="before")
    @classmethod
    def _pairs_round(cls, data: Any) -> Any:
        """No `round:` (or `round: null`): the round that evaluates `evaluation.pairs`, attributed when asked."""
        if isinstance(data, dict) and data.get("training") is not None:
            raise ValueError("training: removed; an imitation adapter is a round with `arms: [imit_h0]` "
                             "(deploy/configs/local_train.yaml), trained with the top-level `lora:`")
        if isinstance(data, dict) and data.get("round") is None:
            a = data.get("attribution")
            on = isinstance(a, dict) and a.get("enabled", True)
            data = {**data, "round": {"stages": [s for s in PAIRS_STAGES if s != "attribute" or on]}}
        return data

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: list[str]) -> list[str]:
        if v == ["all"]:
            return v
        known = tasks.families()
        for f in v:
            if f not in known:
                raise ValueError(f"unknown task family '{f}'; available: {', '.join(known)}")
        return v

    @model_validator(mode="after")
    def _cross_references(self) -> "RunConfig":
        for role, m in self.models.items():
            try:
                m.model.format(family="f")
            except (KeyError, IndexError, ValueError):
                raise ValueError(f"models.{role}.model: '{m.model}' may only contain the placeholder {{family}}") from None
        for i, pair in enumerate(self.evaluation.pairs):
            if pair.adapter is not None and pair.adapter not in {a.name for a in self.adapters}:
                raise ValueError(f"evaluation.pairs.{i}.adapter: '{pair.adapter}' is not listed under `adapters`")
        server_names = [s.name for s in self.servers]
        for i, a in enumerate(self.adapters):
            if a.server not in server_names:
                raise ValueError(f"adapters.{i}.server: no server named '{a.server}' (servers: {server_names or 'none'})")
        ports = [s.port for s in self.servers]
        if len(set(ports)) != len(ports):
            raise ValueError(f"servers: two servers share a port ({ports})")
        self._check_server_keys()
        if self.attribution is not None and self.attribution.enabled and self.attribution.attributor == "judge" \
                and "judge" not in self.models:
            raise ValueError("attribution.attributor: 'judge' needs a `judge` role under `models` (or use judge:MODEL)")
        self._check_round(self.round)
        return self

    def _check_round(self, r: RoundConfig) -> None:
        if "evaluate_pairs" in r.stages:
            for i, pair in enumerate(self.evaluation.pairs):
                if pair.model not in self.models:
                    raise ValueError(f"evaluation.pairs.{i}.model: role '{pair.model}' is not defined under `models` "
                                     f"(defined: {', '.join(self.models) or 'none'})")
        if self.attribution is not None and not self.attribution.enabled and "attribute" in r.stages:
            raise ValueError("attribution.enabled: false, but round.stages runs 'attribute'; remove it from "
                             "round.stages (or the section)")
        if self.trains and r.student_weights is None:
            raise ValueError("round.student_weights: the train stage trains on M_t's weights; give their directory")
        if self.trains and self.evaluation.split != "test":
            raise ValueError(f"evaluation.split: '{self.evaluation.split}' in a round that trains; its arms are "
                             "compared on the test split (train rows come from train, the gate judges on val): "
                             "use test")
        self._check_showwork_programs(r)
        if not r.uses_roles:
            return
        for key in ("student", "expert"):
            name = getattr(r, key)
            if name not in self.models:
                raise ValueError(f"round.{key}: role '{name}' is not defined under `models` "
                                 f"(defined: {', '.join(self.models)})")
        role = self.models[r.student]
        if not self.trains:
            return
        if role.provider != "hosted_vllm" or not role.api_base:
            raise ValueError(f"round.student: '{r.student}' is '{role.model}'; the round trains and hot-loads "
                             "adapters, so M_t must be a hosted_vllm model with an api_base")
        self._check_lora_rank(role)

    def _check_showwork_programs(self, r: RoundConfig) -> None:
        """`showwork/{family}@<program>` as the correction expert: the program must be each family's policy's."""
        spec = r.correction.expert
        model = self.models[spec].model if spec in self.models else spec
        if not model or not model.startswith("showwork/") or "@" not in model:
            return
        for family in self.family_names():
            name = model.split("/", 1)[1].format(family=family)
            try:
                show_work.check_program(*name.split("@", 1))
            except ValueError as e:
                raise ValueError(f"round.correction.expert: {e}") from None

    def _check_lora_rank(self, role: ModelRole) -> None:
        """The adapters `lora:` trains must fit the server that hot-loads them for `role` (when the run manages it)."""
        spec = self.server_for(role)
        if spec is not None and self.lora.rank > spec.max_lora_rank:
            raise ValueError(f"lora.rank: {self.lora.rank} > max_lora_rank {spec.max_lora_rank} of server "
                             f"'{spec.name}'")

    def _check_server_keys(self) -> None:
        """A role calling a managed server that requires a key must name the same key variable."""
        for role_name, role in self.models.items():
            spec = self.server_for(role)
            if spec is not None and spec.api_key_env and role.api_key_env != spec.api_key_env:
                raise ValueError(f"models.{role_name}.api_key_env: server '{spec.name}' requires the key in "
                                 f"{spec.api_key_env}; set `api_key_env: {spec.api_key_env}` on this role")

    @property
    def trains(self) -> bool:
        """Whether the run trains LoRA adapters (its round runs the train stage)."""
        return "train" in self.round.stages

    def roles_called(self) -> set[str]:
        """Names (under `models`) of the roles the round's stages call: the configured pairs' when it runs
        `evaluate_pairs`, M_t's and the expert's when a stage uses them."""
        r = self.round
        used = {p.model for p in self.evaluation.pairs} if "evaluate_pairs" in r.stages else set()
        return used | ({r.student, r.expert} if r.uses_roles else set())

    def family_names(self) -> list[str]:
        return tasks.families() if self.families == ["all"] else list(self.families)

    def role(self, name: str, family: str, adapter: str | None = None) -> ModelRole:
        """The role's model for one family: `{family}` filled, the adapter's served name when one is given."""
        return family_role(self.role_template(name, adapter), family)

    def role_template(self, name: str, adapter: str | None = None) -> ModelRole:
        """The role's model (the adapter's served name when one is given), `{family}` not yet filled."""
        base = self.models[name]
        return base if adapter is None else base.model_copy(update={"model": f"{base.provider}/{adapter}"})

    def server_for(self, role: ModelRole) -> ServeSpec | None:
        """The configured server this role's calls go to (by api_base), if the run manages it."""
        return next((s for s in self.servers if role.api_base and role.api_base.rstrip("/") == s.api_base), None)


def family_role(role: ModelRole, family: str) -> ModelRole:
    """`role` with `{family}` in its model string filled (e.g. oracle/{family} -> oracle/stock_alert)."""
    return role.model_copy(update={"model": role.model.format(family=family)})


def preflight(config: RunConfig, repo_root: Path | None = None, model_checks: bool = True) -> None:
    """Checks that need the file system, done before any server starts; raises ConfigError naming the key.
    `model_checks`: also `coevo doctor`'s (flows/doctor.py: window, chat template, LoRA targets, API roles, GPUs)."""
    root = repo_root or Path.cwd()
    tiny_out = (root / config.tiny_model.out).resolve() if config.tiny_model else None
    for i, s in enumerate(config.servers):
        path = (root / s.model).resolve()
        if not path.exists() and path != tiny_out:
            raise ConfigError(f"servers.{i}.model: model directory '{s.model}' does not exist"
                              + (" (set `tiny_model.out` to it to have the run build it)" if "tiny" in s.model else ""))
    for i, a in enumerate(config.adapters):
        if not (root / a.path).exists():
            raise ConfigError(f"adapters.{i}.path: adapter directory '{a.path}' does not exist")
    for i, pair in enumerate(config.evaluation.pairs if "evaluate_pairs" in config.round.stages else []):
        if pair.harness != "baseline" and not (root / pair.harness).is_file():
            raise ConfigError(f"evaluation.pairs.{i}.harness: harness file '{pair.harness}' does not exist")
        role = config.models[pair.model]
        if role.provider == "hosted_vllm" and not role.api_base:
            raise ConfigError(f"models.{pair.model}.api_base: a hosted_vllm model needs the server URL (…/v1)")
    _preflight_round(config, root, tiny_out)
    _check_key_variables(config)
    available = len(SPLIT_RANGES[config.evaluation.split])
    if config.evaluation.n_instances is not None and config.evaluation.n_instances > available:
        raise ConfigError(f"evaluation.n_instances: {config.evaluation.n_instances} > the {available} "
                          f"{config.evaluation.split} instances each family has (use null for all)")
    if model_checks:
        from flows.doctor import require_ready

        require_ready(config, root)


def _preflight_round(config: RunConfig, root: Path, tiny_out: Path | None) -> None:
    r = config.round
    weights = (root / r.student_weights).resolve() if r.student_weights else None
    if weights is not None and not weights.exists() and weights != tiny_out:
        raise ConfigError(f"round.student_weights: model directory '{r.student_weights}' does not exist")
    if r.start_harness != "baseline":
        d = root / r.start_harness
        missing = [f for f in config.family_names() if not (d / f"{f}.yaml").is_file()]
        if missing:
            raise ConfigError(f"round.start_harness: '{r.start_harness}' has no {missing[0]}.yaml (one harness per "
                              "family)")
    if r.accelerate_config and not (root / r.accelerate_config).is_file():
        raise ConfigError(f"round.accelerate_config: '{r.accelerate_config}' does not exist")


def _check_key_variables(config: RunConfig) -> None:
    """Every key variable the run will read is set in this process (its value is never read into the config)."""
    for name in sorted(config.roles_called()):
        var = config.models[name].api_key_env
        if var and not os.environ.get(var):
            raise ConfigError(f"models.{name}.api_key_env: environment variable {var} is not set")
    for i, spec in enumerate(config.servers):
        if spec.api_key_env and not os.environ.get(spec.api_key_env):
            raise ConfigError(f"servers.{i}.api_key_env: environment variable {spec.api_key_env} is not set")


def _format_errors(e: ValidationError, source: str) -> str:
    lines = []
    for err in e.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        # cross-field checks (loc empty) already start their message with the dotted key
        lines.append(f"{source}: {msg}" if not err["loc"] else f"{source}: {key}: {msg}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any], source: str = "config") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, source)) from None


def resolved(config: RunConfig) -> dict[str, Any]:
    """The merged, validated config with every default filled in: what `coevo config show --resolved` prints and
    what a run stores as `runs/<run_id>/config.yaml`, so the run replays without the files it extended."""
    return config.model_dump(mode="json")


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`overlay` on `base`, neither mutated: mappings merge key by key; lists, scalars and null replace."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_config_data(path: str | Path) -> dict[str, Any]:
    """The YAML at `path` with its `extends:` chain resolved (not yet validated); see `_read_chain`."""
    return _read_chain(Path(path))[0]


def _read_chain(path: Path) -> tuple[dict[str, Any], list[Path]]:
    """(the merged data, the files read: `path` first, then each base). `extends: local.yaml` names a base config
    relative to the extending file, which is overlaid on it by `deep_merge`; chains are followed to the root, and
    a cycle is refused naming the chain."""
    chain: list[Path] = []
    layers: list[dict[str, Any]] = []
    while True:
        if path.resolve() in [p.resolve() for p in chain]:
            raise ConfigError(f"{chain[0]}: extends: cycle {' -> '.join(str(p) for p in [*chain, path])}")
        chain.append(path)
        data = _read_yaml(path)
        base = data.pop("extends", None)
        layers.append(data)
        if base is None:
            break
        if not isinstance(base, str) or not base.strip():
            raise ConfigError(f"{path}: extends: give one base config file (a path relative to this file), "
                              f"got {type(base).__name__}")
        path = path.parent / base
        if not path.is_file():
            raise ConfigError(f"{chain[-1]}: extends: base config {path} not found")
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = deep_merge(merged, layer)
    return merged, chain


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as e:  # a directory, unreadable, not text
        raise ConfigError(f"config file {path}: {type(e).__name__}: {e}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def load_config(path: str | Path) -> RunConfig:
    """The run config at `path`: its `extends:` chain merged, then validated once. An error names the key and
    the file, with the files it extends (the key may come from any of them)."""
    data, chain = _read_chain(Path(path))
    bases = f" (extends {', '.join(str(p) for p in chain[1:])})" if len(chain) > 1 else ""
    return parse_config(data, f"{chain[0]}{bases}")
