"""Interchangeable GPUs of one node: the symmetry that keeps group searches cheap.

Two GPUs are interchangeable when the GPUs match (model, NVLink, PCIe, health, NUMA node, nearest NICs) and
their links to every other GPU match: swapping them changes no estimate, no locality and no remainder, so a
group is only a count per class.
"""

from __future__ import annotations

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.topology.model import Topology

__all__ = ["interchangeable"]


def interchangeable(topology: Topology, candidates: list[int]) -> list[list[int]]:
    """Candidates split into classes of interchangeable GPUs (each class sorted, classes by first index).

    i and j are interchangeable when their links to every other GPU match and the GPUs match; that relation
    is an equivalence, and within a class all pairs are alike.
    """
    n = topology.gpu_count
    rows: list[list[tuple[LinkKind, int, LinkState] | None]] = [[None] * n for _ in range(n)]
    for (a, b), link in topology.links.items():
        rows[a][b] = rows[b][a] = (link.kind, link.nvlinks, link.state)
    nics = topology.nics
    kinds = [
        (g.model, g.nvlink_version, g.pcie_generation, g.health, g.numa_node, tuple(n.distance(i) for n in nics))
        for i, g in enumerate(topology.gpus)
    ]

    def twins(i: int, j: int) -> bool:
        # A single GPU's figure looks at all its links, so compare against every GPU, not only candidates.
        if kinds[i] != kinds[j]:
            return False
        ri, rj = rows[i], rows[j]
        return all(ri[g] == rj[g] for g in range(n) if g != i and g != j)

    classes: list[list[int]] = []
    for g in candidates:
        for cls in classes:
            if twins(cls[0], g):
                cls.append(g)
                break
        else:
            classes.append([g])
    return classes
