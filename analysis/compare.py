"""Two runs side by side: the paired difference of each row on the (instance, seed) units both runs ran.

    comparison = compare_frames(frame_a, frame_b, rows=None, names=("run A", "run B"), n_boot=2000, seed=0)
    print(comparison_markdown(comparison))

Each frame has one row per test rollout of one run's round: `group` (the report row key: `M_t.h0`,
`corr.hstar`, `pairs.<label>`, ...), `train_seed` (null for base rows), `family`, `instance_id`, `seed`,
`passed`, and `instance_digest` (tasks/fingerprint.py `instance_digest` of the instance the rollout ran).

The difference is B - A on the units both runs ran for that row, with a bootstrap CI that resamples instances and,
for a trained arm, each side's training seeds (analysis/stats.py `two_level_bootstrap`). Refused (`CompareRefused`,
one line) when:
- the task suites differ: an instance both runs ran has different contents (the suite fingerprint over the shared
  instances differs: `tasks.fingerprint.suite_fingerprint`), so a shared id is not a shared unit;
- no row of the two runs shares an (instance, seed) unit.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.report import markdown_table
from analysis.stats import OVERALL, two_level_bootstrap
from tasks.fingerprint import differing, suite_fingerprint


class CompareRefused(ValueError):
    """The two runs cannot be compared unit by unit (the message says why, in one line)."""


class RowDiff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    row: str
    family: str
    mean_a: float = Field(description="Run A's success on the shared units.")
    mean_b: float
    diff: float = Field(description="B - A.")
    ci_low: float
    ci_high: float
    n_units: int
    n_instances: int

    @property
    def significant(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    a: str
    b: str
    suite_a: str = Field(description="Run A's suite fingerprint over every instance it ran.")
    suite_b: str
    shared_suite: str = Field(description="The fingerprint of the instances both ran (the same on both sides).")
    shared_instances: int
    rows: list[RowDiff]
    skipped: list[str] = Field(default_factory=list, description="Rows asked for that the runs do not share, and why.")
    n_boot: int


def digests(frame: pl.DataFrame) -> dict[str, str]:
    """instance id -> content digest of every instance the frame's rollouts ran."""
    pairs = frame.select("instance_id", "instance_digest").unique()
    out: dict[str, str] = {}
    for iid, dig in pairs.iter_rows():
        if out.setdefault(iid, dig) != dig:
            raise CompareRefused(f"instance {iid} has two contents within one run")
    return out


def check_suites(fa: pl.DataFrame, fb: pl.DataFrame, names: tuple[str, str]) -> tuple[str, str, str, int]:
    """(suite A, suite B, shared suite, shared instances); refused when a shared instance's content differs."""
    da, db = digests(fa), digests(fb)
    shared = da.keys() & db.keys()
    bad = differing(da, db)
    if bad:
        fa_s = suite_fingerprint({i: da[i] for i in shared})
        fb_s = suite_fingerprint({i: db[i] for i in shared})
        raise CompareRefused(f"{names[0]} and {names[1]} ran different task suites: fingerprint {fa_s} vs {fb_s} over "
                             f"the {len(shared)} instances both ran ({len(bad)} differ in content, e.g. {bad[0]}); "
                             "compare runs of the same task code")
    return suite_fingerprint(da), suite_fingerprint(db), suite_fingerprint({i: da[i] for i in shared}), len(shared)


def _units(frame: pl.DataFrame) -> set[tuple[str, int]]:
    return set(frame.select("instance_id", "seed").unique().iter_rows())


def _row_diffs(fa: pl.DataFrame, fb: pl.DataFrame, row: str, n_boot: int, seed: int) -> list[RowDiff]:
    a, b = fa.filter(pl.col("group") == row), fb.filter(pl.col("group") == row)
    both = pl.concat([a.with_columns(pl.lit("A").alias("side")), b.with_columns(pl.lit("B").alias("side"))],
                     how="diagonal_relaxed")
    shared = _units(a) & _units(b)
    fams = sorted({iid.split("/")[0] for iid, _ in shared})
    out = []
    for fam in [*fams, OVERALL] if len(fams) > 1 else fams:
        d = two_level_bootstrap(both, "B", "A", group="side", seed_col="train_seed", family=fam, n_boot=n_boot,
                                seed=seed)
        units = pl.DataFrame([u for u in shared if fam == OVERALL or u[0].startswith(fam + "/")],
                             schema={"instance_id": pl.String(), "seed": pl.Int64()}, orient="row")
        ma, mb = (float(side.join(units, on=["instance_id", "seed"], how="semi")["passed"].cast(pl.Float64).mean()
                        or 0.0) for side in (a, b))
        out.append(RowDiff(row=row, family=fam, mean_a=ma, mean_b=mb, diff=d.diff, ci_low=d.ci_low,
                           ci_high=d.ci_high, n_units=d.n_units, n_instances=d.n_instances))
    return out


def compare_frames(fa: pl.DataFrame, fb: pl.DataFrame, rows: Sequence[str] | None = None,
                   names: tuple[str, str] = ("A", "B"), n_boot: int = 2000, seed: int = 0) -> Comparison:
    """Every asked row (default: every row both runs have) per family and overall; see the module docstring."""
    suite_a, suite_b, shared_suite, n_shared = check_suites(fa, fb, names)
    have_a, have_b = set(fa["group"].to_list()), set(fb["group"].to_list())
    wanted = list(rows) if rows else sorted(have_a & have_b)
    diffs: list[RowDiff] = []
    skipped: list[str] = []
    for row in wanted:
        missing = [n for n, have in zip(names, (have_a, have_b), strict=True) if row not in have]
        if missing:
            shared_rows = ", ".join(sorted(have_a & have_b)) or "none"
            skipped.append(f"{row}: not a row of {' or '.join(missing)} (rows both have: {shared_rows})")
        elif not _units(fa.filter(pl.col("group") == row)) & _units(fb.filter(pl.col("group") == row)):
            skipped.append(f"{row}: no (instance, seed) unit in common")
        else:
            diffs.extend(_row_diffs(fa, fb, row, n_boot, seed))
    if not diffs:
        why = "; ".join(skipped) if skipped else "they have no row in common"
        raise CompareRefused(f"{names[0]} and {names[1]} share no (instance, seed) units to compare ({why})")
    return Comparison(a=names[0], b=names[1], suite_a=suite_a, suite_b=suite_b, shared_suite=shared_suite,
                      shared_instances=n_shared, rows=diffs, skipped=skipped, n_boot=n_boot)


def comparison_rows(c: Comparison) -> list[dict[str, str]]:
    return [{"row": d.row, "family": d.family, "A %": f"{100 * d.mean_a:.1f}", "B %": f"{100 * d.mean_b:.1f}",
             "B - A (pp)": f"{100 * d.diff:+.1f}",
             "95% CI (pp)": f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]" + (" *" if d.significant else ""),
             "units": f"{d.n_units} ({d.n_instances} instances)"} for d in c.rows]


def comparison_markdown(c: Comparison) -> str:
    head = [f"A = {c.a} (suite {c.suite_a}), B = {c.b} (suite {c.suite_b}); {c.shared_instances} instances in "
            f"common, suite {c.shared_suite} on both sides.", "",
            f"Paired difference B - A on the (instance, seed) units both ran; 95% CI: bootstrap over instances and "
            f"training seeds ({c.n_boot} draws); * = the CI excludes 0.", ""]
    tail = ["", *[f"- not compared: {s}" for s in c.skipped]] if c.skipped else []
    return "\n".join(head) + "\n" + markdown_table(comparison_rows(c)) + "\n".join(tail) + ("\n" if tail else "")
