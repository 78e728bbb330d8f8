"""stock_alert: low-stock products -> a spreadsheet and one templated email per product."""

from __future__ import annotations

from tasks.base import ServiceFamily
from tasks.stock_alert import data, oracle
from tasks.stock_alert.env import StockAlertEnv


class StockAlert(ServiceFamily):
    name = "stock_alert"
    description = "Find low-stock products in an inventory service, list them in a sheet, email each supplier."
    env_class = StockAlertEnv
    generate_payload = staticmethod(data.generate_payload)
    instruction = staticmethod(data.instruction)
    next_action = staticmethod(oracle.next_action)


__all__ = ["StockAlert", "StockAlertEnv"]
