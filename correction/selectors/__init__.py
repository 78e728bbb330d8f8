"""Selectors: strategies that pick one of the expert's candidates for t* (protocol in `base.py`)."""

from correction.selectors.base import Selection, Selector, make_selector

__all__ = ["Selection", "Selector", "make_selector"]
