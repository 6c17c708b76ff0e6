"""A running gang's placement from the GPUs it holds, scored as the engine scores its own plans."""

from __future__ import annotations

from collections.abc import Sequence

from gputopo.placement.gang import NodeShare, assemble
from gputopo.placement.types import Placement, Snapshot

__all__ = ["held_placement"]


def held_placement(snapshot: Snapshot, workers: Sequence[tuple[str, Sequence[int]]]) -> Placement:
    """The placement of workers ``(node, gpus)`` with its estimated bus bandwidth (KeyError: unknown node)."""
    groups: dict[int, list[int]] = {}
    for node, gpus in workers:
        mask = 0
        for gpu in gpus:
            mask |= 1 << gpu
        groups.setdefault(snapshot.index_of(node), []).append(mask)
    return assemble(snapshot, [NodeShare(i, tuple(masks)) for i, masks in groups.items()])
