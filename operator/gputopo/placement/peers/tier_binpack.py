"""Tier-binpack: Kueue's Topology Aware Scheduling with the BestFit algorithm.

Capacity is counted in pods (a node holds ⌊free / gpusPerWorker⌋ workers). The lowest tier with one
domain that holds the gang is chosen; among its domains the one with the least capacity that still fits
(best fit). Going down, child domains are taken largest first, the last one best fit; GPUs inside a node
are the device plugin's first free ones.
"""

from __future__ import annotations

from collections import defaultdict

from gputopo.placement.filters import filter_nodes
from gputopo.placement.gang import NodeShare, assemble
from gputopo.placement.peers.topology_blind import lowest_free
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable

__all__ = ["place_tier_binpack"]


def _take(snapshot: Snapshot, nodes: list[int], caps: dict[int, int], level: int, need: int) -> list[tuple[int, int]]:
    """Distribute ``need`` pods over ``nodes`` below tier ``level`` (-1: the nodes themselves)."""
    if level < 0:
        groups: dict[str, list[int]] = {str(i): [i] for i in nodes}
    else:
        groups = defaultdict(list)
        for i in nodes:
            groups[snapshot.domains[i][level]].append(i)
    pools = sorted(((sum(caps[i] for i in v), k, v) for k, v in groups.items()), key=lambda p: (-p[0], p[1]))
    out: list[tuple[int, int]] = []
    while need > 0 and pools:
        fitting = [p for p in pools if p[0] >= need]
        pool = min(fitting, key=lambda p: p[0]) if fitting else pools[0]
        pools.remove(pool)
        take = min(pool[0], need)
        if level < 0:
            out.append((pool[2][0], take))
        else:
            out.extend(_take(snapshot, pool[2], caps, level - 1, take))
        need -= take
    return out


def place_tier_binpack(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    k, workers = request.gpus_per_worker, request.workers
    unknown = snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier)
    if unknown:
        return Unplaceable(unknown[0], unknown[1:])
    caps: dict[int, int] = {}
    for i in filter_nodes(snapshot.nodes, request).passed:
        node = snapshot.nodes[i]
        free = sum(1 for g in node.free_gpus if node.topology.gpus[g].healthy)
        if free >= k:
            caps[i] = free // k
    tiers = len(snapshot.tiers)
    top = tiers if request.required_tier is None else request.required_tier
    for tier in range(top + 1):
        domains: dict[str, list[int]] = defaultdict(list)
        for i in caps:
            domains[snapshot.domains[i][tier] if tier < tiers else "cluster"].append(i)
        fits = [(sum(caps[i] for i in v), name, v) for name, v in domains.items() if sum(caps[i] for i in v) >= workers]
        if not fits:
            continue
        _, _, nodes = min(fits, key=lambda f: (f[0], f[1]))
        shares = []
        for i, count in _take(snapshot, nodes, caps, tier - 1, workers):
            node = snapshot.nodes[i]
            free = sum(1 << g for g in node.free_gpus if node.topology.gpus[g].healthy)
            groups = []
            for _ in range(count):
                group = lowest_free(snapshot, node, free, k)
                assert group is not None
                free &= ~group
                groups.append(group)
            shares.append(NodeShare(i, tuple(groups)))
        return assemble(snapshot, shares)
    return Unplaceable(f"no tier domain holds {workers} pods of {k} GPUs")
