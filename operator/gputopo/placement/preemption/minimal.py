"""The minimality pass: of the victims a greedy search took, keep only those the preemptor needs.

Victims are dropped one at a time in a given order (dearest first, so the cost order decides who stays: priority,
then work lost), each when the preemptor still places without it. A victim whose GPUs the current placement does
not use is dropped without asking the engine (the placement stands without it), but only at its turn in that
order: dropped before the dearer ones had their turn, the cheap victim would go because the engine happened to
take the lowest freed GPUs, and the dear one would stay, so the same cluster with its GPUs renumbered would lose
other gangs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gputopo.placement.preemption.gangs import RunningGang, gpus_by_node
from gputopo.placement.types import Placement

__all__ = ["Unused", "dearest_first", "minimal", "smallest_first", "unused_by"]

Unused = Callable[[int, Placement], bool]
"""Whether victim ``k``'s GPUs are all outside a placement (so it stands without that victim)."""


def minimal(
    chosen: Sequence[int],
    placement: Placement,
    order: Callable[[int], tuple[Any, ...]],
    places: Callable[[list[int]], Placement | None],
    unused: Unused | None = None,
) -> tuple[list[int], Placement]:
    """Drop, in ``order``, every victim of ``chosen`` without which the preemptor still places; ``places(rest)``
    asks the engine, and ``unused``, where given, spares that call for a victim the placement leaves alone."""
    kept = list(chosen)
    for k in sorted(chosen, key=order):
        rest = [j for j in kept if j != k]
        if unused is not None and unused(k, placement):
            kept = rest
            continue
        again = places(rest)
        if again is not None:
            kept, placement = rest, again
    return kept, placement


def unused_by(victims: Sequence[RunningGang]) -> Unused:
    """``Unused`` over ``victims`` by index: none of victim ``k``'s GPUs is in the placement."""

    def unused(k: int, placement: Placement) -> bool:
        used = gpus_by_node(placement)
        return not any(used.get(node, frozenset()) & gpus for node, gpus in gpus_by_node(victims[k].placement).items())

    return unused


def dearest_first(victims: Sequence[RunningGang], work: Sequence[float]) -> Callable[[int], tuple[int, float, str]]:
    """The order that keeps the cheapest: highest priority first, then most work lost, then name."""
    return lambda k: (-victims[k].priority, -work[k], victims[k].name)


def smallest_first(
    victims: Sequence[RunningGang], work: Sequence[float], sizes: Sequence[int]
) -> Callable[[int], tuple[int, int, float, str]]:
    """The order that keeps the fewest: fewest GPUs first, then as ``dearest_first``."""
    return lambda k: (sizes[k], -victims[k].priority, -work[k], victims[k].name)
