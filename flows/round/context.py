"""What every stage of a round reads: the run config, the round's own store, its start state, the servers.

A round lives in `runs/<run_id>/rounds/r<t>/` (a `RunStore` of its own: trajectories, harnesses, datasets,
adapters, evolution, reports, state.json of its stages); the run directory keeps the config, the lock, the
run summary and the promotion registry's view.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.records import ModelRole, ToolChoice
from flows.config import RunConfig
from flows.round.config import RoundConfig
from flows.store import RunStore


class RoundState(BaseModel):
    """Where round t starts: M_t (served name and weights) and the harness its search starts from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    t: int = Field(ge=0)
    student_model: str = Field(description="LiteLLM string of M_t, e.g. hosted_vllm/tiny or hosted_vllm/student-r1.")
    student_weights: str = Field(description="M_t's weights directory (absolute); '' when the round trains nothing "
                                 "and names none.")
    start_harness: str = Field(description="'baseline' or a directory of <family>.yaml (h*_{t-1}), absolute.")


class PairPlan(BaseModel):
    """One (model, harness) pair a stage evaluates: a name (also its store directory), a role, a harness."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.+-]+$")
    role: ModelRole
    harness: str = Field(description="'baseline' or a harness directory (absolute).")
    label: str = Field(description="The report's row label, e.g. 'M_t h*'.")
    tool_choice: ToolChoice | None = Field(default=None, description="Passed to every model call of the pair.")


@dataclass
class RoundContext:
    config: RunConfig
    store: RunStore
    base: Path
    state: RoundState
    servers: Any = None  # flows.servers.ModelServers of the round (None in --dry-run)
    stopped: str = ""  # why the round stopped after its search (flows/round/next.py `search_repeats`), or ''

    @property
    def r(self) -> RoundConfig:
        return self.config.round

    @property
    def t(self) -> int:
        return self.state.t

    def student(self, adapter: str | None = None) -> ModelRole:
        """M_t (or one of its adapters), sampled at the round's temperature."""
        base = self.config.models[self.r.student]
        model = f"hosted_vllm/{adapter}" if adapter else self.state.student_model
        return base.model_copy(update={"model": model, "temperature": self.r.temperature})

    def expert(self) -> ModelRole:
        return self.config.models[self.r.expert]

    def correction_expert(self) -> ModelRole:
        """Who rewrites t*: `round.correction.expert` (a role name or a model string), else the round's expert."""
        return correction_expert(self.config)

    @property
    def h_star_dir(self) -> Path:
        return self.store.root / "h_star"

    def families(self) -> list[str]:
        return self.config.family_names()

    def student_server(self) -> str | None:
        """Name of the run-managed server of M_t, if any (adapters are then reloaded when it restarts)."""
        spec = self.config.server_for(self.config.models[self.r.student])
        return spec.name if spec else None


def round_store(run_root: Path, t: int) -> RunStore:
    return RunStore(run_root / "rounds", f"r{t}")


def correction_expert(config: RunConfig) -> ModelRole:
    """`round.correction.expert` as a role (a name under `models` or a model string), else the round's expert."""
    r = config.round
    spec = r.correction.expert
    return (config.models.get(spec) or ModelRole(model=spec)) if spec else config.models[r.expert]
