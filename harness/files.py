"""`--harness FILE|DIR|baseline` as the commands take it: one harness per family.

    harness_of = harness_source("runs/evo1")     # a DIR: one h* per family
    h = harness_of("stock_alert")                # HarnessNotFound names the family and the paths tried

- `baseline`: h0 of each family (`harness.baseline`).
- FILE (YAML or JSON): that harness for every family.
- DIR: per family the first of `<family>.yaml|.yml|.json`, `<family>/h_star.yaml`,
  `evolution/<family>/h_star.yaml` (what `coevo evolve --out DIR` writes).
Loaded harnesses are cached per family, so every row of a family sees the same object.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.baseline import baseline
from harness.program import Harness


class HarnessNotFound(FileNotFoundError):
    """A harness source has no harness for a family (names the family and the paths it tried)."""


def candidates(root: Path, family: str) -> list[Path]:
    """The paths a harness DIR is searched for `family`'s harness, in order."""
    return [root / f"{family}.yaml", root / f"{family}.yml", root / f"{family}.json",
            root / family / "h_star.yaml", root / "evolution" / family / "h_star.yaml"]


def harness_source(spec: str | Path) -> Callable[[str], Harness]:
    """family -> Harness for `baseline`, a harness FILE or a DIR of harnesses; raises for a missing path."""
    if str(spec) == "baseline":
        return baseline
    path = Path(spec)
    if not path.exists():
        raise HarnessNotFound(f"{path} is neither 'baseline' nor an existing harness file or directory")
    if path.is_file():
        h = Harness.load(path)
        return lambda family: h
    cache: dict[str, Harness] = {}

    def harness_of(family: str) -> Harness:
        if family not in cache:
            tried = candidates(path, family)
            found = next((p for p in tried if p.is_file()), None)
            if found is None:
                raise HarnessNotFound(f"{path} holds no harness for family {family} (tried "
                                      f"{', '.join(str(p.relative_to(path)) for p in tried)})")
            cache[family] = Harness.load(found)
        return cache[family]

    return harness_of
