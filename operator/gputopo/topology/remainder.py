"""How well the GPUs a pick leaves free serve the jobs that come next.

Scoring what remains as one big group misjudges it: on an idle DGX-1 a 2-GPU job can take an NVLink pair
that breaks both fully NVLinked quads and still leave six GPUs "well connected", yet the next 4-GPU job then
gets 58.5 GB/s instead of 78. Even the best figure the remainder offers each job size is not enough: after
a pair, two GPUs of a quad can be left with a weak link between them, which only shows once the other
quad is taken.

So a remainder is judged by packing it with the job sizes that come (8, 4, 2 and 1 GPUs), the largest
that fits first, each time with the best group of that size and, among equally fast groups, the one whose
own remainder packs best; once with every size, then with jobs of at most 4 GPUs, then of at most 2 (four
GPUs left may serve one 4-GPU job or two pairs). The figures of those packings, compared in order, say
which remainder serves a sequence of jobs better. Interchangeable GPUs (``symmetry``) leave equivalent
remainders, so only one group per shape is tried; the packing is memoised per free set.
"""

from __future__ import annotations

from gputopo.topology.estimate import topology_tables
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology
from gputopo.topology.symmetry import interchangeable

__all__ = ["JOB_SIZES", "best_busbw", "remainder"]

# The job sizes that come, largest first.
JOB_SIZES: tuple[int, ...] = (8, 4, 2, 1)

# Past this many GPUs the packing is judged one step deep (best figure per size), to bound the search.
_PACKING_GPUS = 12


def _shapes(topology: Topology, free_mask: int, k: int) -> list[tuple[float, int]]:
    """One group per shape of k GPUs of ``free_mask``: (bus bandwidth, group mask)."""
    node = topology_tables(topology)
    classes = interchangeable(topology, list(node.bits(free_mask)))
    firsts = [[sum(1 << g for g in cls[:c]) for c in range(len(cls) + 1)] for cls in classes]
    room = [sum(len(cls) for cls in classes[t:]) for t in range(len(classes) + 1)]
    found: list[tuple[float, int]] = []

    def walk(t: int, left: int, group: int) -> None:
        if left == 0:
            found.append((round(node.estimate(group).busbw_gbps, 9), group))
            return
        if room[t] < left:
            return
        for c in range(min(left, len(classes[t])), -1, -1):
            walk(t + 1, left - c, group | firsts[t][c])

    walk(0, k, 0)
    return found


# Kept with the estimator's tables. Per (free GPUs, group size): the best bus bandwidth of such a group.
_BEST_BUSBW: Table[tuple[int, int], float] = Table("best bus bandwidth")
# Per (free GPUs, largest job size): the figures of packing them, the largest job that fits first.
_PACKINGS: Table[tuple[int, int], tuple[float, ...]] = Table("remainder packings")


def best_busbw(topology: Topology, free_mask: int, k: int) -> float:
    """The highest estimated bus bandwidth of any k of the GPUs in ``free_mask`` (0 when fewer are free)."""
    if k < 1 or free_mask.bit_count() < k:
        return 0.0
    memo = topology_tables(topology).memo.table(_BEST_BUSBW)
    found = memo.get((free_mask, k))
    if found is None:
        found = memo[(free_mask, k)] = max(bw for bw, _ in _shapes(topology, free_mask, k))
    return found


def remainder(topology: Topology, rest_mask: int) -> tuple[tuple[float, ...], ...]:
    """The bus bandwidths the GPUs left free give the jobs that come: one packing per largest job size
    (8, then 4, then 2 GPUs and smaller), compared in that order; higher is better."""
    if topology.gpu_count > _PACKING_GPUS:
        return (tuple(best_busbw(topology, rest_mask, k) for k in JOB_SIZES),)
    memo = topology_tables(topology).memo.table(_PACKINGS)
    return tuple(_packing(topology, rest_mask, cap, memo) for cap in JOB_SIZES[:-1])


def _packing(
    topology: Topology, free_mask: int, cap: int, memo: dict[tuple[int, int], tuple[float, ...]]
) -> tuple[float, ...]:
    """Figures of packing ``free_mask`` with jobs of at most ``cap`` GPUs, the largest that fits first."""
    found = memo.get((free_mask, cap))
    if found is not None:
        return found
    free = free_mask.bit_count()
    k = next((size for size in JOB_SIZES if size <= min(free, cap)), 0)
    if k == 0:
        memo[(free_mask, cap)] = ()
        return ()
    shapes = _shapes(topology, free_mask, k)
    top = max(bw for bw, _ in shapes)
    best = max(_packing(topology, free_mask & ~group, cap, memo) for bw, group in shapes if bw == top)
    found = memo[(free_mask, cap)] = (top, *best)
    return found
