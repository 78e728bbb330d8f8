"""Each night's evaluation linked to the comparison with the family's previous night (`coevo compare`'s numbers).

    links = compare_nights(reg, runs_dir, night, run_ids)    # family -> tonight's run id
    md = links_markdown(links, comparison_file)

The previous night of a family is the latest night before tonight with a recorded score (whatever pair it
evaluated: a new promotion is still tonight against last night). The two nights' runs are paired on the (instance,
seed) units both ran (flows/ops/compare.py); a pair that cannot be compared (different task suites, no unit in
common, a run directory gone) says why instead. The comparisons go to `<runs_dir>/nightly/<night>-compare.md`,
which the night's report links to.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from analysis.compare import CompareRefused, comparison_markdown
from flows.ops.compare import compare_runs, run_rows
from flows.ops.registry import PromotionRegistry
from flows.round.stages import PAIRS_PREFIX


class NightLink(BaseModel):
    """Tonight's run of one family against the family's previous night."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    run_id: str
    previous_night: str | None = None
    previous_run: str | None = None
    diff: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    units: int | None = None
    why_not: str = ""
    markdown: str = ""

    @property
    def command(self) -> str:
        return f"coevo compare {self.previous_run} {self.run_id}"


def _previous(reg: PromotionRegistry, family: str, night: str) -> tuple[str, str] | None:
    earlier = [s for s in reg.nightly(family) if s.night < night]
    return (earlier[-1].night, earlier[-1].run_id) if earlier else None


def link_night(reg: PromotionRegistry, runs_dir: str, night: str, family: str, run_id: str, row: str) -> NightLink:
    """One family's link (see the module docstring)."""
    prev = _previous(reg, family, night)
    if prev is None:
        return NightLink(family=family, run_id=run_id, why_not="first night: nothing to compare with")
    base = NightLink(family=family, run_id=run_id, previous_night=prev[0], previous_run=prev[1])
    try:
        c = compare_runs(run_rows(prev[1], runs_dir), run_rows(run_id, runs_dir), [PAIRS_PREFIX + row])
    except (CompareRefused, ValueError) as e:
        return base.model_copy(update={"why_not": str(e)})
    overall = c.rows[-1]  # one family: its row (several: overall comes last)
    return base.model_copy(update={"diff": overall.diff, "ci_low": overall.ci_low, "ci_high": overall.ci_high,
                                   "units": overall.n_units, "markdown": comparison_markdown(c)})


def links_markdown(links: list[NightLink], comparison_file: str) -> str:
    """The night report's section: one line per family, linking to the comparisons file."""
    lines = ["## Compared with the previous night", "",
             f"Tonight minus the family's previous night on the (instance, seed) units both ran, 95% bootstrap CI "
             f"([the comparisons]({comparison_file}); rerun one with the command shown, `--runs-dir` added).", ""]
    for k in links:
        if k.diff is None:
            lines.append(f"- {k.family}: not compared: {k.why_not}")
        else:
            lines.append(f"- {k.family}: {k.previous_night} -> tonight {100 * k.diff:+.1f} pp "
                         f"[{100 * k.ci_low:+.1f}, {100 * k.ci_high:+.1f}] on {k.units} units "  # type: ignore[operator]
                         f"(`{k.command}`)")
    return "\n".join(lines) + "\n"


def comparisons_markdown(night: str, links: list[NightLink]) -> str:
    """`<night>-compare.md`: each family's full comparison (or why there is none)."""
    parts = [f"# Nightly evaluation {night}: each family against its previous night", ""]
    for k in links:
        parts += [f"## {k.family}", ""]
        parts += [f"`{k.command}`", "", k.markdown] if k.markdown else [f"Not compared: {k.why_not}", ""]
    return "\n".join(parts) + "\n"


def comparison_path(runs_dir: str, night: str) -> Path:
    return Path(runs_dir) / "nightly" / f"{night}-compare.md"
