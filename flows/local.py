"""Where Prefect keeps its state on one machine, and how runs find the dashboard.

Local by default: Prefect's ephemeral API with SQLite under `<repo>/.cache/prefect` (PREFECT_HOME), never
the user's global ~/.prefect. `coevo dashboard` starts `prefect server` on 127.0.0.1 (or `--host`) with the same
PREFECT_HOME and records its URL in `<PREFECT_HOME>/coevo-dashboard.json`; a later `coevo run` without
PREFECT_API_URL finds that file and reports to the running server, so the run shows up live. A dashboard that
requires Prefect's API auth string (PREFECT_SERVER_API_AUTH_STRING, needed off loopback) is used only by a run
that has the client's PREFECT_API_AUTH_STRING; others stay on the local ephemeral API and say why.

Prefect reads its settings once, at import: call `configure_prefect_env()` before anything imports prefect.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = REPO_ROOT / ".cache" / "prefect"
DASHBOARD_FILE = "coevo-dashboard.json"
AUTH_SERVER_VAR = "PREFECT_SERVER_API_AUTH_STRING"  # the server's (Prefect's setting server.api.auth_string)
AUTH_CLIENT_VAR = "PREFECT_API_AUTH_STRING"  # a client's (api.auth_string): the same user:password
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
log = logging.getLogger(__name__)


def prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or DEFAULT_HOME)


def dashboard_info(home: Path | None = None) -> dict | None:
    """`{"url", "pid", "auth"}` of a running `coevo dashboard` for this PREFECT_HOME, if it answers."""
    f = (home or prefect_home()) / DASHBOARD_FILE
    if not f.exists():
        return None
    try:
        info = json.loads(f.read_text())
        ok = httpx.get(f"{info['url']}/api/health", timeout=2.0).status_code == 200  # health needs no auth
    except (OSError, ValueError, KeyError, TypeError, httpx.HTTPError):
        return None
    return info if ok else None


def dashboard_url(home: Path | None = None) -> str | None:
    """The URL of a running `coevo dashboard` for this PREFECT_HOME, if it answers."""
    info = dashboard_info(home)
    return info["url"] if info else None


def local_address(host: str) -> str:
    """How a process on this machine reaches a server bound to `host` (a wildcard bind: over loopback)."""
    if host in WILDCARD_HOSTS:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


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
    info = dashboard_info(home)
    if info and info.get("auth") and not os.environ.get(AUTH_CLIENT_VAR):
        return (f"Prefect local (ephemeral API, SQLite under {home}): the dashboard {info['url']} requires the API "
                f"auth string and {AUTH_CLIENT_VAR} is not set")
    if info:
        os.environ["PREFECT_API_URL"] = f"{info['url']}/api"
        return f"Prefect dashboard {info['url']} (runs show there live)"
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
    ui_host = host if host not in WILDCARD_HOSTS else socket.getfqdn()  # what a browser elsewhere can reach
    ui_host = f"[{ui_host}]" if ":" in ui_host else ui_host
    env.update(PREFECT_SERVER_API_HOST=host, PREFECT_SERVER_API_PORT=str(port),
               PREFECT_SERVER_UI_API_URL=f"http://{ui_host}:{port}/api")
    return env


def write_dashboard_file(url: str, pid: int, home: Path | None = None, auth: bool = False) -> Path:
    """Where later runs find the dashboard: its URL, pid and whether it requires the API auth string (never the
    string itself)."""
    f = (home or prefect_home()) / DASHBOARD_FILE
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"url": url, "pid": pid, "auth": auth}))
    return f
