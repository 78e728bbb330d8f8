"""The `round:` section of a run config: one co-evolution round (docs/flows.md, "The co-evolution round").

Every run is rounds of stages (`flows/round/flow.py:coevolution_round`). The test split, its size and the
evaluation seeds come from the run's `evaluation:` section (`split`, `n_instances`, `seeds`,
`bootstrap_samples`); the round evaluates its own pairs (M_t and the expert on h0 and h*_t, and the trained
arms), and the optional stage `evaluate_pairs` evaluates the section's `pairs` (any models, adapters and
harnesses side by side: the nightly job, an on-demand evaluation).

`stages` picks which stages run (default: the nine of a co-evolution round, `DEFAULT_STAGES`): the
evaluation-only job is [evaluate_h0, attribute, report] (deploy/configs/local_eval.yaml); a config without
`round:` is the round [evaluate_pairs, attribute, report] (`PAIRS_STAGES`; attribute when `attribution:` is
on). A round without `evolve` has no search: h*_t is its start harness (an imitation-only round trains on h0).
`NEEDS` says what each stage reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from correction.locators.base import parse_locator
from correction.selectors.base import parse_selector
from flows.placement import PlacementSettings
from harness.evolution import parse_strategy
from tasks.base import SPLIT_RANGES

Arm = Literal["imit_h0", "imit", "corr", "self"]
ARMS: tuple[Arm, ...] = ("imit_h0", "imit", "corr", "self")
ARM_SUFFIX: dict[str, str] = {"imit_h0": "imit-h0", "imit": "imit", "corr": "corr", "self": "self"}
VAL_INSTANCES = len(SPLIT_RANGES["val"])  # per family (20-39): the search validates on the first, the gate on the rest
STAGES: list[str] = ["evaluate_pairs", "evaluate_h0", "evolve", "evaluate_h_star", "arm_data", "train",
                     "evaluate_arms", "attribute", "gate", "report"]
DEFAULT_STAGES: list[str] = [s for s in STAGES if s != "evaluate_pairs"]  # the co-evolution round
PAIRS_STAGES: list[str] = ["evaluate_pairs", "attribute", "report"]  # a config without `round:`
# What a stage reads from the stages before it: a round that runs a subset (`round.stages`) must include these.
NEEDS: dict[str, tuple[str, ...]] = {
    "evaluate_h_star": ("evolve",), "train": ("arm_data",), "evaluate_arms": ("train",),
    "gate": ("train",), "report": ()}
# Stages that call M_t or the expert role (a round of evaluate_pairs, attribute and report needs neither).
ROLE_STAGES: frozenset[str] = frozenset(DEFAULT_STAGES) - {"attribute", "report"}


class SearchSettings(BaseModel):
    """The harness search per family (flows/evolution.py), around M_t, from the round's start harness."""

    model_config = ConfigDict(extra="forbid")

    reflector: str = Field(default="library", description="'library' or 'llm:MODEL' (options from the `reflector` "
                                                          "role when the run defines one).")
    seeds: int = Field(default=3, ge=1, description="Search seeds; h*_t = the best validation mean over them.")
    budget_rollouts: int = Field(default=60, ge=1, description="Evaluations per search seed (GEPA max_metric_calls).")
    budget_reflector_usd: float | None = Field(default=None, gt=0, description="Reflector dollars per search seed.")
    minibatch_size: int = Field(default=3, ge=1, description="Train items per reflection minibatch.")
    minibatch_sampler: Literal["epoch", "informative"] = Field(
        default="epoch", description="'epoch' (GEPA's) or 'informative' (toward instances whose score varied).")
    max_edits: int = Field(default=2, ge=1, description="At most this many typed edits in one proposal.")
    train_instances: int | None = Field(default=None, gt=0, description="First N train instances; null = all 20.")
    val_instances: int | None = Field(default=10, gt=0, le=20, description="First N val instances (null = all 20); "
                                      "the promotion gate judges on val instances after these, never on them.")
    train_seeds: int = Field(default=1, ge=1, description="Rollout seeds per train instance.")
    val_seeds: int = Field(default=1, ge=1, description="Rollout seeds per val instance.")

    @field_validator("reflector")
    @classmethod
    def _known(cls, v: str) -> str:
        name, _ = parse_strategy(v)
        if name not in ("library", "llm"):
            raise ValueError(f"unknown reflector '{v}'; use library or llm:MODEL")
        return v

    @model_validator(mode="after")
    def _budget_pays_one_iteration(self) -> "SearchSettings":
        need = (self.val_instances or 20) * self.val_seeds + 2 * self.minibatch_size
        if self.budget_rollouts < need:
            raise ValueError(f"budget_rollouts {self.budget_rollouts} cannot pay for one validation pass and one "
                             f"iteration (2 x minibatch {self.minibatch_size}); give at least {need}")
        return self


