"""The `coevo` command line: `app` (flows/cli/app.py) and one module per command group."""

from flows.cli.app import app

__all__ = ["app"]
