"""One markdown table of the raw results on record: a row per `benchmarks/results/*.json`.

    .venv/bin/python benchmarks/results_index.py            # print the table
    .venv/bin/python benchmarks/results_index.py --write    # put it into benchmarks/README.md, between the markers
    .venv/bin/python benchmarks/results_index.py --check    # exit 1 when the README's table is not what --write writes

Columns: the file (linked), the benchmark (the record's "benchmark", else the file name before its date), the date
(the record's "date", else the YYYY-MM-DD in the file name), the commit (the record's "commit", which
`results_io.save_results` writes; else the commit that added the file to git, marked "(file added)" and kept in
benchmarks/results_added.json, which `--write` extends from `git log`, so `--check` needs no git), the machine
(host and CPUs from the record's "machine"), the load (the 1-minute load average in "machine") and a headline: a
few figures read from the file by a per-benchmark extractor (`EXTRACTORS`), "N records" or its keys for a layout
none knows. Whatever the file does not record reads "not recorded"; no figure comes from anywhere but the file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # results_io sits beside this file: sys.path[0] when run as a script; when imported,
    sys.path.append(str(HERE))  # appended, so that no benchmark script shadows a module of the same name

from results_io import REPO, RESULTS_DIR, git  # noqa: E402

README = REPO / "benchmarks" / "README.md"
ADDED = REPO / "benchmarks" / "results_added.json"  # file -> commit that added it, for records without "commit"
START, END = "<!-- results-index:start -->", "<!-- results-index:end -->"
NOT_RECORDED = "not recorded"
DATE_IN_NAME = re.compile(r"^(?P<stem>.*?)-(?P<date>\d{4}-\d{2}-\d{2})(?:-|$)")
HEADER = ("file", "benchmark", "date", "commit", "machine", "load", "headline")


class Row(NamedTuple):
    file: str
    benchmark: str
    date: str
    commit: str
    machine: str
    load: str
    headline: str


def payload(record: Any) -> Any:
    """What was measured: `results` of a `save_results` record, else the record itself (older layouts)."""
    if isinstance(record, dict) and "benchmark" in record and "results" in record:
        return record["results"]
    return record


def _n(x: Any, digits: int = 2) -> str:
    return f"{float(x):.{digits}f}"


def _browser_rollout(d: dict) -> str:
    """Mean s per rollout per family; an A/B file (`runs`: one full output per run) gives each run's."""
    if "runs" in d:
        runs = d["runs"]
        fams = list(next(iter(runs.values()))["results"]["summary"])
        per = [f"{f} " + "/".join(_n(r["results"]["summary"][f]["mean_s_per_rollout"]) for r in runs.values())
               for f in fams]
        return f"mean s/rollout, runs {'/'.join(runs)}: " + ", ".join(per)
    return "mean s/rollout (s/turn): " + ", ".join(
        f"{f} {_n(s['mean_s_per_rollout'])} ({_n(s['mean_s_per_turn'])})" for f, s in d["summary"].items())


def _client_cpu(d: dict) -> str:
    return "median CPU ms per call: " + ", ".join(f"{k} {_n(v)}" for k, v in d["median_cpu_ms_per_call"].items())


def _correction_ablation(rows: list) -> str:
    """Validation and test score of the candidate per setting (and M_t's validation score when one for all)."""
    parts = [f"{r['variant']} {_n(r['val_corr'], 3)}/{_n(r['test_corr'], 3)}" for r in rows
             if r.get("val_corr") is not None and r.get("test_corr") is not None]
    m_t = {r.get("val_M_t") for r in rows}
    head = f"candidate val/test (M_t val {_n(m_t.pop(), 3)}): " if len(m_t) == 1 and None not in m_t else \
        "candidate val/test: "
    return head + "; ".join(parts) if parts else f"{len(rows)} records"