class DataSettings(BaseModel):
    """The training split's rollouts the arms are built from (never val or test)."""

    model_config = ConfigDict(extra="forbid")

    instances: int | None = Field(default=None, gt=0, le=20, description="First N train instances per family; "
                                  "null = all 20.")
    expert_seeds: int = Field(default=1, ge=1, description="Expert rollouts per train instance (imitation arms).")
    student_samples: int = Field(default=3, ge=1, description="K samples of M_t per train instance under the "
                                 "harness (the correction arm's failures; own successes for every arm).")
    corrections: int = Field(default=400, ge=0, description="At most this many corrections (paper: ~400).")
    self_successes: int = Field(default=50, ge=0, description="At most this many own successes per arm (paper: ~50).")


class CorrectionSettings(BaseModel):
    """The correction arm (flows/round/correct.py); the expert is the round's expert role."""

    model_config = ConfigDict(extra="forbid")

    expert: str | None = Field(default=None, description="Who rewrites t*: a role name under `models` or a model "
                               "string; null = the round's `expert` role (which always does imitation and "
                               "evaluation). An expert asked to repair one turn should repair it in the student's "
                               "form: the embedded default uses the SIMULATED showwork/{family} here "
                               "(showwork/{family}@flag for M1, which learned the policies' flag programs).")
    suffix: Literal["none", "replay", "original"] = Field(
        default="none", description="What a training row holds after t*: none | replay (the student's continuation "
        "in the chosen candidate's best replay) | original (the failing rollout's own turns); docs/correction.md.")
    loss_on: Literal["corrected", "all_student"] = Field(
        default="corrected", description="corrected (the corrected turn only) | all_student (and every student "
        "turn kept; a suffix from a replay that did not pass carries no loss).")
    keep: Literal["controlled", "improved", "any"] = Field(
        default="controlled", description="controlled: keep a correction only when the chosen candidate's decision "
        "replays (seeds the selection did not use) score above the control's, the student's own turn t* resampled "
        "from the same prefix with the same seeds; improved (the rule before): when the chosen candidate's mean "
        "replay score exceeds the failing rollout's score; any: keep every chosen candidate.")
    locator: str = Field(default="counterfactual", description="counterfactual | divergence | mle_agent:MODEL")
    locator_expert: str = Field(default="oracle/{family}", description="Continues prefixes for the counterfactual: "
                                "a role name under `models` or a model string.")
    selector: str = Field(default="verifier_replay", description="verifier_replay | judge:MODEL")
    n: int = Field(default=3, ge=1, description="Expert candidates per t*.")
    replays: int = Field(default=2, ge=1, description="Student continuations per candidate (verifier_replay).")
    extra_turns: int = Field(default=30, ge=1, description="Turns a continuation (a locator's or a replay's) may "
                             "run past its prefix.")
    mode: Literal["single_turn", "suffix"] = Field(
        default="single_turn", description="single_turn (the expert rewrites t* only) | suffix (also the expert's "
        "turns t*..t*+m, when they let the student do better than the single turn).")
    concurrency: int = Field(default=8, ge=1, description="Failing rollouts corrected at once; their episodes run "
                             "on the round's Ray pool, which bounds what is in flight per server.")

    @field_validator("locator")
    @classmethod
    def _locator(cls, v: str) -> str:
        parse_locator(v)
        return v

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: str) -> str:
        parse_selector(v)
        return v


