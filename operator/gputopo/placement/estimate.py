"""Bus bandwidth of GPU groups and gangs, as the placement engine scores them.

Every subset of a node's GPUs is scored once per topology (``SubsetTable``): a subset's ring all-reduce
bus bandwidth is its best ring's slowest hop (a bottleneck Hamiltonian cycle, found by a Held-Karp pass
over all subsets at once). A gang's bus bandwidth is the minimum over its nodes of the intra-node ring and
the node's NIC bandwidth divided by the oversubscription of the tier the gang spans. Because the gang
figure is such a minimum, the best placement can be found by thresholds (see ``exact``).

The per-link figures are unidirectional NCCL-usable GB/s; they rank placements, they do not promise a
measured number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from gputopo.api.nodetopology import LinkKind, LinkState
from gputopo.api.trainingjob import IntraNode
from gputopo.topology.model import Nic, Topology

__all__ = [
    "DEFAULT_NIC_GBPS",
    "MAX_EXACT_GPUS",
    "SubsetTable",
    "inter_node_gbps",
    "nearest_nics",
    "pair_gbps",
    "subset_table",
]

# GB/s per NVLink per direction, by NVLink generation (NVML version enum differs; see reference §2).
_NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# PCIe x16 effective GB/s by generation, and the share of it left at each level of the PCIe tree.
_PCIE_GBPS = {3: 12.0, 4: 24.0, 5: 48.0}
_PCIE_LEVEL_SHARE = {
    LinkKind.PIX: 1.0,
    LinkKind.PXB: 0.9,
    LinkKind.PHB: 0.75,
    LinkKind.NODE: 0.6,
    LinkKind.SYS: 0.4,
}
# Ethernet a node without RDMA NICs still has.
DEFAULT_NIC_GBPS = 100.0
_NET_EFFICIENCY = 0.92
# GPUs farther than this from their NIC lose GPUDirect RDMA and bounce through host memory.
_GDR_LEVELS = (LinkKind.PIX, LinkKind.PXB)
_NO_GDR_SHARE = 0.6
# Beyond this many GPUs a node's subsets are not enumerated (no fixture has more than 8).
MAX_EXACT_GPUS = 12


def pair_gbps(topology: Topology, a: int, b: int) -> float:
    """What one ring hop between GPUs a and b carries, GB/s per direction."""
    link = topology.link(a, b)
    gpu = topology.gpus[a]
    if link.usable_nvlink and link.nvlinks > 0:
        per_link = _NVLINK_GBPS.get(gpu.nvlink_version, 25.0)
        return per_link * link.nvlinks * (0.5 if link.state is LinkState.DEGRADED else 1.0)
    gen = min(topology.gpus[a].pcie_generation, topology.gpus[b].pcie_generation) or 4
    kind = link.kind if link.kind in _PCIE_LEVEL_SHARE else LinkKind.SYS
    return _PCIE_GBPS.get(gen, 24.0) * _PCIE_LEVEL_SHARE[kind]


def _pair_allowed(topology: Topology, a: int, b: int, intra: IntraNode) -> bool:
    link = topology.link(a, b)
    if link.state is not LinkState.UP:
        return False
    if intra is IntraNode.NVSWITCH:
        return link.kind is LinkKind.NVSWITCH
    if intra is IntraNode.NVLINK:
        return link.usable_nvlink and link.nvlinks > 0
    return True


@dataclass(frozen=True)
class SubsetTable:
    """Per subset (bit mask) of one node's GPUs: ring bus bandwidth and the slowest hop of that ring."""

    topology: Topology
    busbw: tuple[float, ...]
    bottleneck: tuple[tuple[int, int] | None, ...]

    @cached_property
    def healthy_mask(self) -> int:
        return sum(1 << g.index for g in self.topology.gpus if g.healthy)

    def allowed(self, mask: int, intra: IntraNode) -> bool:
        """Whether every pair of the subset is Up (never a Down or Degraded link) and meets ``intra``."""
        return self._allowed(intra)[mask]

    def _allowed(self, intra: IntraNode) -> tuple[bool, ...]:
        cache = self.__dict__.setdefault("_allowed_cache", {})
        if intra not in cache:
            n = self.topology.gpu_count
            ok_pair = [[a == b or _pair_allowed(self.topology, a, b, intra) for b in range(n)] for a in range(n)]
            table = [True] * (1 << n)
            for mask in range(1, 1 << n):
                low = (mask & -mask).bit_length() - 1
                rest = mask & (mask - 1)
                good = table[rest] and (mask >> low) & 1 == 1
                r = rest
                while good and r:
                    b = (r & -r).bit_length() - 1
                    good = ok_pair[low][b]
                    r &= r - 1
                table[mask] = good
            cache[intra] = tuple(table)
        result: tuple[bool, ...] = cache[intra]
        return result

    def describe(self, mask: int) -> str:
        hop = self.bottleneck[mask]
        if hop is None:
            return "single GPU"
        a, b = hop
        link = self.topology.link(a, b)
        kind = f"NV{link.nvlinks}" if link.usable_nvlink and link.nvlinks else str(link.kind)
        return f"GPU{a}-GPU{b} {kind} ({self.busbw[mask]:.0f} GB/s)"


