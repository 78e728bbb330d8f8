"""`coevo dashboard` and `coevo nightly`: the operations commands (docs/operations.md).

    coevo dashboard [--port N] [--host H]                   # Prefect UI + API on 127.0.0.1:N (same local database)
    coevo nightly [--runs-dir runs] [--config FILE]         # evaluate the promoted pairs, flag regressions

Prefect is imported only inside the commands, after `flows.local.configure_prefect_env()`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from flows.local import (AUTH_CLIENT_VAR, AUTH_SERVER_VAR, DASHBOARD_FILE, configure_prefect_env, local_address,
                         server_env, write_dashboard_file)

console = Console(soft_wrap=True)
HOST = "127.0.0.1"


def dashboard(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port (UI and API).")] = 4200,
    host: Annotated[str, typer.Option(help="Address to bind. Anything but loopback needs Prefect's API auth string "
                                           f"in {AUTH_SERVER_VAR} (user:password): every API request must then "
                                           "carry it (docs/operations.md).")] = HOST,
) -> None:
    """Start the Prefect UI/API on 127.0.0.1 (or --host) over the project's local database; Ctrl-C stops it."""
    from deploy.vllm_server import is_loopback
    from flows.cli.options import fail

    auth = os.environ.get(AUTH_SERVER_VAR) or None
    if not is_loopback(host) and auth is None:
        fail(f"--host {host}: a dashboard on a non-loopback address needs Prefect's API auth string: set "
             f"{AUTH_SERVER_VAR}=user:password (clients: {AUTH_CLIENT_VAR}), or keep --host {HOST}")
    if auth is not None and ":" not in auth:
        fail(f"{AUTH_SERVER_VAR}: the auth string is user:password (the UI asks for it whole)")
    os.environ.pop("PREFECT_API_URL", None)  # the server itself must not point at another API
    configure_prefect_env()
    home = os.environ["PREFECT_HOME"]
    url = f"http://{local_address(host)}:{port}"
    prefect_bin = Path(sys.executable).parent / "prefect"
    cmd = [str(prefect_bin), "server", "start", "--host", host, "--port", str(port)]
    env = server_env(host, port)
    if auth is not None:
        env[AUTH_CLIENT_VAR] = auth  # the server's own clients (its background services) call its API too
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    write_dashboard_file(url, proc.pid, auth=auth is not None)
    console.print(f"Prefect dashboard: [bold]{url}[/]  (PREFECT_HOME={home}, bound to {host}"
                  + (", API auth string required)" if auth else ")"))
    console.print(f"runs started from this checkout report there while it is up; elsewhere: export PREFECT_API_URL={url}/api"
                  + (f" and {AUTH_CLIENT_VAR}" if auth else ""))

    def _stop(signum: int, frame: object) -> None:  # SIGTERM/SIGHUP: take the server (its own session) down too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        (Path(home) / DASHBOARD_FILE).unlink(missing_ok=True)
    raise typer.Exit(code)


def nightly(
    runs_dir: Annotated[str, typer.Option(help="The runs directory whose promotion registry (registry.sqlite) is read.")] = "runs",
    config: Annotated[Path, typer.Option(help="Run config supplying scale, limits and serving for the evaluation.")]
    = Path("deploy/configs/local.yaml"),
    night: Annotated[Optional[str], typer.Option(help="The night's label (default: today, UTC, YYYY-MM-DD).")] = None,
) -> None:
    """Evaluate the promoted (student, harness) pairs on the test split; exit 3 on a regression.

    Reads the promotion registry under --runs-dir, evaluates each family's current pair, records the scores
    and compares each with the same pair's previous night (rule: flows/ops/nightly.py, docs/operations.md).
    """
    from flows.cli.options import fail
    from flows.config import ConfigError, load_config

    if not Path(runs_dir).is_dir():
        fail(f"--runs-dir: no directory {runs_dir} (the runs directory whose registry.sqlite lists the promotions)")
    where = configure_prefect_env()  # before flows.ops.nightly imports prefect (it reads its settings at import)
    from flows.ops.nightly import check_night, nightly_evaluation

    try:
        check_night(night)
    except ValueError as e:
        fail(f"--night: {e}")
    try:
        load_config(config)
    except ConfigError as e:
        fail(f"--config: {e}")
    console.print(where)
    report = nightly_evaluation(runs_dir=runs_dir, config_path=str(config), night=night, fail_on_regression=False)
    for p in report.pairs:
        prev = "first night" if p.previous_mean is None else f"previous {p.previous_mean:.3f} ({p.previous_night})"
        flag = "[red]REGRESSION[/]" if p.regression else "ok"
        sim = " (SIMULATED)" if p.student.startswith("flawed/") else ""
        console.print(f"{p.family}: {p.student}{sim} x {p.harness_id}: {p.mean:.3f} over {p.n}; {prev}; {flag}")
    if not report.pairs:
        console.print(f"no promoted pair in {Path(runs_dir) / 'registry.sqlite'}: nothing evaluated")
    for link in report.links:
        if link.diff is not None:
            console.print(f"{link.family}: tonight - {link.previous_night} {100 * link.diff:+.1f} pp "
                          f"[{100 * link.ci_low:+.1f}, {100 * link.ci_high:+.1f}] on {link.units} units "  # type: ignore[operator]
                          f"({link.command} --runs-dir {runs_dir})", markup=False, highlight=False)
    console.print(f"report: {report.report_path}")
    if report.comparison_path:
        console.print(f"compared with the previous night: {report.comparison_path}")
    if report.regressions:
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)
    app.command("nightly")(nightly)
