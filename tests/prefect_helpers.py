"""What the flow tests share: an ephemeral Prefect server, the CLI invoked in-process, vLLM's request counter."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from typer.testing import CliRunner

from flows.cli import app


@contextmanager
def prefect_server() -> Iterator[str]:
    """An ephemeral Prefect server for the `with` block, yielding its API URL (startup takes 10-75 s here)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=240):
        yield str(PREFECT_API_URL.value())


def reset_prefect_logging() -> None:
    """Prefect's console handler keeps the stderr it saw at setup; CliRunner closes its own after each invoke."""
    from prefect.logging.configuration import setup_logging

    setup_logging(incremental=False)


def invoke(args: list[str]):  # noqa: ANN201 - click's Result
    """`coevo ARGS` in this process, Prefect's logging reset before and after it."""
    reset_prefect_logging()
    result = CliRunner().invoke(app, args)
    reset_prefect_logging()
    return result


def vllm_requests(api_base: str) -> float:
    """Finished requests the server has counted (its Prometheus counter), all labels summed."""
    text = httpx.get(api_base.removesuffix("/v1") + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))
