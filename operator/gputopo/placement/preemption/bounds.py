"""Lower bounds on what clearing a domain costs, counted in worker slots, so domains are searched cheapest first.

A node gives ``free // g`` slots of ``g`` GPUs (one worker each) at no cost, and each further slot costs the
work of the victims whose GPUs it needs, taken fractionally, cheapest work per GPU first (a gang on several
nodes counts on each node by its share of GPUs there). A domain's bound at priority level ``p`` is the sum of
its cheapest slot costs from victims of priority at most ``p``; the lowest ``p`` with enough slots is a lower
bound on the victims' highest priority, and the sum at that ``p`` on the work they lose. Links, caps and
gangs' shapes only make the real cost higher.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["NO_LEVEL", "NodeVictims", "domain_bound", "domain_level", "domain_work", "slot_costs"]

NO_LEVEL = -(2**62)  # the level of a domain whose free GPUs suffice: no victim


@dataclass(slots=True)
class NodeVictims:
    """One node: its free GPUs, and per possible victim there (priority, work share, GPUs freed)."""

    free: int
    victims: tuple[tuple[int, float, int], ...]
    _costs: dict[tuple[int, int], list[float]] = field(default_factory=dict)

    def slots(self, gpus_per_worker: int, level: int) -> int:
        """The slots victims of priority at most ``level`` add here: ``len(costs(...))`` without the costs."""
        total = self.free + sum(gpus for priority, _, gpus in self.victims if priority <= level)
        return total // gpus_per_worker - self.free // gpus_per_worker

    def costs(self, gpus_per_worker: int, level: int) -> list[float]:
        """``slot_costs`` of this node, worked out once per decision (levels above every victim's priority
        here all give the same costs, so they share them)."""
        top = max((priority for priority, _, _ in self.victims), default=level)
        key = (gpus_per_worker, min(level, top))
        found = self._costs.get(key)
        if found is None:
            found = self._costs[key] = slot_costs(self, gpus_per_worker, level)
        return found


def slot_costs(node: NodeVictims, gpus_per_worker: int, level: int) -> list[float]:
    """The marginal cost of each slot the node gains from victims of priority ≤ ``level`` (non-decreasing)."""
    g = gpus_per_worker
    usable = sorted((work / gpus, gpus) for priority, work, gpus in node.victims if priority <= level)
    total = node.free + sum(gpus for _, gpus in usable)
    out: list[float] = []
    freed, cost, spent = 0, 0.0, 0.0
    queue = iter(usable)
    rate, left = 0.0, 0
    for slot in range(node.free // g + 1, total // g + 1):
        want = slot * g - node.free
        while freed < want:
            if left == 0:
                rate, left = next(queue)
            take = min(left, want - freed)
            cost += rate * take
            freed += take
            left -= take
        out.append(cost - spent)
        spent = cost
    return out


def domain_bound(
    nodes: Sequence[NodeVictims], workers: int, gpus_per_worker: int, levels: Sequence[int]
) -> tuple[int, float] | None:
    """(lowest priority level, least work) that gives ``workers`` slots; None when no level does."""
    level = domain_level(nodes, workers, gpus_per_worker, levels)
    if level is None:
        return None
    have = sum(n.free // gpus_per_worker for n in nodes)
    return level, domain_work(nodes, workers - have, gpus_per_worker, level)


def domain_level(nodes: Sequence[NodeVictims], workers: int, gpus_per_worker: int, levels: Sequence[int]) -> int | None:
    """The lowest priority level whose victims give ``workers`` slots (``NO_LEVEL`` when free GPUs do); None
    when no level does. Counts slots only, so it is cheap enough to work out for every domain."""
    g = gpus_per_worker
    have = sum(n.free // g for n in nodes)
    if have >= workers:
        return NO_LEVEL
    for level in levels:
        if have + sum(n.slots(g, level) for n in nodes if n.victims) >= workers:
            return level
    return None


def domain_work(nodes: Iterable[NodeVictims], wanted: int, gpus_per_worker: int, level: int) -> float:
    """The least work that victims of priority at most ``level`` on ``nodes`` lose to give ``wanted`` more
    slots than their free GPUs do (a node whose victims add no slot may be left out)."""
    if wanted <= 0:
        return 0.0
    costs = [c for n in nodes if n.victims for c in n.costs(gpus_per_worker, level)]
    return sum(heapq.nsmallest(wanted, costs))
