"""Prefect flows that wire the stages, the `coevo` CLI and run storage. Nothing imports this package."""
