"""Which running gangs a preemptor may preempt at all, and in words why the others may not."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from gputopo.placement.preemption.gangs import PreemptionRules, Preemptor, RunningGang

__all__ = ["Eligible", "min_runtime", "victim_refusal"]

NOT_LOWER = "of equal or higher priority"
NON_PREEMPTIBLE = "marked non-preemptible"
MIN_RUNTIME = "within their minimum runtime"
PROTECTED = "protected after a recent preemption"
CYCLE = "preempted the preemptor before (no cycle)"


def min_runtime(gang: RunningGang, rules: PreemptionRules) -> float:
    """The minimum runtime that protects ``gang``: its own, at most the cluster's ``max_min_runtime_s`` (a workload
    that claims forever, or NaN, gets the cluster's maximum)."""
    own = gang.min_runtime_s
    return rules.max_min_runtime_s if math.isnan(own) else min(max(own, 0.0), rules.max_min_runtime_s)


def victim_refusal(gang: RunningGang, preemptor: Preemptor, rules: PreemptionRules) -> str | None:
    """Why ``gang`` may not be a victim of ``preemptor`` (a plural phrase for counts), None when it may."""
    if gang.priority >= preemptor.priority:
        return NOT_LOWER
    if not gang.preemptible:
        return NON_PREEMPTIBLE
    if rules.now - gang.start_time < min_runtime(gang, rules):
        return MIN_RUNTIME
    if gang.preempted_at is not None and rules.now - gang.preempted_at < rules.protection_s:
        return PROTECTED
    if gang.name in preemptor.preempted_by:
        return CYCLE
    return None


class Eligible:
    """The running gangs split into possible victims and refused ones (counted by reason)."""

    def __init__(self, running: Iterable[RunningGang], preemptor: Preemptor, rules: PreemptionRules) -> None:
        self.indices: list[int] = []  # positions in ``running`` of the possible victims
        self.refused: Counter[str] = Counter()
        for k, gang in enumerate(running):
            if gang.name == preemptor.name:
                continue
            why = victim_refusal(gang, preemptor, rules)
            if why is None:
                self.indices.append(k)
            else:
                self.refused[why] += 1

    def describe(self) -> tuple[str, ...]:
        return tuple(f"{count} {'gang' if count == 1 else 'gangs'} {why}" for why, count in self.refused.most_common())
