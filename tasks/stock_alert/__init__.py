"""stock_alert: low-stock products -> a spreadsheet and one templated email per product."""

from __future__ import annotations

from tasks.base import Family
from tasks.stock_alert.env import StockAlertEnv


class StockAlert(Family):
    name = "stock_alert"
    description = "Find low-stock products in an inventory service, list them in a sheet, email each supplier."
    env_class = StockAlertEnv


__all__ = ["StockAlert", "StockAlertEnv"]