def _correction_throughput(d: dict) -> str:
    return f"{d['failing']} failing of {d['samples']} samples; " + "; ".join(
        f"{a['arm']} {_n(a['sources_per_min'])} corrected / {_n(a['kept_per_min'])} kept per min" for a in d["arms"])


def _decode_limit(d: dict) -> str:
    """tok/s of the transformers peer and of each vLLM server run, grouped by the server's max_lora_rank."""
    by_rank: dict[Any, list[str]] = {}
    for s in d["server"]:
        label = "base" if s.get("model") == "base" else "LoRA"
        by_rank.setdefault(s.get("max_lora_rank"), []).append(f"{label} {_n(s['tok_s'], 0)}")
    vllm = "; ".join(f"vLLM at max_lora_rank {rank}: " + ", ".join(v) if rank is not None else "vLLM: " + ", ".join(v)
                     for rank, v in by_rank.items())
    peer = f"transformers peer {_n(d['peer']['tok_s'], 0)}; " if d.get("peer") else ""
    return f"batch {len(d['prompt_tokens'])}, tok/s: {peer}{vllm}"


def _evolution(rows: list) -> str:
    """Test score h0 -> h* per family (and the minibatch sampler where recorded); SIMULATED when a row says so."""
    parts = []
    for r in rows:
        sampler = f" ({r['minibatch_sampler']} sampler)" if r.get("minibatch_sampler") else ""
        parts.append(f"{r['family']}{sampler} {_n(r['test_h0'], 3)} -> {_n(r['test_h_star'], 3)}")
    simulated = "simulated student; " if any(r.get("simulated") for r in rows) else ""
    return f"{simulated}test h0 -> h*: " + ", ".join(parts)


def _gpu_check(rows: list) -> str:
    """How many check results passed and failed (others, neither), and the setups that failed."""
    verdicts = [(setup, str(v)) for r in rows for setup, v in r["results"].items()]
    passed = sum(v.startswith("PASS") for _, v in verdicts)
    failed = sum(v.startswith("FAIL") for _, v in verdicts)
    where = sorted({setup for setup, v in verdicts if v.startswith("FAIL")})
    text = f"{len(rows)} checks, {len(verdicts)} results: {passed} PASS, {failed} FAIL"
    text += f" ({'; '.join(where)})" if where else ""
    other = len(verdicts) - passed - failed
    return text + (f", {other} other" if other else "")


def _rollout_throughput(d: dict) -> str:
    return (f"{d['workload']}/{d['transport']}: pool/direct ratio median {d['ratio_median']:g}, "
            f"overhead per turn median {d['overhead_per_turn_ms_median']:g} ms")


def _round_profile(d: dict) -> str:
    """The stages' wall seconds summed, the longest stage and the model seconds per turn."""
    walls = {k: float(v["wall_s"]) for k, v in d["stages"].items()}
    top = max(walls, key=walls.__getitem__)
    return (f"{len(walls)} stages, wall s summed {_n(sum(walls.values()), 0)}; longest {top} {_n(walls[top], 0)} s; "
            f"model s/turn {_n(d['per_turn']['model_s_per_turn'])}")


def _storage(d: dict) -> str:
    return "bytes/trajectory v1 vs v2: " + ", ".join(
        f"{k} {_n(v['bytes_per_trajectory_v1'], 0)} vs {_n(v['bytes_per_trajectory_v2'], 0)} "
        f"({v['ratio_v1_over_v2']:g}x)" for k, v in d.items())


def _train_throughput(d: dict) -> str:
    return "tokens/s: " + ", ".join(f"{k} " + "/".join(_n(r["tokens_per_s"], 0) for r in runs)
                                    for k, runs in d["runs"].items())


def _gate_power(rows: list) -> str:
    """The no-op promotion rate (now and under the rule before) and the power, per simulated validation size."""
    worst = max(rows, key=lambda r: r["null_promoted"])
    best = max(rows, key=lambda r: r["power"])
    b = best["settings"]
    return (f"{len(rows)} sizes: no-op promoted at most {100 * worst['null_promoted']:.1f}% (rule before: up to "
            f"{100 * max(r['legacy_null_promoted'] for r in rows):.1f}%); power for +{100 * b['gain']:.0f} pts up to "
            f"{100 * best['power']:.1f}% at {b['instances']} inst x {b['eval_seeds']} seeds x {b['train_seeds']} "
            f"training seeds ({b['seed_choice']})")


