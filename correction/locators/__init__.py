"""Locators: strategies that name the failing turn t* of a failing rollout (protocol in `base.py`)."""

from correction.locators.base import Locator, make_locator

__all__ = ["Locator", "make_locator"]
