"""Seeded clusters whose GPUs are held by running gangs of mixed priorities, for preemption benchmarks and tests."""

from __future__ import annotations

import random
from collections.abc import Sequence

from gputopo.placement.preemption import RunningGang, held_placement
from gputopo.placement.types import Snapshot
from gputopo.sim.generate import generate_cluster

__all__ = ["occupied_cluster"]


def occupied_cluster(
    seed: int,
    nodes: int,
    *,
    multi_node_share: float = 0.3,
    widths: Sequence[int] = (2, 4, 8),
    held_share: float = 1.0,
    priorities: Sequence[int] = (0, 1, 2),
) -> tuple[Snapshot, list[RunningGang]]:
    """``nodes`` mixed nodes: about ``multi_node_share`` of them in gangs of whole nodes (``widths`` nodes each),
    the rest split into gangs of 1-8 GPUs, each slot held with probability ``held_share``; a gang's priority is
    drawn from ``priorities`` and its start from the last 2.5 hours."""
    rng = random.Random(seed)
    snapshot = generate_cluster(rng, nodes)
    names = [n.name for n in snapshot]
    layouts: list[list[tuple[str, tuple[int, ...]]]] = []
    i = 0
    while i < len(names):
        if rng.random() < multi_node_share:
            width = rng.choice(widths)
            layouts.append([(names[j], tuple(range(8))) for j in range(i, min(i + width, len(names)))])
            i += width
            continue
        gpus = list(range(8))
        while gpus:
            size = min(len(gpus), rng.choice([1, 2, 4, 8]))
            if held_share >= 1.0 or rng.random() < held_share:
                layouts.append([(names[i], tuple(gpus[:size]))])
            gpus = gpus[size:]
        i += 1
    running = []
    for g, workers in enumerate(layouts):
        placement = held_placement(snapshot, workers)
        snapshot = snapshot.reserve(placement)
        running.append(RunningGang(f"gang-{g:05d}", rng.choice(priorities), placement, rng.uniform(0, 9000.0)))
    return snapshot, running
