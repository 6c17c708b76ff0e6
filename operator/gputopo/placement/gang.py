"""Scoring and assembling a gang's placement; shared by the engine, the exact solver and the peers.

Every policy's choice is scored by ``score_gang``, so their bus bandwidths are comparable. The figure is
``gputopo.topology.estimate_gang``'s: the minimum over the gang's nodes of each node's estimate and, on
several nodes, its inter-node bandwidth over the spanned tier's oversubscription. Nodes of one multi-node
NVLink domain count as one group (NVLink inside it, the sum of its nodes' NICs out of it), exactly as
``estimate_gang(..., domains=...)`` does. It is combined here from the same per-node estimates (memoised
per node class) so that the bottleneck names the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gputopo.placement.scores import gpus_of
from gputopo.placement.types import Placement, Snapshot, WorkerAssignment
from gputopo.topology.gang import domain_bandwidth, member_fabric

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


def _nvlink_groups(snapshot: Snapshot, shares: Sequence[NodeShare]) -> list[list[NodeShare]]:
    """The shares by multi-node NVLink domain; a share off every domain (or off the fabric) stands alone."""
    groups: dict[str, list[NodeShare]] = {}
    nvlink = snapshot.nvlink_domains
    for share in shares:
        domain = nvlink[share.node]
        topology = snapshot.nodes[share.node].topology
        if domain and len(shares) > 1 and member_fabric(topology, gpus_of(share.union))[0] > 0:
            groups.setdefault(domain, []).append(share)
        else:
            groups[f"node/{share.node}"] = [share]
    return list(groups.values())


def _group_parts(snapshot: Snapshot, group: Sequence[NodeShare], several: bool) -> tuple[tuple[float, str], ...]:
    """(intra, inter) of one group: a node's ring and NICs, or a domain's NVLink and all its nodes' NICs."""
    nodes = [snapshot.nodes[s.node] for s in group]
    if len(group) == 1:
        node, union = nodes[0], group[0].union
        scores = snapshot.cache.scores(node.topology)
        own = scores.intra_estimate(union)
        intra = (own.busbw_gbps, f"{node.name} intra-node: {own.bottleneck}")
        if not several:
            return (intra,)
        net = scores.inter_estimate(union)
        return intra, (net.busbw_gbps, f"{node.name} network: {net.bottleneck}")
    fabrics = [member_fabric(n.topology, gpus_of(s.union)) for n, s in zip(nodes, group, strict=True)]
    fabric = min(f[0] for f in fabrics)
    gpus = sum(s.union.bit_count() for s in group)
    value, how = domain_bandwidth(gpus, fabric, all(f[1] for f in fabrics))
    domain = snapshot.nvlink_domains[group[0].node]
    intra = (value, f"NVLink domain {domain}: {gpus} GPUs on {len(group)} nodes ({fabric:.0f} GB/s per GPU), {how}")
    total = sum(
        snapshot.cache.scores(n.topology).inter_estimate(s.union).busbw_gbps for n, s in zip(nodes, group, strict=True)
    )
    return intra, (total, f"NVLink domain {domain} network: NICs of {len(group)} nodes, {total:.1f} GB/s")


def score_gang(snapshot: Snapshot, shares: Sequence[NodeShare]) -> GangScore:
    """Estimated all-reduce bus bandwidth: the slowest node (or NVLink domain), or its NICs over oversubscription."""
    if not shares:
        raise ValueError("a gang needs at least one node share")
    tier, domain = spanning_tier(snapshot, [s.node for s in shares])
    factor = snapshot.tiers.oversubscription(tier)
    groups = _nvlink_groups(snapshot, shares)
    intra: tuple[float, str] | None = None
    inter: tuple[float, str] | None = None
    for group in groups:
        parts = _group_parts(snapshot, group, len(groups) > 1)
        if intra is None or parts[0][0] < intra[0]:
            intra = parts[0]
        if len(groups) > 1 and (inter is None or parts[1][0] < inter[0]):
            inter = parts[1]
    assert intra is not None
    best, why = intra
    if inter is not None and inter[0] / factor < best:
        over = f", tier-{tier} oversubscription {factor:g}" if factor != 1 else ""
        best, why = inter[0] / factor, inter[1] + over
    public_tier = tier if tier < len(snapshot.tiers) else None
    return GangScore(best, why, public_tier, domain)


def _rank_order(snapshot: Snapshot, shares: Sequence[NodeShare]) -> list[NodeShare]:
    """Ring neighbours close: nodes sorted by their switches from the top tier down, then by NVLink domain,
    so each domain's ranks are contiguous."""
    domains = snapshot.domains
    nvlink = snapshot.nvlink_domains
    return sorted(shares, key=lambda s: (tuple(reversed(domains[s.node])), nvlink[s.node], s.node))


def assemble(snapshot: Snapshot, shares: Sequence[NodeShare]) -> Placement:
    score = score_gang(snapshot, shares)
    workers: list[WorkerAssignment] = []
    for share in _rank_order(snapshot, shares):
        node = snapshot.nodes[share.node]
        scores = snapshot.cache.scores(node.topology)
        for group in share.groups:
            workers.append(WorkerAssignment(len(workers), node.name, gpus_of(group), scores.nics(group)))
    return Placement(tuple(workers), score.busbw_gbps, score.bottleneck, score.tier, score.tier_domain)
