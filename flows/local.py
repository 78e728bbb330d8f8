"""Where Prefect keeps its state on one machine, and how runs find the dashboard.

Local by default: Prefect's ephemeral API with SQLite under `<repo>/.cache/prefect` (PREFECT_HOME), never
the user's global ~/.prefect. `coevo dashboard` starts `prefect server` on 127.0.0.1 with the same
PREFECT_HOME and records its URL in `<PREFECT_HOME>/coevo-dashboard.json`; a later `coevo run` without
PREFECT_API_URL finds that file and reports to the running server, so the run shows up live.

Prefect reads its settings once, at import: call `configure_prefect_env()` before anything imports prefect.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = REPO_ROOT / ".cache" / "prefect"
DASHBOARD_FILE = "coevo-dashboard.json"
log = logging.getLogger(__name__)


def prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or DEFAULT_HOME)


def dashboard_url(home: Path | None = None) -> str | None:
    """The URL of a running `coevo dashboard` for this PREFECT_HOME, if it answers."""
    f = (home or prefect_home()) / DASHBOARD_FILE
    if not f.exists():
        return None
    try:
        url = json.loads(f.read_text())["url"]
        ok = httpx.get(f"{url}/api/health", timeout=2.0).status_code == 200
    except (OSError, ValueError, KeyError, httpx.HTTPError):
        return None
    return url if ok else None


def configure_prefect_env() -> str:
    """Set PREFECT_HOME (if unset) and PREFECT_API_URL (if a dashboard is up); returns a one-line description."""
    if "prefect" in sys.modules:
        log.warning("prefect was imported before its environment was set; it keeps the settings it read then")
    os.environ.setdefault("PREFECT_HOME", str(DEFAULT_HOME))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # The server's telemetry heartbeat (a docket task that phones Prefect; this machine is offline anyway)
    # writes its session row into the SQLite database at server start, racing the other startup writers: on a
    # fresh PREFECT_HOME it lost with `sqlite3.OperationalError: database is locked` and printed a traceback
    # before the first flow ran. Off unless the user turned it on.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    home = prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    if os.environ.get("PREFECT_API_URL"):
        return f"Prefect API {os.environ['PREFECT_API_URL']}"
    url = dashboard_url(home)
    if url:
        os.environ["PREFECT_API_URL"] = f"{url}/api"
        return f"Prefect dashboard {url} (runs show there live)"
    return f"Prefect local (ephemeral API, SQLite under {home}); `coevo dashboard` shows the runs"


def server_env(host: str, port: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `prefect server start --host HOST --port PORT` whose UI calls this same server.

    `prefect server start --port N` binds the API to N but leaves the settings it derives the UI's API URL
    from (PREFECT_SERVER_UI_API_URL, else PREFECT_API_URL, else http://PREFECT_SERVER_API_HOST:
    PREFECT_SERVER_API_PORT/api, i.e. port 4200) alone, so a UI on any other port called :4200 and showed
    "Can't connect to Server API". The server must not point at another API either (PREFECT_API_URL).
    """
    env = dict(os.environ if base is None else base)
    for stale in ("PREFECT_API_URL", "PREFECT_UI_API_URL"):
        env.pop(stale, None)
    env.update(PREFECT_SERVER_API_HOST=host, PREFECT_SERVER_API_PORT=str(port),
               PREFECT_SERVER_UI_API_URL=f"http://{host}:{port}/api")
    return env


def write_dashboard_file(url: str, pid: int, home: Path | None = None) -> Path:
    f = (home or prefect_home()) / DASHBOARD_FILE
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"url": url, "pid": pid}))
    return f
