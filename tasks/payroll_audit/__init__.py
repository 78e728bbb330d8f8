"""payroll_audit: department-level attendance and payroll audit from CSV/XLSX punches, rates and a policy."""

from tasks.payroll_audit.family import PayrollAudit

__all__ = ["PayrollAudit"]
