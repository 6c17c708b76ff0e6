"""Topology-blind: the default kube-scheduler for GPU pods.

Each worker pod is scheduled on its own: the filters, then NodeResourcesFit's LeastAllocated score (the
node with the largest free share of GPUs wins; ties by node order), and the device plugin hands out the
lowest-numbered free GPUs. Made all-or-nothing for the gang so the comparison is fair.
"""

from __future__ import annotations

from collections.abc import Callable

from gputopo.placement.filters import filter_nodes
from gputopo.placement.gang import NodeShare, assemble
from gputopo.placement.types import NodeInfo, Placement, Request, Snapshot, Unplaceable

__all__ = ["GpuPicker", "lowest_free", "place_topology_blind", "spread_workers"]

# Chooses k of a node's free GPUs (bit mask) for one worker, or None.
GpuPicker = Callable[[Snapshot, NodeInfo, int, int], int | None]


def lowest_free(snapshot: Snapshot, node: NodeInfo, free: int, k: int) -> int | None:
    """The device plugin without topology: the first k free GPUs."""
    bits = [i for i in range(node.topology.gpu_count) if free >> i & 1]
    if len(bits) < k:
        return None
    return sum(1 << b for b in bits[:k])


def _free_mask(node: NodeInfo) -> int:
    mask = 0
    for gpu in node.free_gpus:
        if node.topology.gpus[gpu].healthy:
            mask |= 1 << gpu
    return mask


def spread_workers(snapshot: Snapshot, request: Request, pick: GpuPicker) -> Placement | Unplaceable:
    """Pods one at a time onto the least-allocated node, GPUs by ``pick``."""
    k = request.gpus_per_worker
    free = {i: _free_mask(snapshot.nodes[i]) for i in filter_nodes(snapshot.nodes, request).passed}
    taken: dict[int, list[int]] = {}
    model = ""
    for _ in range(request.workers):
        best: tuple[float, int] | None = None
        for i, mask in free.items():
            node = snapshot.nodes[i]
            if mask.bit_count() < k or (request.same_model and model and node.gpu_model != model):
                continue
            score = (mask.bit_count() / node.topology.gpu_count, -i)
            if best is None or score > best:
                best = score
        if best is None:
            return Unplaceable(f"kube-scheduler: no node fits a worker of {k} GPUs")
        i = -best[1]
        group = pick(snapshot, snapshot.nodes[i], free[i], k)
        if group is None:
            return Unplaceable(f"device plugin: no {k} GPUs on {snapshot.nodes[i].name}")
        free[i] &= ~group
        taken.setdefault(i, []).append(group)
        model = snapshot.nodes[i].gpu_model
    return assemble(snapshot, [NodeShare(i, tuple(groups)) for i, groups in taken.items()])


def place_topology_blind(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    return spread_workers(snapshot, request, lowest_free)
