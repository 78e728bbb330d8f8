"""browser_automation: multi-step UI workflows on the shop-admin app (checked on the database after the
episode) and a test-writing variant (Playwright tests for a generated page), see docs/browser_tasks.md."""

from __future__ import annotations

from tasks.base import Family
from tasks.browser_automation.env import BrowserAutomationEnv


class BrowserAutomation(Family):
    name = "browser_automation"
    description = "Multi-step UI workflows on the shop-admin app (state-checked) and writing Playwright tests for a page."
    env_class = BrowserAutomationEnv


__all__ = ["BrowserAutomation", "BrowserAutomationEnv"]
