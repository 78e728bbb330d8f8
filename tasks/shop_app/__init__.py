"""The shop-admin web application both browser families serve, one copy per environment."""

from tasks.shop_app.app import ShopApp
from tasks.shop_app.data import Shop, dump_tables, generate_shop, money, write_db
from tasks.shop_app.server import ShopServer

__all__ = ["Shop", "ShopApp", "ShopServer", "dump_tables", "generate_shop", "money", "write_db"]
