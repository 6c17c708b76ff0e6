"""Scoring and assembling a gang's placement; shared by the engine, the exact solver and the peers.

Every policy's choice is scored by ``score_gang``, so their bus bandwidths are comparable. The figure is
``gputopo.topology.estimate_gang``'s: the minimum over the gang's nodes of each node's estimate and, on
several nodes, its inter-node bandwidth over the spanned tier's oversubscription. It is combined here
from the same per-node estimates (memoised per node class) so that the bottleneck names the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gputopo.placement.scores import gpus_of
from gputopo.placement.types import Placement, Snapshot, WorkerAssignment

__all__ = ["GangScore", "NodeShare", "assemble", "score_gang", "spanning_tier"]


@dataclass(frozen=True, slots=True)
class NodeShare:
    """The groups (bit masks, one per worker) a gang takes on one node (by snapshot index)."""

    node: int
    groups: tuple[int, ...]

    @property
    def union(self) -> int:
        mask = 0
        for group in self.groups:
            mask |= group
        return mask


@dataclass(frozen=True, slots=True)
class GangScore:
    busbw_gbps: float
    bottleneck: str
    tier: int | None
    tier_domain: str | None


def spanning_tier(snapshot: Snapshot, nodes: Sequence[int]) -> tuple[int, str | None]:
    """The lowest tier with one switch above all the nodes (``len(tiers)`` when none is)."""
    domains = snapshot.domains
    for tier in range(len(snapshot.tiers)):
        first = domains[nodes[0]][tier]
        if all(domains[i][tier] == first for i in nodes):
            return tier, first
    return len(snapshot.tiers), None


def score_gang(snapshot: Snapshot, shares: Sequence[NodeShare]) -> GangScore:
    """Estimated all-reduce bus bandwidth: the slowest node, or its NIC bandwidth over oversubscription."""
    if not shares:
        raise ValueError("a gang needs at least one node share")
    tier, domain = spanning_tier(snapshot, [s.node for s in shares])
    factor = snapshot.tiers.oversubscription(tier)
    intra: tuple[float, str] | None = None
    inter: tuple[float, str] | None = None
    for share in shares:
        node = snapshot.nodes[share.node]
        scores = snapshot.cache.scores(node.topology)
        union = share.union
        own = scores.intra_estimate(union)
        if intra is None or own.busbw_gbps < intra[0]:
            intra = (own.busbw_gbps, f"{node.name} intra-node: {own.bottleneck}")
        if len(shares) > 1:
            net = scores.inter_estimate(union)
            if inter is None or net.busbw_gbps < inter[0]:
                inter = (net.busbw_gbps, f"{node.name} network: {net.bottleneck}")
    assert intra is not None
    best, why = intra
    if inter is not None and inter[0] / factor < best:
        over = f", tier-{tier} oversubscription {factor:g}" if factor != 1 else ""
        best, why = inter[0] / factor, inter[1] + over
    public_tier = tier if tier < len(snapshot.tiers) else None
    return GangScore(best, why, public_tier, domain)


def _rank_order(snapshot: Snapshot, shares: Sequence[NodeShare]) -> list[NodeShare]:
    """Ring neighbours close: nodes sorted by their switches from the top tier down."""
    domains = snapshot.domains
    return sorted(shares, key=lambda s: (tuple(reversed(domains[s.node])), s.node))


def assemble(snapshot: Snapshot, shares: Sequence[NodeShare]) -> Placement:
    score = score_gang(snapshot, shares)
    workers: list[WorkerAssignment] = []
    for share in _rank_order(snapshot, shares):
        node = snapshot.nodes[share.node]
        scores = snapshot.cache.scores(node.topology)
        for group in share.groups:
            workers.append(WorkerAssignment(len(workers), node.name, gpus_of(group), scores.nics(group)))
    return Placement(tuple(workers), score.busbw_gbps, score.bottleneck, score.tier, score.tier_domain)
