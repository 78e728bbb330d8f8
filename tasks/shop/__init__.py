"""The shop-admin web application both browser families serve, one copy per environment."""

from tasks.shop.app import ShopApp
from tasks.shop.data import Shop, dump_tables, generate_shop, money, write_db
from tasks.shop.server import ShopServer

__all__ = ["Shop", "ShopApp", "ShopServer", "dump_tables", "generate_shop", "money", "write_db"]