class GateSettings(BaseModel):
    """The promotion gate: the correction arm's training seeds vs M_t on val instances the search never saw,
    under h*_t (analysis/gate.py; its error rates: docs/correction.md, "The promotion gate's error rates")."""

    model_config = ConfigDict(extra="forbid")

    val_instances: int | None = Field(default=None, gt=0, le=20, description="Val instances per family the gate "
                                      "judges on, taken after the first `search.val_instances` (the ones the search "
                                      "chose h* with); null = every val instance the search does not use.")
    val_seeds: int = Field(default=1, ge=1, description="Sampling seeds per val instance (size them for power: "
                           "benchmarks/gate_power.py).")
    seed_choice: Literal["average", "split"] = Field(
        default="average", description="average: judge the mean over the correction arm's training seeds (instances "
        "and training seeds resampled), then promote the seed with the best validation mean; split: choose the best "
        "seed on half of the val instances, judge it on the other half.")
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0, description="Of the paired bootstrap CI.")
    bootstrap_samples: int = Field(default=2000, ge=100, description="Draws for the paired bootstrap CI.")
    allow_fit_risk: bool = Field(default=False, description="Promote even when the fit monitor flags the adapter.")
    merge: bool = Field(default=True, description="Merge the promoted adapter into the base weights (peft) as "
                                                  "the next round's student `student-r{t+1}`.")
    rule: Literal["gain", "non_inferior"] = Field(
        default="gain", description="'gain': promote only when the paired difference candidate - M_t has its CI "
        "low end above 0 and the fit check passes (otherwise 'not promoted: no gain shown' and the next round "
        "starts from M_t); 'non_inferior': promote unless significantly below M_t (the CI's high end under 0).")


