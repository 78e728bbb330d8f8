"""Where a round starts: round 0 from the config, round t+1 from round t's gate and h*_t.

Promoted: M_{t+1} is the merged model `student-r{t+1}`, served by the student's server (restarted on the merged
weights, under that name), and its search starts from h*_t. Not promoted: M_t again, also from h*_t.

Not promoted and no edit kept in h*_t in any family (h*_t = the harness round t started from): round t+1 would start
where round t started and, with the same seeds, run the same jobs again. `repeats` says so, and the run stops there.

Not promoted, and round t+1's search from h*_t keeps no edit in any family (h*_{t+1} = h*_t): the rest of round t+1
would build, train and evaluate round t's arms again (same student, same harness, same seeds). `search_repeats`
says so after round t+1's search, and the run stops there, round t+1's search and its evaluations kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.config import ConfigError, RunConfig
from flows.round.context import RoundContext, RoundState
from flows.store import RunStore


def first_state(config: RunConfig, run: RunStore, base: Path) -> tuple[RoundState, RunConfig]:
    r = config.round
    start = "baseline" if r.start_harness == "baseline" else str((base / r.start_harness).resolve())
    student = config.models.get(r.student)
    state = RoundState(t=r.index, student_model=student.model if student else "-",
                       student_weights=str((base / r.student_weights).resolve()) if r.student_weights else "",
                       start_harness=start)
    return state, config


def _first_clause(reason: str) -> str:
    """The gate's decision without its figures (the round's report and summary carry them)."""
    return reason.split(";")[0]


def changed_harness(evolve: dict[str, Any]) -> bool:
    """Whether a search's h* differs from the harness it started from: an accepted edit on the chain that leads to
    h* (`in_h_star`) in some family. An edit accepted on a minibatch and then beaten on validation is not in h*."""
    return any(e.get("in_h_star", True) for f in evolve["families"].values() for e in f["accepted_edits"])


def repeats(ctx: RoundContext) -> str | None:
    """Why round t+1 would repeat round t (not promoted, h*_t = its start harness), or None when it would not."""
    done = ctx.store.done("round")
    if "gate" not in ctx.r.stages or "evolve" not in ctx.r.stages:
        return (f"round {ctx.t} runs only {', '.join(ctx.r.stages)}: without a gate and a search nothing changes "
                f"for round {ctx.t + 1}, so the run stops after round {ctx.t}")
    gate, evolve = done["gate"]["output"], done["evolve"]["output"]
    if gate["promoted"] or changed_harness(evolve):
        return None
    why = _first_clause(gate["reason"])
    return (f"round {ctx.t} changed neither the student (not promoted: {why}) nor the harness (h*_{ctx.t} = its "
            f"start harness in every family): round {ctx.t + 1} would run the same jobs with the same seeds, so the "
            f"run stops after round {ctx.t}")


def search_repeats(ctx: RoundContext, previous: RoundContext | None) -> str | None:
    """After round t's search: why round t's remaining stages would repeat round t-1's (round t-1 not promoted and
    this search kept no edit in any family), or None when they would not (round 0, a promoted M_t, an edit)."""
    if previous is None:
        return None
    gate = previous.store.done("round").get("gate")
    evolve = ctx.store.done("round").get("evolve")
    if gate is None or evolve is None or gate["output"]["promoted"]:
        return None
    if changed_harness(evolve["output"]):
        return None
    t, why = ctx.t, _first_clause(gate["output"]["reason"])
    return (f"round {t}'s search from h*_{t - 1} kept no edit in any family (h*_{t} = h*_{t - 1}) and round {t - 1} "
            f"did not promote ({why}): round {t}'s remaining stages would train and evaluate round {t - 1}'s arms "
            f"again (same student, harness and seeds), so the run stops after round {t}'s search")


def next_round(ctx: RoundContext, run: RunStore) -> tuple[RoundState, RunConfig]:
    done = ctx.store.done("round")
    gate, evolve = done["gate"]["output"], done["evolve"]["output"]
    t = ctx.t
    if not (gate["promoted"] and gate.get("merged_dir")):
        return ctx.state.model_copy(update={"t": t + 1, "start_harness": evolve["h_star_dir"]}), ctx.config
    role = ctx.config.models[ctx.r.student]
    spec = ctx.config.server_for(role)
    if spec is None:
        raise ConfigError(f"round {t + 1}: the promoted student-r{t + 1} must be served by a server the run manages; "
                          f"list M_t's server under `servers` (or run one round at a time)")
    name = f"student-r{t + 1}"
    data = ctx.config.model_dump(mode="json")
    for s in data["servers"]:
        if s["name"] == spec.name:
            s.update(model=gate["merged_dir"], name=name)
    data["models"][ctx.r.student]["model"] = f"hosted_vllm/{name}"
    state = RoundState(t=t + 1, student_model=f"hosted_vllm/{name}", student_weights=gate["merged_dir"],
                       start_harness=evolve["h_star_dir"])
    return state, RunConfig.model_validate(data)
