"""Runs a round's stages in order: skip a finished one (same content key), recompute a forced one, record each.

A stage's key chains the run config's fingerprint, the round's start state and the previous stage's key, so a
changed config recomputes from the first stage it touches onwards (cheaply where rollouts are content-keyed).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger
from prefect.flow_engine import FlowRunTimeoutError
from pydantic import BaseModel

from flows import faults
from flows.config import RETIRED
from flows.round import stages as rs
from flows.round.budget import check_budget, spent_usd
from flows.round.config import DEFAULT_STAGES, STAGES
from flows.round.context import RoundContext
from flows.round.costs import stage_usage
from flows.round.data import ArmDataRecord, build_arm_data
from flows.round.gate import GateRecord, gate
from flows.round.reporting import ReportRecord, build_report
from flows.round.train import TrainRecord, serve_adapters, train_arms
from flows.store import content_key

RECORDS: dict[str, type[BaseModel]] = {
    "evaluate_pairs": rs.EvalStage, "evaluate_h0": rs.EvalStage, "evolve": rs.EvolveRecord,
    "evaluate_h_star": rs.EvalStage, "arm_data": ArmDataRecord,
    "train": TrainRecord, "evaluate_arms": rs.EvalStage, "attribute": rs.AttributeRecord, "gate": GateRecord,
    "report": ReportRecord}
# What each stage writes in the round's store (globs): moved aside by --from-stage before it recomputes.
OUTPUTS: dict[str, list[str]] = {
    "evaluate_pairs": ["trajectories/eval/pairs.*"],
    "evaluate_h0": ["trajectories/eval/M_t.h0", "trajectories/eval/expert.h0"],
    "evolve": ["evolution", "h_star", "trajectories/evolve"],
    "evaluate_h_star": ["trajectories/eval/M_t.hstar", "trajectories/eval/expert.hstar",
                        "trajectories/eval/M_t.hstart"],
    "arm_data": ["trajectories/eval/data.*", "trajectories/sets", "trajectories/correction_data", "cache",
                 "datasets/correction_data", "datasets/sets"],
    "train": ["datasets/imit_h0-*", "datasets/imit-*", "datasets/corr-*", "datasets/self-*", "adapters"],
    "evaluate_arms": ["trajectories/eval/imit_h0.*", "trajectories/eval/imit.*", "trajectories/eval/corr.*",
                      "trajectories/eval/self.*"],
    "attribute": ["attributions"],
    "gate": ["trajectories/eval/val.*", "merged"],
    "report": ["reports/report.md"],
}
STATE_STAGE = "round"
NOT_IN_KEY = {"runs_dir", "name", "ray", "servers", "tiny_model"}


class StageTimeout(TimeoutError):
    """A round stage ran past `round.stage_timeout_s[stage]`."""


def fingerprint(ctx: RoundContext) -> str:
    data = ctx.config.model_dump(mode="json", exclude=NOT_IN_KEY)
    for k in ("budget_usd", "est_rollout_s", "accelerate_config", "stage_timeout_s", "placement"):
        data["round"].pop(k, None)
    if data["round"]["stages"] == DEFAULT_STAGES:  # the round before the field existed: same key
        data["round"].pop("stages")
    # the training settings keyed where they lived before their one home moved to the top level: same key
    data["round"]["lora"], data["round"]["length"] = data.pop("lora"), data.pop("length")
    if not data["round"]["lora"].get("target_experts"):  # off = the recipe before the field existed: same key
        data["round"]["lora"].pop("target_experts", None)
    for role in data["models"].values():
        role.pop("api_base", None)
    for section, keys in RETIRED.items():  # keyed with the retired keys at their defaults: same key as before
        target = data if not section else data.get(section)
        if isinstance(target, dict):
            target.update(keys)
    return content_key(data, ctx.state.model_dump())


class StageRunner:
    def __init__(self, ctx: RoundContext, from_stage: str | None = None) -> None:
        self.ctx = ctx
        self.records: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        self.key = fingerprint(ctx)
        if from_stage is not None:
            self.supersede(STAGES[STAGES.index(from_stage):])

    def supersede(self, stages: list[str]) -> None:
        """Move these stages' outputs to `<round>/superseded/<time>/` and forget their records."""
        root = self.ctx.store.root
        aside = root / "superseded" / time.strftime("%Y%m%d-%H%M%S")
        for stage in stages:
            for pattern in OUTPUTS[stage]:
                for path in root.glob(pattern):
                    target = aside / path.relative_to(root)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(path), str(target))
        state = self.ctx.store._state()
        for stage in stages:
            state["stages"].get(STATE_STAGE, {}).pop(stage, None)
        if "arm_data" in stages:
            state["stages"].pop("correction_data", None)
        self.ctx.store._write_state(state)

    def _body(self, name: str) -> Callable[[], BaseModel]:
        ctx, r = self.ctx, self.records
        # without a search (no `evolve` stage) h*_t is the round's start harness
        h_star = lambda: r["evolve"].h_star_dir if "evolve" in r else ctx.state.start_harness  # noqa: E731
        tests = lambda: {k: v for s in ("evaluate_pairs", "evaluate_h0", "evaluate_h_star", "evaluate_arms")  # noqa: E731
                         if s in r for k, v in r[s].pairs.items()}
        bodies: dict[str, Callable[[], BaseModel]] = {
            "evaluate_pairs": lambda: rs.evaluate_config_pairs(ctx),
            "evaluate_h0": lambda: rs.evaluate_base(ctx, "h0", "baseline"),
            "evolve": lambda: rs.evolve(ctx),
            "evaluate_h_star": lambda: rs.evaluate_base(ctx, "hstar", h_star()),
            "arm_data": lambda: build_arm_data(ctx, h_star()),
            "train": lambda: train_arms(ctx, r["arm_data"]),
            "evaluate_arms": lambda: rs.evaluate_arms(ctx, r["train"], h_star()),
            "attribute": lambda: rs.attribute(ctx, tests()),
            "gate": lambda: gate(ctx, h_star(), r["train"]),
            "report": lambda: build_report(ctx, tests(), r.get("evolve"), r.get("attribute"), r.get("gate"),
                                           stage_usage(ctx.store.root, self.log, OUTPUTS), r.get("arm_data")),
        }
        return bodies[name]

    def run(self, name: str) -> BaseModel:
        ctx = self.ctx
        self.key = content_key(name, self.key)
        done = ctx.store.done(STATE_STAGE).get(name)
        run_root = ctx.store.root.parent.parent
        if done is not None and done.get("key") == self.key:
            rec = RECORDS[name].model_validate(done["output"])
            self.log.append({"stage": name, "status": "skipped (finished earlier)", "wall_s": done.get("wall_s"),
                             "cost_usd": done.get("cost_usd")})
        else:
            before = check_budget(run_root, ctx.r.budget_usd, run_root.name)
            t0 = time.monotonic()
            body = self._body(name)
            limit = ctx.r.stage_timeout_s.get(name)
            stage_flow = flow(name=f"round-{name}", flow_run_name=f"r{ctx.t}-{name}", log_prints=True,
                              timeout_seconds=limit)(_call)
            try:
                # through the server scope: a server found dead before or during the stage is restarted once
                # (its adapters reloaded) and the stage runs again, finding its finished rollouts
                rec = ctx.servers.run(name, stage_flow, body) if ctx.servers is not None else stage_flow(body)
            except FlowRunTimeoutError as e:
                raise StageTimeout(f"round {ctx.t}: stage {name} passed its limit of {limit:g} s "
                                   f"(round.stage_timeout_s.{name}); its finished work is kept") from e
            faults.maybe_fail(name, run_root)  # the reliability tests' fault: the stage's work stored, not recorded
            wall, cost = round(time.monotonic() - t0, 1), round(spent_usd(run_root) - before, 4)
            ctx.store.mark_done(STATE_STAGE, name, {"key": self.key, "output": rec.model_dump(mode="json"),
                                                    "wall_s": wall, "cost_usd": cost, "at": time.time()})
            self.log.append({"stage": name, "status": "ran", "wall_s": wall, "cost_usd": cost})
            get_run_logger().info("round %d: %s done in %.0f s", ctx.t, name, wall)
        self.records[name] = rec
        if name == "train":
            serve_adapters(ctx, rec, reload=self.log[-1]["status"] == "ran")
        return rec


def _call(body: Callable[[], BaseModel]) -> BaseModel:
    """A stage's Prefect subflow: runs its body (the records it reads are closed over, not parameters)."""
    return body()
