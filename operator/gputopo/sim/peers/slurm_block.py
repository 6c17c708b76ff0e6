"""Slurm's ``topology/block`` plugin on NVL72 racks: each rack's NVLink domain is a base block, aggregated
blocks are 2, 4, 8 … consecutive base blocks (the default ``BlockSizes``), and ``--segment=N`` (the job's slice
size) keeps every N nodes' worth of ranks inside one base block. The job goes to the smallest aggregated block
level that holds it, best fit there, base blocks largest first and the last best fit, as the Slurm topology
guide describes block scheduling; nodes outside any NVLink domain are base blocks of one node. No per-block
cap and no balancing of segments.
"""

from __future__ import annotations

from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable
from gputopo.sim.peers.hierarchy import GroupKey, hierarchical_best_fit

__all__ = ["place_slurm_block"]


def place_slurm_block(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    nvlink, names = snapshot.nvlink_domains, [n.name for n in snapshot]
    # Base blocks in the order their nodes come (topology.conf lists them so).
    blocks = list(dict.fromkeys(nvlink[i] or f"node/{names[i]}" for i in range(len(names))))
    position = {b: p for p, b in enumerate(blocks)}

    def base(i: int) -> str:
        return nvlink[i] or f"node/{names[i]}"

    def aggregated(size: int) -> GroupKey:
        return lambda i: f"blocks/{size}/{position[base(i)] // size}"

    keys: list[GroupKey] = [base]
    size = 2
    while size < 2 * len(blocks):
        keys.append(aggregated(size))
        size *= 2
    return hierarchical_best_fit(snapshot, request, keys, unit=request.slice_size or 1, who="Slurm topology/block")
