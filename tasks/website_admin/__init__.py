"""website_admin: WebArena shopping-admin style questions and edits over the shop-admin web app, through
browser tools in headless Chromium (see docs/browser_tasks.md)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Draft, Environment, Family
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.runtime.volatile import normalize_browser_output
from tasks.website_admin import data, oracle, verify
from tasks.website_admin.env import WebsiteAdminEnv


class WebsiteAdmin(Family):
    name = "website_admin"
    description = "Shop-admin web app in headless Chromium: answer questions (reports, orders, reviews) and make edits."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = WebsiteAdminEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)

    def normalize_result(self, tool: str, content: str) -> str:
        return normalize_browser_output(content)


__all__ = ["WebsiteAdmin", "WebsiteAdminEnv"]
