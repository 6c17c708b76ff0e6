"""The candidate domains a preemptor may clear: a node, a multi-node NVLink domain, a switch of each tier.

Each domain is a set of snapshot indices; identical sets are kept once, at the lowest level. The whole
cluster (beyond the top tier) is its own domain, searched last. Only nodes that can take a worker of the
preemptor and hold free or preemptible GPUs take part.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gputopo.placement.types import Request, Snapshot

__all__ = ["CLUSTER", "Domain", "candidate_domains"]

CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class Domain:
    """``level`` is ``node``, ``nvlink``, ``tier-N`` or ``cluster``; ``rank`` orders levels, lowest first. A gang of
    exclusive parts clears a Domain of level ``exclusive``: the domains of its label its parts take, together."""

    level: str
    name: str
    nodes: tuple[int, ...]
    rank: int

    def __str__(self) -> str:
        return self.name if self.level == CLUSTER else f"{self.level} {self.name}"


def candidate_domains(snapshot: Snapshot, request: Request, useful: Collection[int]) -> list[Domain]:
    """The domains with a ``useful`` node that could hold the request by their GPU count alone.

    A domain holds all its nodes, useful or not: the engine counts the nodes in use of a multi-node NVLink
    domain against its cap, so a rack is never searched in part, nor a tray of one alone.
    """
    need = request.total_gpus
    nodes = snapshot.nodes
    out: list[Domain] = []
    seen: set[tuple[int, ...]] = set()
    wanted = set(useful)
    gpus = [n.topology.gpu_count for n in nodes]

    def add(level: str, name: str, members: list[int], rank: int) -> None:
        key = tuple(sorted(members))
        if wanted.isdisjoint(key) or key in seen or sum([gpus[i] for i in key]) < need:
            return
        seen.add(key)
        out.append(Domain(level, name, key, rank))

    for i in sorted(wanted):
        if gpus[i] >= need and not snapshot.nvlink_domains[i]:
            add("node", nodes[i].name, [i], 0)
    everyone = range(len(nodes))
    nvlink: dict[str, list[int]] = {}
    for i in everyone:
        clique = snapshot.nvlink_domains[i]
        if clique:
            nvlink.setdefault(clique, []).append(i)
    for name in sorted(nvlink):
        add("nvlink", name, nvlink[name], 1)
    top = len(snapshot.tiers) if request.required_tier is None else min(request.required_tier, len(snapshot.tiers))
    for tier in range(min(top + 1, len(snapshot.tiers))):
        switches: dict[str, list[int]] = {}
        for i, names in enumerate(snapshot.domains):
            name = names[tier]
            if not name.startswith("node/"):
                switches.setdefault(name, []).append(i)
        for name in sorted(switches):
            add(f"tier-{tier}", name, switches[name], 2 + tier)
    if top >= len(snapshot.tiers):
        add(CLUSTER, CLUSTER, list(everyone), 2 + len(snapshot.tiers))
    return out