class RoundConfig(BaseModel):
    """One co-evolution round; see the module docstring."""

    model_config = ConfigDict(extra="forbid")

    student: str = Field(default="student", description="Role (under `models`) of M_t: a hosted_vllm model.")
    expert: str = Field(default="expert", description="Role of the expert (imitation data, rewrites, headroom).")
    student_weights: str | None = Field(default=None, description="M_t's weights directory (training base; merged "
                                        "into when promoted); needed when the round trains.")
    temperature: float = Field(default=0.7, ge=0.0, le=2.0, description="Students are sampled at this temperature; "
                               "each evaluation seed is its own sampling seed.")
    start_harness: str = Field(default="baseline", description="Round 0's start harness: 'baseline' (h0) or a "
                               "directory with one <family>.yaml each.")
    index: int = Field(default=0, ge=0, description="t of the first round (adapters are named student@r{t+1}-...).")
    arms: list[Arm] = Field(default_factory=lambda: list(ARMS), description="Trained arms: imit_h0, imit, corr, self "
                            "(the control: exactly the own successes the corr set holds, without its corrections).")
    search: SearchSettings = Field(default_factory=SearchSettings)
    data: DataSettings = Field(default_factory=DataSettings)
    correction: CorrectionSettings = Field(default_factory=CorrectionSettings)
    gate: GateSettings = Field(default_factory=GateSettings)
    budget_usd: float | None = Field(default=None, gt=0, description="Run-level dollars for API roles (expert, "
                                     "reflector, locator, judge): spent -> the round stops cleanly, resumable.")
    placement: PlacementSettings = Field(default_factory=PlacementSettings, description="The train stage's GPUs "
                                         "and what the student's server does while LoRA trains (flows/placement.py)")
    accelerate_config: str | None = Field(default=None, description="accelerate config (relative to the repo "
                                          "root, or absolute): the train stage runs `accelerate launch` with it "
                                          "(multi-GPU or multi-process LoRA; checked by --dry-run against the "
                                          "servers); unset, LoRA trains in the flow's process.")
    stages: list[str] = Field(default_factory=lambda: list(DEFAULT_STAGES), description="The stages this round runs, "
                              "in order (default: the nine of a co-evolution round; `evaluate_pairs`, the "
                              "`evaluation.pairs` side by side, only when listed). A subset must hold what its stages "
                              "read: e.g. the evaluation-only job [evaluate_h0, attribute, report], a search without "
                              "training [evaluate_h0, evolve, evaluate_h_star, attribute, report], or imitation on h0 "
                              "[evaluate_h0, arm_data, train, evaluate_arms, report] with arms [imit_h0] (without "
                              "`evolve`, h*_t is the start harness). A round without `gate` promotes nothing and is the "
                              "run's only round.")
    est_rollout_s: dict[str, float] = Field(default_factory=dict, description="Seconds per rollout by model prefix "
                                            "for the --dry-run estimate (defaults in flows/round/plan.py).")
    stage_timeout_s: dict[str, float] = Field(
        default_factory=dict, description="Wall-clock limit per stage in seconds, e.g. {evolve: 3600}; a stage "
        "past it fails the run (its finished rollouts, searches and LoRA seeds stay; `--resume` continues). "
        "Unset stages have no limit.")

    @field_validator("stage_timeout_s")
    @classmethod
    def _stage_timeouts(cls, v: dict[str, float]) -> dict[str, float]:
        for name, seconds in v.items():
            if name not in STAGES:
                raise ValueError(f"unknown stage '{name}'; stages: {', '.join(STAGES)}")
            if not seconds > 0:
                raise ValueError(f"stage '{name}': timeout must be > 0 seconds, got {seconds}")
        return v

    @field_validator("stages")
    @classmethod
    def _stages(cls, v: list[str]) -> list[str]:
        unknown = [s for s in v if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stage '{unknown[0]}'; stages: {', '.join(STAGES)}")
        if not v or v != [s for s in STAGES if s in v]:
            raise ValueError(f"give the stages once each, in the round's order ({', '.join(STAGES)})")
        for s in v:
            missing = [n for n in NEEDS.get(s, ()) if n not in v]
            if missing:
                raise ValueError(f"'{s}' reads what '{missing[0]}' makes; add '{missing[0]}' (or drop '{s}')")
        if "attribute" in v and not any(s.startswith("evaluate") for s in v):
            raise ValueError("'attribute' needs an evaluation stage (evaluate_pairs, evaluate_h0, evaluate_h_star or "
                             "evaluate_arms)")
        return v

    @property
    def uses_roles(self) -> bool:
        """Whether a stage of this round calls M_t or the expert (so both roles must exist)."""
        return bool(ROLE_STAGES & set(self.stages))

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: list[Arm]) -> list[Arm]:
        if len(set(v)) != len(v):
            raise ValueError(f"arms repeat: {v}")
        if "self" in v and "corr" not in v:
            raise ValueError("'self' trains on exactly the own successes the correction arm adds to its corrections; "
                             "add 'corr' (or drop 'self')")
        return v

    @model_validator(mode="after")
    def _gate_apart_from_search(self) -> "RoundConfig":
        """The gate judges on val instances the search did not choose h* with (no winner's curse)."""
        if "gate" not in self.stages:
            return self
        room = VAL_INSTANCES - (self.search.val_instances or VAL_INSTANCES)
        if room < 1:
            raise ValueError(f"search.val_instances: {self.search.val_instances or 'null (all 20)'} leaves no val "
                             f"instance for the gate, which must judge on instances the search did not choose h* "
                             f"with; give the search at most {VAL_INSTANCES - 1}")
        if self.gate.val_instances is not None and self.gate.val_instances > room:
            raise ValueError(f"gate.val_instances: {self.gate.val_instances} + search.val_instances "
                             f"{self.search.val_instances} > the {VAL_INSTANCES} val instances per family; the gate "
                             f"judges on the ones the search does not use: give at most {room} (null: all {room})")
        return self

    def gate_instances(self) -> tuple[int, int]:
        """(skip, n): the gate's val instances per family are the n after the first `skip` (the search's)."""
        skip = self.search.val_instances or VAL_INSTANCES
        return skip, self.gate.val_instances or (VAL_INSTANCES - skip)


def read_forward_round(raw: dict[str, Any]) -> dict[str, Any]:
    """A `round:` section a run stored before the gate judged on val instances apart from the search's (its `gate`
    has no `seed_choice`): the gate reads forward onto the val instances the search does not use; a search that
    validated on all 20 reads forward onto the first 10 (that run's evolve stage then runs again on resume, its
    cached evaluations reused)."""
    gate, search = raw.get("gate"), raw.get("search")
    if not isinstance(gate, dict) or not isinstance(search, dict) or "seed_choice" in gate:
        return raw
    if (search.get("val_instances") or VAL_INSTANCES) >= VAL_INSTANCES:
        search["val_instances"] = VAL_INSTANCES // 2
    room = VAL_INSTANCES - search["val_instances"]
    if gate.get("val_instances") is not None and gate["val_instances"] > room:
        gate["val_instances"] = None
    return raw


def adapter_name(t: int, arm: str, seed: int) -> str:
    """The served name of one trained arm's seed: student@r{t+1}-imit-h0-s0, ...-imit-s0, ...-corr-s0."""
    return f"student@r{t + 1}-{ARM_SUFFIX[arm]}-s{seed}"
