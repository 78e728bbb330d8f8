"""anomaly_detection: find out-of-range sensor readings in a SQLite warehouse and upload a CSV report."""

from __future__ import annotations

from tasks.anomaly_detection.env import AnomalyDetectionEnv
from tasks.base import Family


class AnomalyDetection(Family):
    name = "anomaly_detection"
    description = "Query a read-only sensor warehouse for out-of-range readings in a window; upload a CSV report."
    env_class = AnomalyDetectionEnv


__all__ = ["AnomalyDetection", "AnomalyDetectionEnv"]
