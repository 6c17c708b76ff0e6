"""Placing a gang on multi-node NVLink domains (GB200/GB300 NVL72 racks): the rules users wrote by hand.

A domain's nodes reach each other over NVLink at many times their NIC bandwidth, so:

* a gang that fits on one node stays there, on a node already in use if one fits (best fit), then in the
  busiest domain, so whole nodes and whole domains stay free;
* a gang that fits in one domain stays in it: the domain with the least room that still holds it;
* at most ``TierConfig.domain_node_cap`` nodes of a domain are in use at once (16 of an NVL72 rack's 18
  trays), leaving spares for a tray that fails;
* a larger gang is split into balanced per-domain slices over the fewest domains that hold them (24 trays:
  12 + 12; 48: 16 x 3; 25: 13 + 12), each a whole number of the request's ``slice_size`` ranks, so equal
  when that is more than one (24 in slices of 8: 8 x 3, not 16 + 8); only when no balanced split fits do
  slices differ by one ``slice_size``. Domains under one switch of the
  lowest network tier come first. Ranks are ordered by domain (``gang.assemble``), so each domain's are
  contiguous.

Nodes whose NVLink fabric is not healthy (``gputopo.topology.fabric``) take no part. ``plan_on_domains``
returns the node shares, or an ``Unplaceable`` in domain terms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from gputopo.api.nodetopology import FabricHealth
from gputopo.placement.gang import NodeShare
from gputopo.placement.groups import Candidate
from gputopo.placement.types import Request, Snapshot, Unplaceable, plural
from gputopo.topology.fabric import node_domain
from gputopo.topology.gang import split_evenly

__all__ = ["in_domains", "plan_on_domains"]


@dataclass(eq=False)
class _Domain:
    """One NVLink domain's candidates: nodes already in use, fresh nodes, and how many fresh ones the cap allows."""

    name: str
    tier_path: tuple[str, ...]
    used: list[Candidate] = field(default_factory=list)
    fresh: list[Candidate] = field(default_factory=list)
    in_use: int = 0  # nodes of the domain with a GPU in use (candidates or not)
    cap: int = 0

    @property
    def allowed_fresh(self) -> list[Candidate]:
        room = max(0, self.cap - self.in_use)
        return sorted(self.fresh, key=lambda c: (-c.offer.capacity, c.node))[:room]

    @property
    def capacity(self) -> int:
        """Workers the domain takes within its cap."""
        return sum(c.offer.capacity for c in self.used) + sum(c.offer.capacity for c in self.allowed_fresh)

    def take(self, workers: int) -> list[NodeShare]:
        """``workers`` workers on the fullest nodes first: nodes in use, then fresh ones, most workers each."""
        shares: list[NodeShare] = []
        need = workers
        used = sorted(self.used, key=lambda c: (c.offer.free, c.node))
        for cand in [*used, *self.allowed_fresh]:
            if need == 0:
                break
            m = min(cand.offer.capacity, need)
            shares.append(NodeShare(cand.node, cand.offer.groups[m - 1]))
            need -= m
        assert need == 0, "take() is only called within capacity"
        return shares


def in_domains(snapshot: Snapshot, cands: Sequence[Candidate]) -> bool:
    """Whether this uniform set of candidates is for the domain planner: every one in an NVLink domain."""
    nvlink = snapshot.nvlink_domains
    return bool(cands) and all(nvlink[c.node] for c in cands)


def _domains(snapshot: Snapshot, cands: Sequence[Candidate]) -> tuple[list[_Domain], int]:
    """The candidates by domain, and how many were left out for an unhealthy fabric."""
    nvlink = snapshot.nvlink_domains
    cap = snapshot.tiers.domain_node_cap
    by_name: dict[str, _Domain] = {}
    unhealthy = 0
    for cand in cands:
        node = snapshot.nodes[cand.node]
        if node_domain(node.topology).health is not FabricHealth.HEALTHY:
            unhealthy += 1
            continue
        name = nvlink[cand.node]
        domain = by_name.get(name)
        if domain is None:
            domain = by_name[name] = _Domain(name, snapshot.domains[cand.node], cap=cap)
        (domain.used if node.used_gpus else domain.fresh).append(cand)
    for i, node in enumerate(snapshot.nodes):
        if node.used_gpus and nvlink[i] in by_name:
            by_name[nvlink[i]].in_use += 1
    return sorted(by_name.values(), key=lambda d: d.name), unhealthy


def _single_node(domains: Sequence[_Domain], workers: int) -> NodeShare | None:
    """Fastest node that holds the gang; then one in use, the busiest domain, the least left free."""
    best: tuple[tuple[float, bool, int, int, int], NodeShare] | None = None
    for domain in domains:
        for cand in [*domain.used, *domain.allowed_fresh]:
            offer = cand.offer
            if offer.capacity < workers:
                continue
            left = offer.free - sum(g.bit_count() for g in offer.groups[workers - 1])
            key = (round(offer.intra[workers - 1], 6), cand in domain.used, domain.in_use, -left, -cand.node)
            if best is None or key > best[0]:
                best = (key, NodeShare(cand.node, offer.groups[workers - 1]))
    return best[1] if best is not None else None


def _slice_sizes(workers: int, slice_size: int, parts: int) -> list[int] | None:
    """``parts`` per-domain slices of whole ``slice_size`` units, as even as they can be; None if impossible."""
    units = workers // slice_size
    if parts > units:
        return None
    return [u * slice_size for u in split_evenly(units, parts)]


