"""The minimality pass: of the victims a greedy search took, keep only those the preemptor needs, the cheapest.

Victims are dropped one at a time in an order, each when the preemptor still places without it at no worse bus
bandwidth than with them all gone (without that floor, dropping victims one at a time let the engine spread a
16-rank gang over a cluster at 1.9 GB/s where the greedy set gave it 47 GB/s, and the plan was then refused for its
bandwidth). A victim whose
GPUs the current placement does not use is dropped without asking the engine (the placement stands without it),
but only at its turn in that order: dropped before the dearer ones had their turn, the cheap victim would go
because the engine happened to take the lowest freed GPUs, and the dear one would stay, so the same cluster with
its GPUs renumbered would lose other gangs.

Dropping dearest first (highest priority, then most work) keeps the cheapest victims one at a time, not always the
cheapest set: it drops a 4-GPU gang that loses 10 GPU-hours and keeps two 2-GPU gangs that lose 6 each, 12 together
(or 5 each: as much, in two gangs); it drops a 2-GPU gang before two 1-GPU gangs that each lose less, together more.
So when it keeps several victims the greedy set is made minimal twice more, densest first (most work per GPU) and
smallest first (fewest GPUs, so fewer gangs), and of the three the set cheapest in the cost order's victim fields
(priority, then work lost, then gangs broken; the work at the best moment within a preemptor's checkpoint wait, as
plans are compared) within the victim budget is kept. The engine is called at most three times per victim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gputopo.placement.preemption.gangs import RunningGang, gpus_by_node
from gputopo.placement.types import Placement

__all__ = ["Unused", "VictimCosts", "cheapest_minimal", "minimal", "unused_by"]

Unused = Callable[[int, Placement], bool]
"""Whether victim ``k``'s GPUs are all outside a placement (so it stands without that victim)."""

Places = Callable[[list[int]], "Placement | None"]
"""The preemptor's placement with only these victims' GPUs freed, or None."""


@dataclass(frozen=True, slots=True)
class VictimCosts:
    """The possible victims by index, and the orders they are dropped in: the gangs, the work each loses (as the
    search counts it), the GPUs each holds."""

    gangs: Sequence[RunningGang]
    work: Sequence[float]
    sizes: Sequence[int]

    def dearest_first(self, k: int) -> tuple[int, float, str]:
        """The order that keeps the cheapest: highest priority first, then most work lost, then name."""
        return (-self.gangs[k].priority, -self.work[k], self.gangs[k].name)

    def densest_first(self, k: int) -> tuple[int, float, str]:
        """The order that keeps the cheapest per GPU: highest priority first, then most work per GPU, then name."""
        return (-self.gangs[k].priority, -self.work[k] / max(1, self.sizes[k]), self.gangs[k].name)

    def smallest_first(self, k: int) -> tuple[int, int, float, str]:
        """The order that keeps the fewest: fewest GPUs first, then as ``dearest_first``."""
        return (self.sizes[k], -self.gangs[k].priority, -self.work[k], self.gangs[k].name)


def minimal(
    chosen: Sequence[int],
    placement: Placement,
    order: Callable[[int], tuple[Any, ...]],
    places: Places,
    unused: Unused | None = None,
) -> tuple[list[int], Placement]:
    """Drop, in ``order``, every victim of ``chosen`` without which the preemptor still places at no worse bus
    bandwidth than ``placement`` gives it; ``places(rest)`` asks the engine, and ``unused``, where given, spares that
    call for a victim the current placement leaves alone."""
    kept, floor = list(chosen), placement.busbw_gbps - 1e-6
    for k in sorted(chosen, key=order):
        rest = [j for j in kept if j != k]
        if unused is not None and unused(k, placement):
            kept = rest
            continue
        again = places(rest)
        if again is not None and again.busbw_gbps >= floor:
            kept, placement = rest, again
    return kept, placement


def cheapest_minimal(
    greedy: Sequence[int],
    placement: Placement,
    places: Places,
    unused: Unused | None,
    victims: VictimCosts,
    cost: Callable[[Sequence[int]], tuple[int, float, int]],
    budget: int,
) -> tuple[list[int], Placement] | None:
    """The greedy set made minimal dearest first; when that keeps several victims, also densest and smallest
    first, and the cheapest of them by ``cost`` (the cost order's victim fields: priority, work lost, gangs
    broken) within ``budget`` victims, dearest first on a tie. None when all are over the budget.

    One victim kept dearest first is the cheapest set already: any cheaper one is of victims no dearer than it,
    all still there at its turn, so it would have been dropped (freeing more GPUs never stops a gang placing)."""
    dearest = minimal(greedy, placement, victims.dearest_first, places, unused)
    if len(dearest[0]) <= 1:
        return dearest if len(dearest[0]) <= budget else None
    found = [dearest]
    for order in (victims.densest_first, victims.smallest_first):
        found.append(minimal(greedy, placement, order, places, unused))
    kept = [f for f in found if len(f[0]) <= budget]
    return min(kept, key=lambda f: cost(f[0])) if kept else None


def unused_by(victims: Sequence[RunningGang]) -> Unused:
    """``Unused`` over ``victims`` by index: none of victim ``k``'s GPUs is in the placement."""

    def unused(k: int, placement: Placement) -> bool:
        used = gpus_by_node(placement)
        return not any(used.get(node, frozenset()) & gpus for node, gpus in gpus_by_node(victims[k].placement).items())

    return unused
