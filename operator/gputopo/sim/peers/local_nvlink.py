"""Local-NVLink: the NVIDIA device plugin's best-effort GPU choice inside a node, with topology-blind nodes.

go-gpuallocator's besteffort policy: a GPU pair scores 100 per NVLink plus a PCIe level bonus (same board
60, single switch 50, multiple switches 40, host bridge 30, same CPU 20, cross CPU 10); every partition of
the free GPUs into sets of the request's size is scored by the sum of its sets' pair scores, and the best
set of the best partition is allocated. It does not know NVSwitch (``TODO(klueska)``): it sees NV18 pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

from gputopo.api.nodetopology import LinkKind
from gputopo.placement.types import NodeInfo, Placement, Request, Snapshot, Unplaceable
from gputopo.sim.peers.topology_blind import spread_workers
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology

__all__ = ["pair_score", "place_local_nvlink"]

_PCIE_SCORE = {LinkKind.PIX: 50, LinkKind.PXB: 40, LinkKind.PHB: 30, LinkKind.NODE: 20, LinkKind.SYS: 10}


def pair_score(topology: Topology, a: int, b: int) -> int:
    link = topology.link(a, b)
    if link.is_nvlink:
        # The model keeps no PCIe level under an NVLink pair; NUMA locality stands in for it.
        same = topology.gpus[a].numa_node == topology.gpus[b].numa_node
        return 100 * link.nvlinks + (20 if same else 10)
    return _PCIE_SCORE.get(link.kind, 10)


def _set_score(topology: Topology, gpus: tuple[int, ...]) -> int:
    return sum(pair_score(topology, a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :])


def _partitions(gpus: tuple[int, ...], k: int) -> Iterator[list[tuple[int, ...]]]:
    """Partitions into sets of k (the remainder, fewer than k, is left over as go-gpuallocator pads)."""
    if len(gpus) < k:
        yield []
        return
    first, rest = gpus[0], gpus[1:]
    for others in combinations(rest, k - 1):
        group = (first, *others)
        remaining = tuple(g for g in rest if g not in others)
        for tail in _partitions(remaining, k):
            yield [group, *tail]
    if len(gpus) % k:
        # `first` may be the one left over.
        for tail in _partitions(rest, k):
            if len(tail) * k >= len(gpus) - len(gpus) % k:
                yield tail


# Per (topology id, free GPUs, group size): the group it takes as a mask, -1 for none.
_BEST_EFFORT: Table[tuple[int, int, int], int] = Table("best-effort groups")


def best_effort(snapshot: Snapshot, node: NodeInfo, free: int, k: int) -> int | None:
    memo = snapshot.cache.memo.table(_BEST_EFFORT)
    key = (id(node.topology), free, k)
    cached = memo.get(key)
    if cached is not None:
        return cached if cached >= 0 else None
    topology = node.topology
    gpus = tuple(i for i in range(topology.gpu_count) if free >> i & 1)
    choice = -1
    if len(gpus) >= k:
        if k == 1:
            choice = 1 << gpus[0]
        else:
            best: tuple[int, int] | None = None
            for partition in _partitions(gpus, k):
                if not partition:
                    continue
                total = sum(_set_score(topology, s) for s in partition)
                top = max(partition, key=lambda s: _set_score(topology, s))
                if best is None or total > best[0]:
                    best = (total, sum(1 << g for g in top))
            choice = best[1] if best else -1
    memo[key] = choice
    return choice if choice >= 0 else None


def place_local_nvlink(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    return spread_workers(snapshot, request, best_effort)
