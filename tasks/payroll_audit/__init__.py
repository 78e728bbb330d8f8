"""payroll_audit: department-level attendance and payroll audit from CSV/XLSX punches, rates and a policy."""

from __future__ import annotations

from tasks.base import Family
from tasks.payroll_audit.env import PayrollAuditEnv


class PayrollAudit(Family):
    name = "payroll_audit"
    description = "Attendance CSV/XLSX + pay rates + policy -> per-department audit table and exception lists."
    env_class = PayrollAuditEnv


__all__ = ["PayrollAudit", "PayrollAuditEnv"]