def _assign(domains: Sequence[_Domain], sizes: Sequence[int]) -> list[tuple[_Domain, int]] | None:
    """Each slice (largest first) to the domain with the least room that holds it; None when one does not fit."""
    free = list(domains)
    out: list[tuple[_Domain, int]] = []
    for size in sorted(sizes, reverse=True):
        fitting = [d for d in free if d.capacity >= size]
        if not fitting:
            return None
        chosen = min(fitting, key=lambda d: (d.capacity, -d.in_use, d.name))
        free.remove(chosen)
        out.append((chosen, size))
    return out


def _by_switch(snapshot: Snapshot, domains: Sequence[_Domain], tier: int) -> list[list[_Domain]]:
    """The domains grouped by their switch at ``tier`` (one group for the whole cluster beyond the top)."""
    if tier >= len(snapshot.tiers):
        return [list(domains)]
    groups: dict[str, list[_Domain]] = {}
    for d in domains:
        groups.setdefault(d.tier_path[tier], []).append(d)
    return list(groups.values())


def _place_slices(
    snapshot: Snapshot, request: Request, domains: Sequence[_Domain], sizes: Sequence[int]
) -> list[tuple[_Domain, int]] | None:
    """The slices on domains under one switch of the lowest tier that holds them all: the chosen domains with
    the least room left (best fit), then the busiest, then the switch with the least room left."""
    top = len(snapshot.tiers) if request.required_tier is None else request.required_tier
    for tier in range(top + 1):
        best: tuple[tuple[int, int, int], list[tuple[_Domain, int]]] | None = None
        for group in _by_switch(snapshot, domains, tier):
            assigned = _assign(group, sizes)
            if assigned is None:
                continue
            left = sum(d.capacity - size for d, size in assigned)
            key = (left, -sum(d.in_use for d, _ in assigned), sum(d.capacity for d in group) - sum(sizes))
            if best is None or key < best[0]:
                best = (key, assigned)
        if best is not None:
            return best[1]
    return None


def _split_order(workers: int, unit: int, most: int) -> Iterator[list[int]]:
    """Per-domain slice sizes to try, fewest domains first: balanced ones (no two more than a rank apart, so
    equal when slices are larger than one rank), then ones a slice apart."""
    for balanced in (True, False):
        for parts in range(1, most + 1):
            sizes = _slice_sizes(workers, unit, parts)
            if sizes is not None and (not balanced or max(sizes) - min(sizes) <= 1):
                yield sizes


def _split(snapshot: Snapshot, request: Request, domains: Sequence[_Domain]) -> list[tuple[_Domain, int]] | None:
    """Equal slices over the fewest domains that hold them, else slices that differ by one ``slice_size``."""
    for sizes in _split_order(request.workers, request.slice_size or 1, len(domains)):
        placed = _place_slices(snapshot, request, domains, sizes)
        if placed is not None:
            return placed
    return None


def _listing(values: Sequence[int]) -> str:
    if len(values) < 2:
        return "".join(map(str, values))
    return ", ".join(map(str, values[:-1])) + f" and {values[-1]}"


def _refusal(
    snapshot: Snapshot, request: Request, domains: Sequence[_Domain], cands: Sequence[Candidate], unhealthy: int
) -> Unplaceable:
    """What the gang needs in domains (as if they were empty, under the cap) and the room the emptiest have."""
    workers, unit = request.workers, request.slice_size or 1
    per_node = all(c.offer.capacity <= 1 for c in cands)
    noun = "tray" if per_node else "worker"
    members = Counter(snapshot.nvlink_domains)
    per_worker = max((c.offer.capacity for c in cands), default=1)
    room = max((min(snapshot.tiers.domain_node_cap, members[d.name]) * per_worker for d in domains), default=0)
    sizes = next((s for s in _split_order(workers, unit, workers // unit) if max(s) <= room), None)
    slices = f" in slices of {unit}" if unit > 1 else ""
    if sizes is None:
        head = f"needs {plural(workers, noun)}{slices}, more than the NVLink domains can split"
    else:
        head = f"needs {plural(workers, noun)}{slices} within {plural(len(sizes), 'NVLink domain')}"
    rooms = sorted((d.capacity for d in domains), reverse=True)[: max(len(sizes or ()), 3)]
    tail = f"the emptiest domains have {_listing(rooms)} free {noun}s" if rooms else "no NVLink domain has room"
    details = (f"{plural(unhealthy, 'node')} left out for an unhealthy NVLink fabric",) if unhealthy else ()
    return Unplaceable(f"{head}; {tail}", details)


def plan_on_domains(snapshot: Snapshot, request: Request, cands: Sequence[Candidate]) -> list[NodeShare] | Unplaceable:
    """The gang's node shares on NVLink domains (see the module's text), or why it does not fit."""
    domains, unhealthy = _domains(snapshot, cands)
    workers = request.workers
    unit = request.slice_size or 1
    if unit <= workers and workers % unit == 0:
        single = _single_node(domains, workers)  # one node splits no slice
        if single is not None:
            return [single]
        placed = _split(snapshot, request, domains)
        if placed is not None:
            return [share for domain, size in placed for share in domain.take(size)]
    if workers % unit:
        return Unplaceable(f"sliceSize {unit} does not divide {plural(workers, 'worker')}")
    return _refusal(snapshot, request, domains, cands, unhealthy)
