"""One fault menu per task family (`MENU` in agents/flawed/families/<family>.py)."""

from __future__ import annotations

import importlib

from agents.flawed.menu import FamilyMenu


def menu_for(family: str) -> FamilyMenu:
    """The family's menu; a family without a module of its own gets only the generic faults."""
    try:
        module = importlib.import_module(f"agents.flawed.families.{family}")
    except ModuleNotFoundError as e:
        if e.name != f"agents.flawed.families.{family}":
            raise
        return FamilyMenu(family=family)
    menu: FamilyMenu = module.MENU
    return menu
