"""Scoring and assembling a gang's placement; shared by the engine, the exact solver and the peers.

Every policy's choice is scored by ``score_gang``, so their bus bandwidths are comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gputopo.placement.estimate import inter_node_gbps, nearest_nics
from gputopo.placement.groups import table_for
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


def _gpus(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def spanning_tier(snapshot: Snapshot, nodes: Sequence[int]) -> tuple[int, str | None]:
    """The lowest tier with one switch above all the nodes (``len(tiers)`` when none is)."""
    domains = snapshot.domains
    for tier in range(len(snapshot.tiers)):
        first = domains[nodes[0]][tier]
        if all(domains[i][tier] == first for i in nodes):
            return tier, first
    return len(snapshot.tiers), None


def score_gang(snapshot: Snapshot, shares: Sequence[NodeShare]) -> GangScore:
    """Estimated all-reduce bus bandwidth: the slowest node ring, or NIC bandwidth over oversubscription."""
    tier, domain = spanning_tier(snapshot, [s.node for s in shares])
    factor = snapshot.tiers.oversubscription(tier)
    best, why = float("inf"), "single GPU: no all-reduce traffic"
    for share in shares:
        node = snapshot.nodes[share.node]
        table = table_for(snapshot, node.topology)
        union = share.union
        intra = table.busbw[union]
        if intra < best:
            best, why = intra, f"{node.name} intra-node ring {table.describe(union)}"
        if len(shares) > 1:
            net, net_why = inter_node_gbps(node.topology, _gpus(union))
            net /= factor
            if net < best:
                over = f", tier-{tier} oversubscription {factor:g}" if factor != 1 else ""
                best, why = net, f"{node.name} network: {net_why}{over}"
    if best == float("inf"):
        best = 0.0
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
        for group in share.groups:
            gpus = tuple(_gpus(group))
            nics = tuple(n.name for n in nearest_nics(node.topology, gpus))
            workers.append(WorkerAssignment(len(workers), node.name, gpus, nics))
    return Placement(tuple(workers), score.busbw_gbps, score.bottleneck, score.tier, score.tier_domain)
