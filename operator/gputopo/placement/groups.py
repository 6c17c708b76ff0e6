"""The well-connected GPU groups a node offers a gang, computed once per node class.

Nodes with the same topology object and the same free GPUs form one class: the group search runs once per
class and is memoised in the snapshot's cache, which is what keeps a 10,000-node decision cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.estimate import SubsetTable, inter_node_gbps, subset_table
from gputopo.placement.types import NodeInfo, Snapshot
from gputopo.topology.model import Topology

__all__ = ["Candidate", "NodeOffer", "k_subsets", "node_offer", "table_for", "usable_mask"]


@dataclass(frozen=True, slots=True)
class NodeOffer:
    """What one node class offers: for m = 1..capacity workers, their groups and what they reach.

    ``groups[m-1]`` are the m groups (bit masks) the engine would take; ``intra[m-1]`` the ring bus
    bandwidth over their union; ``inter[m-1]`` the GB/s their nearest NICs carry off the node.
    """

    table: SubsetTable
    groups: tuple[tuple[int, ...], ...]
    intra: tuple[float, ...]
    inter: tuple[float, ...]
    free: int

    @property
    def capacity(self) -> int:
        return len(self.groups)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node (by snapshot index) that passed the filters, with what it offers the gang."""

    node: int
    offer: NodeOffer


# Subset tables depend on the topology alone; they are kept across snapshots (bounded, oldest dropped).
_TABLES: dict[int, SubsetTable] = {}
_TABLES_MAX = 512


def table_for(snapshot: Snapshot, topology: Topology) -> SubsetTable:
    del snapshot  # kept in the signature: the cache is an implementation detail
    table = _TABLES.get(id(topology))
    if table is None or table.topology is not topology:
        table = subset_table(topology)
        if len(_TABLES) >= _TABLES_MAX:
            del _TABLES[next(iter(_TABLES))]
        _TABLES[id(topology)] = table
    return table


def usable_mask(node: NodeInfo, table: SubsetTable) -> int:
    free = 0
    for gpu in node.free_gpus:
        free |= 1 << gpu
    return free & table.healthy_mask


def k_subsets(mask: int, k: int) -> list[int]:
    bits = [i for i in range(mask.bit_length()) if mask >> i & 1]
    return [sum(1 << b for b in combo) for combo in combinations(bits, k)]


def _best_group(table: SubsetTable, free: int, taken: int, k: int, intra: IntraNode) -> int | None:
    """The group whose union with ``taken`` rings fastest, leaving the rest as well connected as possible."""
    best: tuple[float, float, int] | None = None
    choice = None
    for group in k_subsets(free, k):
        if not table.allowed(group, intra):
            continue
        rest = free & ~group
        key = (table.busbw[group | taken], table.busbw[rest] if rest else 0.0, -group)
        if best is None or key > best:
            best, choice = key, group
    return choice


def node_offer(snapshot: Snapshot, node: NodeInfo, k: int, intra: IntraNode) -> NodeOffer:
    # Keyed on the used set as given (a frozenset hashes once), so a node class costs one lookup.
    fast = ("offer-used", id(node.topology), node.used_gpus, k, intra)
    found = snapshot.cache.get(fast)
    if found is not None and found.table.topology is node.topology:
        assert isinstance(found, NodeOffer)
        return found
    table = table_for(snapshot, node.topology)
    free = usable_mask(node, table)
    key = ("offer", id(node.topology), free, k, intra)
    offer = snapshot.cache.get(key)
    if offer is not None:
        assert isinstance(offer, NodeOffer)
        snapshot.cache[fast] = offer
        return offer
    groups: list[tuple[int, ...]] = []
    intra_bw: list[float] = []
    inter_bw: list[float] = []
    taken, left = 0, free
    chosen: tuple[int, ...] = ()
    while True:
        group = _best_group(table, left, taken, k, intra)
        if group is None:
            break
        taken |= group
        left &= ~group
        chosen = (*chosen, group)
        groups.append(chosen)
        intra_bw.append(table.busbw[taken])
        gpus = [i for i in range(table.topology.gpu_count) if taken >> i & 1]
        inter_bw.append(inter_node_gbps(table.topology, gpus)[0])
    offer = NodeOffer(table, tuple(groups), tuple(intra_bw), tuple(inter_bw), free.bit_count())
    snapshot.cache[key] = snapshot.cache[fast] = offer
    return offer