def _written_tests_cost(rows: list) -> str:
    instances = ", ".join(sorted({str(r["instance"]) for r in rows}))
    return (f"{instances}, {len(rows)} repeats: wall s " + ", ".join(_n(r["wall_s"], 1) for r in rows)
            + "; sandboxed CPU s " + ", ".join(_n(r["cpu_s_sandboxed"], 1) for r in rows))


def _seed_determinism(d: dict) -> str:
    """How many seeded requests sampled the same tokens alone twice, and alone against in a batch."""
    a, b = d["alone_twice"], d["alone_vs_batched"]
    return (f"{a['identical']}/{a['of']} identical alone twice, {b['identical']}/{b['of']} alone vs with "
            f"{d['beside']} beside ({d['new_tokens']} tokens, T=0.7)")


EXTRACTORS: dict[str, Callable[[Any], str]] = {
    "browser_rollout": _browser_rollout, "client_cpu": _client_cpu, "correction_ablation": _correction_ablation,
    "correction_throughput": _correction_throughput, "decode_limit": _decode_limit, "evolution_flawed": _evolution,
    "evolution_micro": _evolution, "evolution_micro3": _evolution, "gate_power": _gate_power, "gpu_check": _gpu_check,
    "rollout_throughput": _rollout_throughput,
    "round_profile": _round_profile, "seed_determinism": _seed_determinism, "storage": _storage,
    "train_throughput": _train_throughput,
    "written_tests_cost": _written_tests_cost,
}


def generic(data: Any) -> str:
    """The fallback headline: how many records a list holds, or a dict's first keys."""
    if isinstance(data, list):
        return f"{len(data)} records"
    if isinstance(data, dict):
        keys = list(data)
        shown = ": " + ", ".join(map(str, keys[:5])) + (", ..." if len(keys) > 5 else "") if keys else ""
        return f"{len(keys)} keys{shown}"
    return type(data).__name__


def headline(benchmark: str, record: Any) -> str:
    """The extractor for `benchmark` (or for its name before the first "-"), the generic one when none fits."""
    extract = EXTRACTORS.get(benchmark) or EXTRACTORS.get(benchmark.split("-")[0])
    if extract is not None:
        try:
            return extract(payload(record))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, StopIteration):
            pass  # a layout the extractor does not know: say only what is certain
    return generic(payload(record))


def benchmark_of(record: Any, path: Path) -> str:
    """The record's "benchmark", else the file name before its date (the whole stem when it has none)."""
    if isinstance(record, dict) and isinstance(record.get("benchmark"), str) and record["benchmark"]:
        return record["benchmark"]
    m = DATE_IN_NAME.match(path.stem)
    return m["stem"] if m else path.stem


def date_of(record: Any, path: Path) -> str:
    """The record's "date" (ISO, "T" shown as a space), else the YYYY-MM-DD in the file name."""
    if isinstance(record, dict) and record.get("date"):
        return str(record["date"]).replace("T", " ")
    m = DATE_IN_NAME.match(path.stem)
    return m["date"] if m else NOT_RECORDED


