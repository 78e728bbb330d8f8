"""website_admin: WebArena shopping-admin style questions and edits over the shop-admin web app, through
browser tools in headless Chromium (see docs/browser_tasks.md)."""

from __future__ import annotations

from tasks.base import Family
from tasks.website_admin.env import WebsiteAdminEnv


class WebsiteAdmin(Family):
    name = "website_admin"
    description = "Shop-admin web app in headless Chromium: answer questions (reports, orders, reviews) and make edits."
    env_class = WebsiteAdminEnv


__all__ = ["WebsiteAdmin", "WebsiteAdminEnv"]
