"""Tier-binpack: Kueue's Topology Aware Scheduling with the BestFit algorithm, over the network tiers alone.

Capacity is counted in pods (a node holds ⌊free / gpusPerWorker⌋ workers). The lowest tier with one
domain that holds the gang is chosen; among its domains the one with the least capacity that still fits
(best fit). Going down, child domains are taken largest first, the last one best fit; GPUs inside a node
are the device plugin's first free ones (``hierarchy.hierarchical_best_fit``). ``kueue_tas`` is the same
with the NVLink clique as the lowest level.
"""

from __future__ import annotations

from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable
from gputopo.sim.peers.hierarchy import GroupKey, hierarchical_best_fit

__all__ = ["place_tier_binpack", "tier_keys"]


def tier_keys(snapshot: Snapshot, required_tier: int | None) -> list[GroupKey]:
    """A node's switch at each allowed tier, lowest first, then the whole cluster when no tier is required."""
    domains = snapshot.domains

    def tier(level: int) -> GroupKey:
        return lambda i: domains[i][level]

    if required_tier is None:
        return [*(tier(t) for t in range(len(snapshot.tiers))), lambda i: "cluster"]
    return [tier(t) for t in range(required_tier + 1)]


def place_tier_binpack(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    unknown = snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier)
    if unknown:
        return Unplaceable(unknown[0], unknown[1:])
    return hierarchical_best_fit(snapshot, request, tier_keys(snapshot, request.required_tier), who="Tier-binpack")
