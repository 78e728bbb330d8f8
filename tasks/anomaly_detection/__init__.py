"""anomaly_detection: find out-of-range sensor readings in a SQLite warehouse and upload a CSV report."""

from __future__ import annotations

from tasks.base import ServiceFamily
from tasks.anomaly_detection import data, oracle
from tasks.anomaly_detection.env import AnomalyDetectionEnv


class AnomalyDetection(ServiceFamily):
    name = "anomaly_detection"
    description = "Query a read-only sensor warehouse for out-of-range readings in a window; upload a CSV report."
    env_class = AnomalyDetectionEnv
    generate_payload = staticmethod(data.generate_payload)
    instruction = staticmethod(data.instruction)
    next_action = staticmethod(oracle.next_action)


__all__ = ["AnomalyDetection", "AnomalyDetectionEnv"]
