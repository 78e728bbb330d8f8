"""`python -m flows.cli ...` runs the `coevo` command line."""

from flows.cli.app import app

app()
