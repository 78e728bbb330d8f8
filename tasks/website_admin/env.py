"""website_admin environment: the shop-admin app and the browser tools (`tasks.shop.env`), nothing more."""

from __future__ import annotations

from tasks.records import Verdict
from tasks.shop.env import ShopEnvironment
from tasks.website_admin.verify import WebsiteAdminSnapshot, verify


class WebsiteAdminEnv(ShopEnvironment):
    def snapshot(self) -> WebsiteAdminSnapshot:
        return WebsiteAdminSnapshot(tables=self.tables(), answer=self.answer)

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())
