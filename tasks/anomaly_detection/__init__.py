"""anomaly_detection: find out-of-range sensor readings in a SQLite warehouse and upload a CSV report."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.anomaly_detection.data import generate_payload, instruction
from tasks.anomaly_detection.env import AnomalyDetectionEnv
from tasks.anomaly_detection.oracle import next_action
from tasks.base import Environment, Family, instance_seed
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall


class AnomalyDetection(Family):
    name = "anomaly_detection"
    description = "Query a read-only sensor warehouse for out-of-range readings in a window; upload a CSV report."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        rng = random.Random(instance_seed(self.name, index))
        difficulty = self.difficulties[index % 2]
        payload = generate_payload(rng, hard=difficulty == "hard")
        return self.new_instance(index, instruction=instruction(payload), difficulty=difficulty,
                                 payload=payload.model_dump())

    def make_env(self, instance: TaskInstance) -> AnomalyDetectionEnv:
        return AnomalyDetectionEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        if not isinstance(env, AnomalyDetectionEnv):
            raise TypeError(f"anomaly_detection oracle needs an AnomalyDetectionEnv, got {type(env).__name__}")
        return next_action(env)


__all__ = ["AnomalyDetection", "AnomalyDetectionEnv"]
