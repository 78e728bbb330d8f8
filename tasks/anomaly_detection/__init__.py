"""anomaly_detection: find out-of-range sensor readings in a SQLite warehouse and upload a CSV report."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.anomaly_detection import data, oracle, verify
from tasks.anomaly_detection.env import AnomalyDetectionEnv
from tasks.base import Draft, Environment, Family
from tasks.records import FinalAnswer, Step, ToolCall


class AnomalyDetection(Family):
    name = "anomaly_detection"
    description = "Query a read-only sensor warehouse for out-of-range readings in a window; upload a CSV report."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = AnomalyDetectionEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)


__all__ = ["AnomalyDetection", "AnomalyDetectionEnv"]