def added_map(path: Path = ADDED) -> dict[str, str]:
    """File name -> the short hash of the commit that added it (benchmarks/results_added.json), for the files
    whose record has no "commit" of its own. Read, never computed, so the table is the same in any checkout."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def update_added_map(results_dir: Path = RESULTS_DIR, path: Path = ADDED) -> dict[str, str]:
    """Add to the map every committed results file without its own "commit" (git log --diff-filter=A); entries
    already there are kept. A file not committed yet gets no entry (its row says "not recorded" until then)."""
    known = added_map(path)
    for f in sorted(results_dir.glob("*.json")):
        if f.name in known:
            continue
        try:
            own = json.loads(f.read_text())
        except (OSError, ValueError):
            own = None
        if isinstance(own, dict) and own.get("commit"):
            continue
        added = git("log", "--diff-filter=A", "--format=%h", "-1", "--", str(f))
        if added:
            known[f.name] = added
    path.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
    return known


def commit_of(record: Any, path: Path, added: dict[str, str]) -> str:
    """The record's "commit", else the commit that added the file (from the map), marked so; else not recorded."""
    if isinstance(record, dict) and isinstance(record.get("commit"), str) and record["commit"]:
        return record["commit"]
    return f"{added[path.name]} (file added)" if path.name in added else NOT_RECORDED


def machine_of(record: Any) -> str:
    """Host and CPU count from the record's "machine" (an older layout kept the platform string there and the
    CPU count beside it)."""
    if not isinstance(record, dict) or "machine" not in record:
        return NOT_RECORDED
    m = record["machine"]
    host = m.get("host") if isinstance(m, dict) else None
    cpus = m.get("cpus") if isinstance(m, dict) else record.get("cpus")
    return f"{host or 'host ' + NOT_RECORDED}, {cpus if cpus is not None else NOT_RECORDED} cpus"


def load_of(record: Any) -> str:
    """The 1-minute load average from the record's machine, one decimal."""
    m = record.get("machine") if isinstance(record, dict) else None
    load = m.get("load_avg") if isinstance(m, dict) else None
    if isinstance(load, (list, tuple)) and load and isinstance(load[0], (int, float)):
        return f"{load[0]:.1f}"
    return NOT_RECORDED


def row_for(path: Path, added: dict[str, str]) -> Row:
    """The table row of one results file (a file that is not JSON still gets its row, headline saying so)."""
    try:
        record: Any = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        record, error = None, f"unreadable: {type(exc).__name__}"
    name = benchmark_of(record, path)
    head = headline(name, record) if record is not None else error
    return Row(path.name, name, date_of(record, path), commit_of(record, path, added), machine_of(record),
               load_of(record), head)


def rows(results_dir: Path = RESULTS_DIR) -> list[Row]:
    """A row per `*.json` in `results_dir`, by date, then file name."""
    added = added_map()
    return sorted((row_for(p, added) for p in results_dir.glob("*.json")), key=lambda r: (r.date, r.file))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(table_rows: list[Row]) -> str:
    """The markdown table; each file links to `results/<name>` (relative to benchmarks/README.md)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in table_rows:
        cells = [f"[{r.file}](results/{r.file})", *r[1:]]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def splice(readme: str, table: str) -> str:
    """`readme` with the text between the markers replaced by `table`; ValueError when the markers are missing."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"benchmarks/README.md lacks the markers {START} ... {END}")
    return readme[:start + len(START)] + "\n" + table + readme[end:]


def check(readme_path: Path = README, results_dir: Path = RESULTS_DIR) -> str | None:
    """None when the README's block is what `--write` would write, else a one-line message saying what to run."""
    readme = readme_path.read_text()
    try:
        wanted = splice(readme, render(rows(results_dir)))
    except ValueError as exc:
        return str(exc)
    if wanted != readme:
        return ("benchmarks/README.md's results table is out of date with benchmarks/results/: "
                "run `python benchmarks/results_index.py --write`")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Render one markdown table of benchmarks/results/*.json (file, benchmark, date, commit, "
                    "machine, load, headline) and print it, write it into benchmarks/README.md between "
                    f"{START} and {END}, or check that the README holds it.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the README's block with the table")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 with a one-line message when the README's block differs from what --write writes")
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return 0
    if not args.write:
        print(render(rows()), end="")
        return 0
    update_added_map()
    table = render(rows())
    README.write_text(splice(README.read_text(), table))
    print(f"wrote {len(table.splitlines()) - 2} rows to {README.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
