"""The well-connected GPU groups a node offers a gang, computed once per node class.

Nodes with the same topology object and the same free GPUs form one class: the group search runs once per
class and is memoised in the snapshot's cache, which is what keeps a 10,000-node decision cheap.

Who picks the groups is the request's ``gpu_choice``: gputopo's search (``_offer``), or the device plugin's
best-effort policy taking one worker's GPUs after another from the free set (``_device_plugin_offer``),
scored the same way, so the engine compares nodes by what their workers will really get.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.scores import NodeScores, gpus_of
from gputopo.placement.types import GpuChoice, NodeInfo, Snapshot
from gputopo.topology.device_plugin import kubelet_choice
from gputopo.topology.estimate import topology_tables
from gputopo.topology.memo import Table

__all__ = ["Candidate", "NodeOffer", "k_subsets", "node_offer", "usable_mask"]


@dataclass(frozen=True, slots=True)
class NodeOffer:
    """What one node class offers: for m = 1..capacity workers, their groups and what they reach.

    ``groups[m-1]`` are the m groups (bit masks) the engine would take; ``intra[m-1]`` the estimated bus
    bandwidth of their union; ``inter[m-1]`` the GB/s their nearest NICs carry off the node, worked out only
    when asked (only a gang across nodes asks; the scores keep each union's figure).
    """

    scores: NodeScores
    groups: tuple[tuple[int, ...], ...]
    intra: tuple[float, ...]
    free: int

    @property
    def capacity(self) -> int:
        return len(self.groups)

    @property
    def inter(self) -> tuple[float, ...]:
        return tuple(self.scores.inter(sum(groups)) for groups in self.groups)


class Candidate(NamedTuple):
    """A node (by snapshot index) that passed the filters, with what it offers the gang (a named tuple: a
    decision makes one per node that passes, 25,000 on a large cluster)."""

    node: int
    offer: NodeOffer


def usable_mask(node: NodeInfo, scores: NodeScores) -> int:
    """The node's free, healthy GPUs as a bit mask."""
    used = 0
    for gpu in node.used_gpus:
        used |= 1 << gpu
    return scores.healthy_mask & ~used


def k_subsets(mask: int, k: int) -> list[int]:
    return [sum(1 << b for b in combo) for combo in combinations(gpus_of(mask), k)]


def _split(
    scores: NodeScores, union: int, k: int, intra: IntraNode, memo: dict[int, tuple[int, ...] | None]
) -> tuple[int, ...] | None:
    """The union split into valid groups of k (the lowest GPU's group first), or None when it cannot be."""
    if union == 0:
        return ()
    if union in memo:
        return memo[union]
    low = union & -union
    found: tuple[int, ...] | None = None
    for others in k_subsets(union & ~low, k - 1):
        group = low | others
        if scores.allowed(group, intra):
            rest = _split(scores, union & ~group, k, intra, memo)
            if rest is not None:
                found = (group, *rest)
                break
    memo[union] = found
    return found


# Kept with the estimator's tables, so topologies of equal content share them (every figure the search reads
# is kept there too): per (free GPUs, group size, intra-node rule), the planned groups and their bus bandwidths.
_PLANNED: Table[tuple[int, int, IntraNode], tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]] = Table(
    "planned groups"
)


def _offer(scores: NodeScores, free: int, k: int, intra: IntraNode) -> NodeOffer:
    """Per worker count m, the best m groups taken together (not one after another: the first worker's
    GPU must leave the second a good partner): the fastest union that splits into valid groups; among
    equals the one whose remainder serves the next jobs best (their bus bandwidth), then the one on the
    fewest NUMA nodes and nearest-NIC sets, then the lowest indices."""
    shared = topology_tables(scores.topology).memo.table(_PLANNED)
    found = shared.get((free, k, intra))
    if found is None:
        found = shared[(free, k, intra)] = _search(scores, free, k, intra)
    return NodeOffer(scores, found[0], found[1], free.bit_count())


def _search(
    scores: NodeScores, free: int, k: int, intra: IntraNode
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]:
    groups: list[tuple[int, ...]] = []
    intra_bw: list[float] = []
    splits: dict[int, tuple[int, ...] | None] = {}
    for m in range(1, free.bit_count() // k + 1):
        best: tuple[float, tuple[tuple[float, ...], ...], int, int, int] | None = None
        chosen: tuple[int, ...] | None = None
        union_of_best = 0
        for union in k_subsets(free, m * k):
            parts = _split(scores, union, k, intra, splits)
            if parts is None:
                continue
            sockets, nics = scores.locality(union)
            key = (round(scores.intra(union), 9), scores.remainder(free & ~union), -sockets, -nics, -union)
            if best is None or key > best:
                best, chosen, union_of_best = key, parts, union
        if chosen is None:
            break  # m workers do not fit, so neither do more
        groups.append(chosen)
        intra_bw.append(scores.intra(union_of_best))
    return tuple(groups), tuple(intra_bw)


def _device_plugin_offer(scores: NodeScores, free: int, k: int, intra: IntraNode) -> NodeOffer:
    """Per worker count m, the groups the kubelet gives m workers in rank order: each the device plugin's
    choice of k among what the earlier ones left. A choice that breaks ``intra`` (or none at all) ends it:
    the m-th worker would not get GPUs the gang accepts."""
    groups: list[tuple[int, ...]] = []
    intra_bw: list[float] = []
    taken: tuple[int, ...] = ()
    left = free
    for _ in range(free.bit_count() // k):
        chosen = kubelet_choice(scores.topology, gpus_of(left), k)
        if chosen is None:
            break
        group = sum(1 << g for g in chosen)
        if not scores.allowed(group, intra):
            break
        taken, left = (*taken, group), left & ~group
        groups.append(taken)
        intra_bw.append(scores.intra(free & ~left))
    return NodeOffer(scores, tuple(groups), tuple(intra_bw), free.bit_count())


_BUILDERS = {GpuChoice.PLANNED: _offer, GpuChoice.DEVICE_PLUGIN: _device_plugin_offer}

# Per (topology id, used GPUs as given, group size, intra-node rule, chooser): a frozenset hashes once, so a
# node class costs one lookup.
_OFFERS_BY_USED: Table[tuple[int, frozenset[int], int, IntraNode, GpuChoice], NodeOffer] = Table("offers by used GPUs")
# Per (topology id, free healthy GPUs as a mask, group size, intra-node rule, chooser).
_OFFERS: Table[tuple[int, int, int, IntraNode, GpuChoice], NodeOffer] = Table("offers")


def node_offer(
    snapshot: Snapshot, node: NodeInfo, k: int, intra: IntraNode, choice: GpuChoice = GpuChoice.PLANNED
) -> NodeOffer:
    by_used = snapshot.cache.memo.table(_OFFERS_BY_USED)
    fast = (id(node.topology), node.used_gpus, k, intra, choice)
    found = by_used.get(fast)
    if found is not None and found.scores.topology is node.topology:
        return found
    scores = snapshot.cache.scores(node.topology)
    free = usable_mask(node, scores)
    offers = snapshot.cache.memo.table(_OFFERS)
    key = (id(node.topology), free, k, intra, choice)
    offer = offers.get(key)
    if offer is None or offer.scores is not scores:
        offer = _BUILDERS[choice](scores, free, k, intra)
    offers[key] = by_used[fast] = offer
    return offer
