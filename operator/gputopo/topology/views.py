"""Views of one node's topology that placement, the probe's labels and ``gputopo topo show`` share."""

from __future__ import annotations

from collections.abc import Sequence

from gputopo.api.nodetopology import LinkKind
from gputopo.topology.estimate import topology_tables
from gputopo.topology.memo import Table
from gputopo.topology.model import PCIE_LEVELS, Nic, Topology

__all__ = [
    "INTERCONNECT_CLASSES",
    "interconnect_class",
    "nearest_gpus",
    "nearest_nics",
    "nvlink_domain_size",
    "nvlink_domains",
]

INTERCONNECT_CLASSES = ("nvswitch", "nvlink-mesh", "nvlink-pairs", "pcie")


# One per topology: its maximal NVLink cliques, largest first.
_NVLINK_DOMAINS: Table[None, tuple[tuple[int, ...], ...]] = Table("nvlink domains")


def _nvlink_adjacency(topology: Topology) -> list[int]:
    """Bit mask of each GPU's NVLink peers over links that carry traffic (Up or Degraded)."""
    adj = [0] * topology.gpu_count
    for (a, b), link in topology.links.items():
        if link.usable_nvlink and link.nvlinks > 0:
            adj[a] |= 1 << b
            adj[b] |= 1 << a
    return adj


def _maximal_cliques(adj: list[int]) -> list[int]:
    """Bron-Kerbosch with pivoting over bit masks; every maximal clique once."""
    out: list[int] = []

    def expand(r: int, p: int, x: int) -> None:
        if not p and not x:
            out.append(r)
            return
        pivot_pool = p | x
        pivot = max((i for i in range(len(adj)) if pivot_pool >> i & 1), key=lambda i: (adj[i] & p).bit_count())
        candidates = p & ~adj[pivot]
        while candidates:
            low = candidates & -candidates
            v = low.bit_length() - 1
            expand(r | low, p & adj[v], x & adj[v])
            p &= ~low
            x |= low
            candidates &= ~low

    if adj:
        expand(0, (1 << len(adj)) - 1, 0)
    return out


def nvlink_domains(topology: Topology) -> list[tuple[int, ...]]:
    """The maximal sets of GPUs in which every pair has a usable NVLink, largest first (then by index).

    GPUs without any NVLink are left out; a DGX-1 gives its two NVLink quads, H100 NVL boards their pairs.
    """
    own = topology.memo.table(_NVLINK_DOMAINS)
    found = own.get(None)
    if found is None:
        adj = _nvlink_adjacency(topology)
        cliques = [c for c in _maximal_cliques(adj) if c.bit_count() >= 2]
        domains = [tuple(i for i in range(topology.gpu_count) if c >> i & 1) for c in cliques]
        domains.sort(key=lambda d: (-len(d), d))
        found = own[None] = tuple(domains)
    return list(found)


def nvlink_domain_size(topology: Topology) -> int:
    """Size of the largest set of GPUs in which every pair has NVLink (1 without NVLink, 0 without GPUs)."""
    domains = nvlink_domains(topology)
    if domains:
        return len(domains[0])
    return 1 if topology.gpu_count else 0


def interconnect_class(topology: Topology) -> str:
    """nvswitch | nvlink-mesh (NVLink among 3 or more GPUs) | nvlink-pairs | pcie.

    It names the hardware, so it reads link kinds: a Down NVSwitch link still makes an NVSwitch node.
    """
    kinds = {link.kind for link in topology.links.values()}
    if LinkKind.NVSWITCH in kinds or topology.system.nvswitch:
        return "nvswitch"
    if LinkKind.NVLINK not in kinds:
        return "pcie"
    adj = [0] * topology.gpu_count
    for (a, b), link in topology.links.items():
        if link.kind is LinkKind.NVLINK:
            adj[a] |= 1 << b
            adj[b] |= 1 << a
    largest = max((c.bit_count() for c in _maximal_cliques(adj)), default=1)
    return "nvlink-mesh" if largest >= 3 else "nvlink-pairs"


def nearest_nics(topology: Topology, gpus: Sequence[int]) -> tuple[Nic, ...]:
    """The rails a worker on these GPUs is given (``NCCL_IB_HCA``): for each chosen GPU in the order given,
    every Up compute NIC at its nearest path type (NCCL spreads channels over all of them), without repeats.

    A DGX A100 GPU gets both NICs of its PCIe switch; a GB200 GPU the NICs of its own Grace; storage and
    front-end NICs never.
    """
    tables = topology_tables(topology)
    chosen: list[int] = []
    for g in gpus:
        for j in tables.nearest(g):
            if j not in chosen:
                chosen.append(j)
    return tuple(topology.nics[j] for j in chosen)


def nearest_gpus(topology: Topology, nic: Nic) -> tuple[int, ...]:
    """The GPUs closest to a NIC (all those at its smallest distance)."""
    if not topology.gpu_count:
        return ()
    distances = [PCIE_LEVELS.index(nic.distance(g)) for g in range(topology.gpu_count)]
    best = min(distances)
    return tuple(g for g, d in enumerate(distances) if d == best)
