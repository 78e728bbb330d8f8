"""browser_automation: multi-step UI workflows on the shop-admin app (checked on the database after the
episode) and a test-writing variant (Playwright tests for a generated page), see docs/browser_tasks.md."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Draft, Environment, Family
from tasks.browser_automation import data, oracle, verify
from tasks.browser_automation.env import BrowserAutomationEnv
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.runtime.volatile import normalize_browser_output


class BrowserAutomation(Family):
    name = "browser_automation"
    description = "Multi-step UI workflows on the shop-admin app (state-checked) and writing Playwright tests for a page."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = BrowserAutomationEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)

    def normalize_result(self, tool: str, content: str) -> str:
        return normalize_browser_output(content)


__all__ = ["BrowserAutomation", "BrowserAutomationEnv"]