def subset_table(topology: Topology) -> SubsetTable:
    """Score every subset of the node's GPUs (cost 2^n · n^2 once per topology)."""
    n = topology.gpu_count
    if n > MAX_EXACT_GPUS:
        raise ValueError(f"nodes with more than {MAX_EXACT_GPUS} GPUs are not supported ({n})")
    bw = [[pair_gbps(topology, a, b) if a != b else 0.0 for b in range(n)] for a in range(n)]
    size = 1 << n
    busbw = [0.0] * size
    hops: list[tuple[int, int] | None] = [None] * size
    for start in range(n):
        # Paths from `start` through GPUs > start: best[mask][v] = best bottleneck ending at v.
        best: dict[int, dict[int, tuple[float, tuple[int, int] | None]]] = {1 << start: {start: (float("inf"), None)}}
        for mask in range(1 << start, size):
            ends = best.get(mask)
            if not ends or mask & ((1 << start) - 1):
                continue
            for v, (value, hop) in ends.items():
                # Close the ring back to start.
                if mask != 1 << start:
                    closing = bw[v][start]
                    ring = min(value, closing)
                    ring_hop = hop if value <= closing else (min(v, start), max(v, start))
                    if ring > busbw[mask] or hops[mask] is None:
                        busbw[mask], hops[mask] = ring, ring_hop
                for w in range(start + 1, n):
                    if mask >> w & 1:
                        continue
                    step = bw[v][w]
                    new = min(value, step)
                    new_hop = hop if value <= step else (min(v, w), max(v, w))
                    slot = best.setdefault(mask | 1 << w, {})
                    if w not in slot or slot[w][0] < new:
                        slot[w] = (new, new_hop)
        # A single GPU all-reduces with itself: no ring hop limits it.
        busbw[1 << start] = float("inf")
    # Two-GPU "rings" traverse the same pair both ways, which is what a 2-GPU ring does.
    return SubsetTable(topology, tuple(busbw), tuple(hops))


def nearest_nics(topology: Topology, gpus: Sequence[int]) -> tuple[Nic, ...]:
    """Each GPU's nearest Up NICs (all at its nearest distance), without repeats, in GPU order."""
    up = [nic for nic in topology.nics if nic.up]
    chosen: list[Nic] = []
    for gpu in gpus:
        if not up:
            break
        nearest = min(_level(c.distance(gpu)) for c in up)
        for nic in up:
            if _level(nic.distance(gpu)) == nearest and nic not in chosen:
                chosen.append(nic)
    return tuple(chosen)


def _level(kind: LinkKind) -> int:
    order = (LinkKind.PIX, LinkKind.PXB, LinkKind.PHB, LinkKind.NODE, LinkKind.SYS)
    return order.index(kind) if kind in order else len(order)


def inter_node_gbps(topology: Topology, gpus: Sequence[int]) -> tuple[float, str]:
    """GB/s a node's chosen GPUs can send off the node, and what limits it."""
    nics = nearest_nics(topology, gpus)
    if not nics:
        return DEFAULT_NIC_GBPS / 8 * _NET_EFFICIENCY, f"no RDMA NIC ({DEFAULT_NIC_GBPS:.0f} Gb/s Ethernet)"
    total = 0.0
    for nic in nics:
        rate = (nic.rate_gbps or DEFAULT_NIC_GBPS) / 8 * _NET_EFFICIENCY
        near = any(nic.distance(g) in _GDR_LEVELS for g in gpus)
        total += rate if near else rate * _NO_GDR_SHARE
    names = ",".join(n.name for n in nics)
    return total, f"NICs {names} ({total:.0f} GB/s)"
