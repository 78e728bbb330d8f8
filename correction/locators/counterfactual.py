"""`counterfactual` (the embedded default): t* is the earliest turn whose own action makes the expert unable
to finish the task from there.

R(k) = "the expert, continuing from the state after the student's first k turns, succeeds" (one expert
episode from `prefix_of(trajectory, k)`; `samples` > 1 draws several seeds and takes any success, for a
sampling expert). R(0) is the expert from scratch. t* is the turn k with R(k) true and R(k+1) false.

Search. R is monotone when every state the student's actions lead to from an unrecoverable state is also
unrecoverable (the usual case: tools do not undo a sent email or a submitted answer). Then a binary search
over k in [0, n] with R(0) true and R(n) false finds the one true->false step in ~log2(n)+2 episodes.
Non-monotone R (a later student action repairs what an earlier one broke, e.g. re-reading a skipped page):
the binary search still returns a true->false step (a turn whose own action makes R false while R held
before it), but not necessarily the earliest; `search="scan"` probes every k from 0 and returns the
earliest (n+1 episodes). `monotone` in the record is False when the probes seen disagree with monotonicity.
Edge cases: R(0) false -> no t* (the expert cannot solve the task under this harness); R(n) true (the
student stopped where the expert could still finish: max_turns, a refused finish) -> t* = the last turn.
"""

from __future__ import annotations

from typing import Literal

from agents.prefix import prefix_of
from agents.records import ModelRole, Trajectory
from analysis.attribution.heuristic import HeuristicAttributor
from analysis.attribution.ontology import Bucket
from correction.records import Localization
from correction.roles import continuation
from correction.runner import RolloutFn
from harness.program import Harness

PROBE_TAG = "expert-probe"


class ExpertProbe:
    """R(k) for one trajectory: expert continuations from its prefixes, remembered per k."""

    def __init__(self, view: Trajectory, harness: Harness, run: RolloutFn, expert: ModelRole,
                 samples: int, extra_turns: int) -> None:
        self.view, self.harness, self.run, self.expert = view, harness, run, expert
        self.samples, self.extra_turns = samples, extra_turns
        self.episodes: dict[int, list[Trajectory]] = {}

    async def episodes_at(self, k: int) -> list[Trajectory]:
        if k not in self.episodes:
            prefix = prefix_of(self.view, k)
            jobs = [continuation(self.view, self.harness, self.expert, prefix, s, PROBE_TAG, self.extra_turns)
                    for s in range(self.samples)]
            self.episodes[k] = await self.run(jobs)
        return self.episodes[k]

    async def holds(self, k: int) -> bool | None:
        """R(k); None when the prefix could not be replayed (a diverged replay says nothing about R)."""
        eps = await self.episodes_at(k)
        if any(e.passed for e in eps):
            return True
        return None if all(e.stop_reason == "replay_divergence" for e in eps) else False

    def values(self) -> dict[int, bool]:
        return {k: any(e.passed for e in eps) for k, eps in sorted(self.episodes.items())}


def category_of(view: Trajectory) -> Bucket:
    """The offline heuristic attributor's category for the whole failing rollout."""
    return HeuristicAttributor().decide(view).category


def is_monotone(values: dict[int, bool]) -> bool:
    seen_false = False
    for _, v in sorted(values.items()):
        if v and seen_false:
            return False
        seen_false = seen_false or not v
    return True


class CounterfactualLocator:
    name = "counterfactual"

    def __init__(self, expert: ModelRole | None = None, samples: int = 1, extra_turns: int = 30,
                 search: Literal["binary", "scan"] = "binary") -> None:
        self.expert = expert or ModelRole(model="oracle/{family}")
        self.samples, self.extra_turns, self.search = samples, extra_turns, search

    def _answer(self, view: Trajectory, probe: ExpertProbe, t_star: int | None, why: str) -> Localization:
        vals = probe.values()
        shown = "".join("1" if vals[k] else "0" for k in sorted(vals))
        return Localization(t_star=t_star, category=category_of(view) if t_star is not None else "unattributed",
                            rationale=f"{why} (R probed at k={sorted(vals)}: {shown})", locator=self.name,
                            probes=vals, monotone=is_monotone(vals))

    async def locate(self, trajectory: Trajectory, harness: Harness, run: RolloutFn) -> Localization:
        view = trajectory.require_view(self.name)
        n = len(view.turns)
        probe = ExpertProbe(view, harness, run, self.expert, self.samples, self.extra_turns)
        if n == 0 or not await probe.holds(0):
            return self._answer(view, probe, None, "the expert does not solve the task from the start under this harness")
        if self.search == "scan":
            return await self._scan(view, probe, n)
        end = await probe.holds(n)
        if end is None:
            return self._answer(view, probe, None, "the full prefix could not be replayed")
        if end:
            return self._answer(view, probe, n - 1, f"the expert still succeeds after all {n} turns: the student "
                                                    f"stopped ({view.stop_reason}) where it could have finished")
        lo, hi = 0, n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            r = await probe.holds(mid)
            if r is None:
                return self._answer(view, probe, None, f"the prefix of {mid} turns could not be replayed")
            lo, hi = (mid, hi) if r else (lo, mid)
        return self._answer(view, probe, hi - 1, f"R({lo}) holds and R({hi}) fails: turn {hi - 1}'s action "
                                                 "makes the task unrecoverable for the expert")

    async def _scan(self, view: Trajectory, probe: ExpertProbe, n: int) -> Localization:
        for k in range(1, n + 1):
            r = await probe.holds(k)
            if r is None:
                return self._answer(view, probe, None, f"the prefix of {k} turns could not be replayed")
            if not r:
                return self._answer(view, probe, k - 1, f"earliest failing R at k={k}: turn {k - 1}'s action "
                                                        "makes the task unrecoverable for the expert")
        return self._answer(view, probe, n - 1, f"the expert still succeeds after all {n} turns ({view.stop_reason})")
