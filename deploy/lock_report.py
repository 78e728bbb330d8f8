"""Turn a `pip install --dry-run --report` resolution into a lock file (`name==version` per line, sorted).

    python deploy/lock_report.py REPORT.json OUT.lock --header "line" --header "line"

`make lock-gpu` uses it for requirements-vllm-gpu.lock: the CUDA build of vLLM resolved from PyPI with no GPU and
nothing installed (pip reads the wheels' metadata only). Refuses a resolution that took a local file (a wheel
from a machine's find-links, e.g. the CPU torch) instead of the package index.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def lock_lines(report: dict) -> list[str]:
    """`name==version` for every package the resolution would install; ValueError naming a local-file pick."""
    local = [i["metadata"]["name"] for i in report["install"] if i["download_info"]["url"].startswith("file:")]
    if local:
        raise ValueError(f"resolved from local files, not the package index: {', '.join(sorted(local))} "
                         "(unset PIP_FIND_LINKS and any pip.conf find-links)")
    return sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", type=Path, help="pip's --report JSON.")
    ap.add_argument("out", type=Path, help="The lock file to write.")
    ap.add_argument("--header", action="append", default=[], help="A comment line for the top (repeatable).")
    args = ap.parse_args()
    report = json.loads(args.report.read_text())
    env = report["environment"]
    lines = [f"# {h}" for h in args.header]
    lines.append(f"# Resolved by pip {report['pip_version']} for Python {env['python_full_version']} on "
                 f"{env['sys_platform']} {env['platform_machine']}.")
    args.out.write_text("\n".join(lines + lock_lines(report)) + "\n")


if __name__ == "__main__":
    main()
