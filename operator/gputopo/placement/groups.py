"""The well-connected GPU groups a node offers a gang, computed once per node class.

Nodes with the same topology object and the same free GPUs form one class: the group search runs once per
class and is memoised in the snapshot's cache, which is what keeps a 10,000-node decision cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.scores import NodeScores, gpus_of
from gputopo.placement.types import NodeInfo, Snapshot
from gputopo.topology.memo import Table

__all__ = ["Candidate", "NodeOffer", "k_subsets", "node_offer", "usable_mask"]


@dataclass(frozen=True, slots=True)
class NodeOffer:
    """What one node class offers: for m = 1..capacity workers, their groups and what they reach.

    ``groups[m-1]`` are the m groups (bit masks) the engine would take; ``intra[m-1]`` the estimated bus
    bandwidth of their union; ``inter[m-1]`` the GB/s their nearest NICs carry off the node.
    """

    scores: NodeScores
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


def usable_mask(node: NodeInfo, scores: NodeScores) -> int:
    """The node's free, healthy GPUs as a bit mask."""
    used = 0
    for gpu in node.used_gpus:
        used |= 1 << gpu
    return scores.healthy_mask & ~used


def k_subsets(mask: int, k: int) -> list[int]:
    return [sum(1 << b for b in combo) for combo in combinations(gpus_of(mask), k)]


def _best_group(scores: NodeScores, free: int, taken: int, k: int, intra: IntraNode) -> int | None:
    """The group whose union with ``taken`` is fastest; among equals the one whose remainder serves the next
    jobs best (their bus bandwidth), then the one on the fewest NUMA nodes and nearest-NIC sets, then the
    lowest indices."""
    best: tuple[float, tuple[tuple[float, ...], ...], int, int, int] | None = None
    choice = None
    for group in k_subsets(free, k):
        if not scores.allowed(group, intra):
            continue
        sockets, nics = scores.locality(group)
        key = (round(scores.intra(group | taken), 9), scores.remainder(free & ~group), -sockets, -nics, -group)
        if best is None or key > best:
            best, choice = key, group
    return choice


def _offer(scores: NodeScores, free: int, k: int, intra: IntraNode) -> NodeOffer:
    groups: list[tuple[int, ...]] = []
    intra_bw: list[float] = []
    inter_bw: list[float] = []
    taken, left = 0, free
    chosen: tuple[int, ...] = ()
    while True:
        group = _best_group(scores, left, taken, k, intra)
        if group is None:
            break
        taken |= group
        left &= ~group
        chosen = (*chosen, group)
        groups.append(chosen)
        intra_bw.append(scores.intra(taken))
        inter_bw.append(scores.inter(taken))
    return NodeOffer(scores, tuple(groups), tuple(intra_bw), tuple(inter_bw), free.bit_count())


# Per (topology id, used GPUs as given, group size, intra-node rule): a frozenset hashes once, so a node
# class costs one lookup.
_OFFERS_BY_USED: Table[tuple[int, frozenset[int], int, IntraNode], NodeOffer] = Table("offers by used GPUs")
# Per (topology id, free healthy GPUs as a mask, group size, intra-node rule).
_OFFERS: Table[tuple[int, int, int, IntraNode], NodeOffer] = Table("offers")


def node_offer(snapshot: Snapshot, node: NodeInfo, k: int, intra: IntraNode) -> NodeOffer:
    by_used = snapshot.cache.memo.table(_OFFERS_BY_USED)
    fast = (id(node.topology), node.used_gpus, k, intra)
    found = by_used.get(fast)
    if found is not None and found.scores.topology is node.topology:
        return found
    scores = snapshot.cache.scores(node.topology)
    free = usable_mask(node, scores)
    offers = snapshot.cache.memo.table(_OFFERS)
    key = (id(node.topology), free, k, intra)
    offer = offers.get(key)
    if offer is None or offer.scores is not scores:
        offer = _offer(scores, free, k, intra)
    offers[key] = by_used[fast] = offer
    return offer
