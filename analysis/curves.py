"""Step curves (e.g. a search's best validation score over the evaluations it spent), as a PNG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless
import matplotlib.pyplot as plt  # noqa: E402


def step_curves(series: Mapping[str, Sequence[tuple[float, float]]], out: str | Path, *, title: str,
                xlabel: str, ylabel: str, percent: bool = True) -> Path:
    """One post-step line per series (x ascending); y in [0, 1] is drawn as a percentage when `percent`."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    scale = 100.0 if percent else 1.0
    for label, points in series.items():
        if not points:
            continue
        xs = [p[0] for p in points]
        ys = [scale * p[1] for p in points]
        ax.step(xs, ys, where="post", label=label)
        ax.scatter(xs, ys, s=12)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel + (" (%)" if percent else ""))
    if percent:
        ax.set_ylim(-5, 105)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
