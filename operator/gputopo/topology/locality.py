"""How close a GPU group sits to one CPU socket and one NIC, for ties in bus bandwidth.

A group on one NUMA node feeds its data loaders without crossing the socket interconnect, and GPUs behind
one PCIe switch share the NIC nearest to them. Neither shows in the all-reduce figure, so they only break
its ties (after the bandwidth the remainder leaves the next jobs): fewer NUMA nodes first, then fewer
distinct nearest-NIC sets.
"""

from __future__ import annotations

from gputopo.topology.estimate import topology_tables
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology

__all__ = ["locality"]

# Kept with the estimator's tables. Per GPU set: (NUMA nodes, distinct nearest-NIC sets).
_LOCALITY: Table[int, tuple[int, int]] = Table("locality")


def locality(topology: Topology, mask: int) -> tuple[int, int]:
    """(NUMA nodes the GPUs span, distinct sets of nearest NICs they have); lower is closer."""
    tables = topology_tables(topology)
    memo = tables.memo.table(_LOCALITY)
    found = memo.get(mask)
    if found is None:
        gpus = tables.bits(mask)
        numa = {topology.gpus[g].numa_node for g in gpus} - {None}
        nics = {tables.nearest(g) for g in gpus}
        found = memo[mask] = (len(numa), len(nics))
    return found
