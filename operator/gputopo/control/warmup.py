"""Warming the planner while nothing waits (pure).

The planner keeps, per node topology, the estimates of the GPU subsets it has looked at (``PlacementCache``).
After a restart, or when the operator starts a fresh cache, the first decision of each job shape works them
out for every node: on the 256-node sandbox of ``bench/bench_allocation.py`` the first decisions took a
hundred milliseconds and more against a few once warm, all inside the first burst of jobs. A control pass
with nothing to place and no writes going out makes those decisions ahead instead, for the shapes jobs
usually take, and throws the answers away; the tables stay in the cache. It warms one shape at a time and
stops once it has spent its planning budget, so a job arriving meanwhile waits at most one shape; the next
idle pass goes on from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gputopo.control.view import ClusterView
from gputopo.placement.cache import PlacementCache
from gputopo.placement.types import GpuChoice, Policy, Request, Snapshot

__all__ = ["warm", "warm_shapes"]


def warm_shapes(view: ClusterView) -> tuple[tuple[int, int], ...]:
    """(workers, GPUs per worker) to warm, per GPU count of the cluster's nodes: one worker on 1, 2, 4, ...
    GPUs and on the whole node, then two and four whole nodes."""
    counts = sorted({f.topology.gpu_count for f in view.topologies.values() if f.topology is not None})
    shapes: list[tuple[int, int]] = []
    for count in counts:
        size = 1
        while size < count:
            shapes.append((1, size))
            size *= 2
        shapes += [(1, count), (2, count), (4, count)]
    return tuple(dict.fromkeys(shapes))


def warm(
    snapshot: Callable[[], Snapshot],
    cache: PlacementCache,
    shapes: Iterable[tuple[int, int]],
    place: Policy,
    gpu_choice: GpuChoice,
    clock: Callable[[], float],
    budget_seconds: float,
) -> int:
    """Decide each shape not yet warmed in ``cache`` on the snapshot (built only when one is left), until the
    budget is spent; the shapes warmed."""
    left = [shape for shape in shapes if shape not in cache.warmed]
    if not left:
        return 0
    started = clock()
    built = snapshot()
    done = 0
    for workers, gpus in left:
        place(built, Request(workers, gpus, name="warm-up", gpu_choice=gpu_choice))
        cache.warmed.add((workers, gpus))
        done += 1
        if clock() - started >= budget_seconds:
            break
    return done
