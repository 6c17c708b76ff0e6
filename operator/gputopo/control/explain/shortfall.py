"""How close each candidate domain comes to holding a gang: "leaf-03: 3 of 4 nodes with 8 free NVSwitch GPUs; 1
node cordoned".

A domain is the switch at the gang's required tier (its leaf, tier 0, when it names none): the engine places a
gang across nodes under the lowest tier that holds it, so a leaf's shortfall is the first thing to read. Each
node either offers the gang worker slots (a well-connected group of its GPUs, as the engine's own group search
finds them) or is excluded for a reason the engine's filters give.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gputopo.placement.explain import intra_words
from gputopo.placement.filters import node_rejection
from gputopo.placement.groups import node_offer
from gputopo.placement.types import Request, Snapshot, plural

__all__ = ["DomainShortfall", "domain_shortfalls"]


@dataclass(slots=True)
class DomainShortfall:
    domain: str
    tier: int | None  # None: the node itself (a one-node gang)
    nodes: int = 0
    offering: int = 0  # nodes with at least one worker's group free
    slots: int = 0  # workers the domain could take
    excluded: Counter[str] = field(default_factory=Counter)

    def words(self, request: Request) -> str:
        need = f"{plural(request.gpus_per_worker, f'free{intra_words(request.intra_node)} GPU')}"
        text = f"{self.domain}: {self.offering} of {plural(self.nodes, 'node')} with {need}"
        if self.slots != self.offering:
            text += f" ({self.slots} workers' worth)"
        text += f", {request.workers} needed"
        if self.excluded:
            text += "; " + ", ".join(f"{plural(n, 'node')} {why}" for why, n in self.excluded.most_common())
        return text

    def to_data(self, request: Request) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "tier": self.tier,
            "nodes": self.nodes,
            "nodesOffering": self.offering,
            "workerSlots": self.slots,
            "workersNeeded": request.workers,
            "excluded": dict(self.excluded.most_common()),
            "words": self.words(request),
        }


def domain_shortfalls(snapshot: Snapshot, request: Request, limit: int = 5) -> list[DomainShortfall]:
    """The ``limit`` domains that come closest (most worker slots, then fewest nodes excluded), best first."""
    tier = request.required_tier if request.required_tier is not None else 0
    if tier >= len(snapshot.tiers):
        tier = len(snapshot.tiers) - 1
    found: dict[str, DomainShortfall] = {}
    domains = snapshot.domains
    for i, node in enumerate(snapshot.nodes):
        name = domains[i][tier] if tier >= 0 else node.name
        entry = found.get(name)
        if entry is None:
            entry = found[name] = DomainShortfall(name, tier if tier >= 0 else None)
        entry.nodes += 1
        why = node_rejection(node, request)
        if why is not None:
            entry.excluded[why] += 1
            continue
        capacity = node_offer(snapshot, node, request.gpus_per_worker, request.intra_node, request.gpu_choice).capacity
        if capacity == 0:
            free = len(node.free_gpus)
            entry.excluded["busy" if free < request.gpus_per_worker else "without a group that meets its needs"] += 1
            continue
        entry.offering += 1
        entry.slots += capacity
    ranked = sorted(found.values(), key=lambda d: (-min(d.slots, request.workers), sum(d.excluded.values()), d.domain))
    return ranked[:limit]
