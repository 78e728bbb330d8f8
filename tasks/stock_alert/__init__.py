"""stock_alert: low-stock products -> a spreadsheet and one templated email per product."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Environment, Family, instance_seed
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall
from tasks.stock_alert.data import generate_payload, instruction
from tasks.stock_alert.env import StockAlertEnv
from tasks.stock_alert.oracle import next_action


class StockAlert(Family):
    name = "stock_alert"
    description = "Find low-stock products in an inventory service, list them in a sheet, email each supplier."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        rng = random.Random(instance_seed(self.name, index))
        difficulty = self.difficulties[index % 2]
        payload = generate_payload(rng, hard=difficulty == "hard")
        return self.new_instance(index, instruction=instruction(payload), difficulty=difficulty,
                                 payload=payload.model_dump())

    def make_env(self, instance: TaskInstance) -> StockAlertEnv:
        return StockAlertEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        if not isinstance(env, StockAlertEnv):
            raise TypeError(f"stock_alert oracle needs a StockAlertEnv, got {type(env).__name__}")
        return next_action(env)


__all__ = ["StockAlert", "StockAlertEnv"]
