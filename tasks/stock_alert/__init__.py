"""stock_alert: low-stock products -> a spreadsheet and one templated email per product."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Draft, Environment, Family
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.stock_alert import data, oracle, verify
from tasks.stock_alert.env import StockAlertEnv


class StockAlert(Family):
    name = "stock_alert"
    description = "Find low-stock products in an inventory service, list them in a sheet, email each supplier."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = StockAlertEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)


__all__ = ["StockAlert", "StockAlertEnv"]
