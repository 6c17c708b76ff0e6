"""What the placement engine asks of one node's GPU subsets, memoised per topology.

Every figure comes from ``gputopo.topology``'s estimator, so the engine optimises the number the operator
reports: ``intra`` is ``estimate_node`` of the subset, ``inter`` its ``inter_node_bandwidth`` (what a
multi-node gang's figure takes, divided by the tier's oversubscription). ``allowed`` is the group rule of
``well_connected_groups`` (every pair Up and meeting ``intraNode``). ``domain`` is the largest free NVLink
domain (GPUs every pair of which NVLink joins: a whole NVSwitch node, an NVLink pair, a quad) and ``broken`` what
a pick breaks of it, by which the engine keeps large domains whole for the gangs that need them when bus
bandwidths tie. Subsets are bit masks of GPU indices.
"""

from __future__ import annotations

from gputopo.api.trainingjob import IntraNode
from gputopo.topology.estimate import BusBandwidth, estimate_node, topology_tables
from gputopo.topology.groups import pair_allowed
from gputopo.topology.locality import locality
from gputopo.topology.memo import Table
from gputopo.topology.model import Topology
from gputopo.topology.rails import inter_node_bandwidth
from gputopo.topology.remainder import remainder
from gputopo.topology.views import nearest_nics

__all__ = ["NodeScores", "gpus_of", "largest_clique"]

# Kept with the estimator's tables, so topologies of equal content share them (an NVL72 rack's trays report
# its own clique, so each rack has a topology object of its own, all of one content).
# Per intra-node rule: for each GPU, the GPUs it may share a group with (itself included), as a mask.
_ADJACENT: Table[IntraNode, tuple[int, ...]] = Table("adjacent GPUs")


def gpus_of(mask: int) -> tuple[int, ...]:
    """The GPU indices of a bit mask, ascending."""
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


def largest_clique(mask: int, adjacent: tuple[int, ...]) -> int:
    """The most GPUs of ``mask`` every pair of which ``adjacent`` joins (``adjacent[i]``: GPU i's partners as a mask,
    itself included)."""
    best = 0

    def grow(size: int, left: int) -> None:
        nonlocal best
        if size + left.bit_count() <= best:
            return
        if not left:
            best = size
            return
        low = left & -left
        grow(size + 1, left & adjacent[low.bit_length() - 1] & ~low)  # with the lowest GPU
        grow(size, left & ~low)  # without it

    grow(0, mask)
    return best


class NodeScores:
    """Per-subset estimates of one topology (shared by every node with this topology object)."""

    __slots__ = (
        "_adjacent",
        "_domain",
        "_inter",
        "_intra",
        "_locality",
        "_nics",
        "_remainder",
        "healthy_mask",
        "topology",
    )

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.healthy_mask = sum(1 << g.index for g in topology.gpus if g.healthy)
        self._intra: dict[int, BusBandwidth] = {}
        self._inter: dict[int, BusBandwidth] = {}
        self._adjacent: dict[IntraNode, tuple[int, ...]] = {}
        self._nics: dict[int, tuple[str, ...]] = {}
        self._locality: dict[int, tuple[int, int]] = {}
        self._remainder: dict[int, tuple[tuple[float, ...], ...]] = {}
        self._domain: dict[int, int] = {}

    def intra_estimate(self, mask: int) -> BusBandwidth:
        found = self._intra.get(mask)
        if found is None:
            found = self._intra[mask] = estimate_node(self.topology, gpus_of(mask))
        return found

    def inter_estimate(self, mask: int) -> BusBandwidth:
        found = self._inter.get(mask)
        if found is None:
            found = self._inter[mask] = inter_node_bandwidth(self.topology, gpus_of(mask))
        return found

    def intra(self, mask: int) -> float:
        """The subset's own all-reduce bus bandwidth (GB/s)."""
        return self.intra_estimate(mask).busbw_gbps

    def inter(self, mask: int) -> float:
        """GB/s the subset pushes off the node through its nearest NICs."""
        return self.inter_estimate(mask).busbw_gbps

    def nics(self, mask: int) -> tuple[str, ...]:
        """The names of the NICs a worker on these GPUs is given (``nearest_nics``)."""
        found = self._nics.get(mask)
        if found is None:
            found = self._nics[mask] = tuple(n.name for n in nearest_nics(self.topology, gpus_of(mask)))
        return found

    def locality(self, mask: int) -> tuple[int, int]:
        """NUMA nodes and nearest-NIC sets the subset spans (``gputopo.topology.locality``); lower is closer."""
        found = self._locality.get(mask)
        if found is None:
            found = self._locality[mask] = locality(self.topology, mask)
        return found

    def remainder(self, mask: int) -> tuple[tuple[float, ...], ...]:
        """How well the GPUs ``mask`` leaves free serve the next jobs (``gputopo.topology.remainder``)."""
        found = self._remainder.get(mask)
        if found is None:
            found = self._remainder[mask] = remainder(self.topology, mask)
        return found

    def domain(self, mask: int) -> int:
        """The largest NVLink domain among the GPUs ``mask``: how many of them every pair of which NVLink joins
        (an NVSwitch node's free GPUs, an NVLink pair, a quad; 1 with no NVLink, 0 for none)."""
        found = self._domain.get(mask)
        if found is None:
            found = self._domain[mask] = largest_clique(mask, self._adjacent_for(IntraNode.NVLINK))
        return found

    def broken(self, free: int, taken: int) -> int:
        """The size of the largest free NVLink domain that taking ``taken`` of the ``free`` GPUs makes smaller
        (0 when the largest stays whole): lower keeps the node's large domains for the gangs that need them."""
        before = self.domain(free)
        return before if self.domain(free & ~taken) < before else 0

    def _adjacent_for(self, intra_node: IntraNode) -> tuple[int, ...]:
        adjacent = self._adjacent.get(intra_node)
        if adjacent is None:
            shared = topology_tables(self.topology).memo.table(_ADJACENT)
            adjacent = shared.get(intra_node)
            if adjacent is None:
                adjacent = shared[intra_node] = self._adjacency(intra_node)
            self._adjacent[intra_node] = adjacent
        return adjacent

    def allowed(self, mask: int, intra_node: IntraNode) -> bool:
        """Whether the subset may be one worker's group: every pair Up and meeting ``intra_node``."""
        adjacent = self._adjacent_for(intra_node)
        rest = mask
        while rest:
            low = rest & -rest
            if mask & ~adjacent[low.bit_length() - 1]:
                return False
            rest ^= low
        return True

    def _adjacency(self, intra_node: IntraNode) -> tuple[int, ...]:
        n = self.topology.gpu_count
        return tuple(
            (1 << a) | sum(1 << b for b in range(n) if b != a and pair_allowed(self.topology, a, b, intra_node))
            for a in range(n)
        )
