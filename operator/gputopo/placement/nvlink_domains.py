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

What a decision reads of the domains is summarised once per snapshot and candidate set (``domain_view``, kept
in the snapshot's memo by the engine): each domain's members within its cap and the workers they take, and
per network tier its switches' domains ordered by room. A decision then works on domains, not trays: a split
is tried on a switch only where the counts of domains with room enough for its slices allow it, which is
exactly when the greedy assignment below succeeds, so at 1,389 racks a gang looks at few of them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

from gputopo.api.nodetopology import FabricHealth
from gputopo.placement.gang import NodeShare
from gputopo.placement.groups import Candidate, NodeOffer
from gputopo.placement.types import Request, Snapshot, Unplaceable, plural
from gputopo.topology.fabric import node_domain
from gputopo.topology.gang import split_evenly

__all__ = ["DomainView", "domain_view", "in_domains", "plan_on_domains"]


@dataclass(frozen=True, slots=True)
class _Domain:
    """One NVLink domain as a gang may use it.

    Its members are the nodes it may take, in the order it takes them: ``used``, nodes already in use (fullest
    first), then ``fresh``, as many fresh nodes as the cap leaves room for (most workers first), by index
    with their offers beside them (a rack's idle trays need no object each). ``singles`` has one entry per
    kind of member (offer, in use or not) with its lowest node, which is all the single-node choice compares.
    """

    name: str
    tier_path: tuple[str, ...]
    in_use: int  # nodes of the domain with a GPU in use (candidates or not)
    nodes: int  # nodes of the domain in the snapshot
    used: tuple[Candidate, ...]
    fresh: tuple[int, ...]
    fresh_offers: tuple[NodeOffer, ...]
    capacity: int  # workers the members take
    largest: int  # the most workers one of its candidates takes, member or not
    singles: tuple[tuple[NodeOffer, bool, int], ...]

    def take(self, workers: int) -> list[NodeShare]:
        """``workers`` workers on the members in order, most workers each."""
        shares: list[NodeShare] = []
        need = workers
        for node, offer in chain(self.used, zip(self.fresh, self.fresh_offers, strict=True)):
            if need == 0:
                break
            m = min(offer.capacity, need)
            shares.append(NodeShare(node, offer.groups[m - 1]))
            need -= m
        assert need == 0, "take() is only called within capacity"
        return shares


@dataclass(frozen=True, slots=True)
class _Switch:
    """The domains under one switch of a tier that have room, by (room, busiest, name), and all their room."""

    order: tuple[_Domain, ...]
    rooms: tuple[int, ...]  # each one's capacity, ascending
    capacity: int

    def with_room(self, size: int) -> int:
        """How many of its domains take a slice of ``size``."""
        return len(self.rooms) - bisect_left(self.rooms, size)


@dataclass(frozen=True, slots=True)
class DomainView:
    """The NVLink domains of one candidate set: what every decision on the snapshot reads of them.

    ``switches[t]`` are the switches of tier t in the order of their first domain by name (the whole cluster
    as one beyond the top tier).
    """

    domains: tuple[_Domain, ...]  # by name
    switches: tuple[tuple[_Switch, ...], ...]
    unhealthy: int  # candidates left out for an unhealthy fabric
    most_workers: int  # the most workers a member takes
    largest_offer: int  # the most workers a candidate takes (healthy or not)


def in_domains(snapshot: Snapshot, nodes: Sequence[int]) -> bool:
    """Whether this uniform set of candidate nodes is for the domain planner: every one in an NVLink domain."""
    nvlink = snapshot.nvlink_domains
    return bool(nodes) and all([nvlink[i] for i in nodes])


@dataclass(slots=True)
class _Found:
    """A domain's healthy candidates as they are read: in use, or fresh (by index, with their offers), and the
    switches of the first."""

    tier_path: tuple[str, ...]
    used: list[Candidate] = field(default_factory=list)
    fresh: list[int] = field(default_factory=list)
    fresh_offers: list[NodeOffer] = field(default_factory=list)


def _domain(name: str, found: _Found, in_use: int, nodes: int, cap: int) -> _Domain:
    """The domain's summary; its candidates come in node order (as ``engine.candidates`` lists them)."""
    room = max(0, cap - in_use)
    fresh, offers = found.fresh, found.fresh_offers
    # Fresh nodes of one offer (a rack's idle trays, mostly) are in the order the cap takes them already.
    one_offer = len(set(map(id, offers))) <= 1
    if one_offer:
        fresh_caps = [offers[0].capacity] if offers else []
        fresh, offers = fresh[:room], offers[:room]
        capacity = len(fresh) * fresh_caps[0] if fresh else 0
    else:
        fresh_caps = [o.capacity for o in offers]
        order = sorted(range(len(fresh)), key=lambda j: (-fresh_caps[j], fresh[j]))[:room]
        fresh, offers = [fresh[j] for j in order], [offers[j] for j in order]
        capacity = sum([o.capacity for o in offers])
    used = sorted(found.used, key=lambda c: (c.offer.free, c.node))
    used_caps = [c.offer.capacity for c in used]
    capacity += sum(used_caps)
    singles: dict[tuple[int, bool], tuple[NodeOffer, bool, int]] = {}
    fresh_kinds = zip(fresh[:1], offers[:1], strict=True) if one_offer else zip(fresh, offers, strict=True)
    for is_used, members in ((True, used), (False, fresh_kinds)):
        for node, offer in members:
            kind = (id(offer), is_used)
            known = singles.get(kind)
            if known is None or node < known[2]:
                singles[kind] = (offer, is_used, node)
    largest = max(used_caps + fresh_caps, default=0)
    return _Domain(
        name, found.tier_path, in_use, nodes, tuple(used), tuple(fresh), tuple(offers), capacity, largest,
        tuple(singles.values()),
    )  # fmt: skip


def _switch(domains: Sequence[_Domain]) -> _Switch:
    order = sorted((d for d in domains if d.capacity), key=lambda d: (d.capacity, -d.in_use, d.name))
    return _Switch(tuple(order), tuple(d.capacity for d in order), sum(d.capacity for d in domains))


def domain_view(snapshot: Snapshot, nodes: Sequence[int], offers: Sequence[NodeOffer]) -> DomainView | None:
    """The domains of a uniform set of candidate nodes (by index, in snapshot order, with their offers), or
    None when the set is not for the domain planner (``in_domains``)."""
    if not in_domains(snapshot, nodes):
        return None
    nvlink = snapshot.nvlink_domains
    infos = snapshot.nodes
    paths = snapshot.domains
    found: dict[str, _Found] = {}
    healthy: dict[int, bool] = {}  # per topology object, for this call
    unhealthy = 0
    largest = 0  # the most workers a candidate left out takes
    for i, offer in zip(nodes, offers, strict=True):
        node = infos[i]
        topology = node.topology
        ok = healthy.get(id(topology))
        if ok is None:
            ok = healthy[id(topology)] = node_domain(topology).health is FabricHealth.HEALTHY
        if not ok:
            unhealthy += 1
            largest = max(largest, offer.capacity)
            continue
        name = nvlink[i]
        lists = found.get(name)
        if lists is None:
            lists = found[name] = _Found(paths[i])
        if node.used_gpus:
            lists.used.append(Candidate(i, offer))
        else:
            lists.fresh.append(i)
            lists.fresh_offers.append(offer)
    in_use = Counter([nvlink[i] for i, node in enumerate(infos) if node.used_gpus])
    members = Counter(nvlink)
    cap = snapshot.tiers.domain_node_cap
    domains = tuple(_domain(name, found[name], in_use[name], members[name], cap) for name in sorted(found))
    switches: list[tuple[_Switch, ...]] = []
    for tier in range(len(snapshot.tiers)):
        by_switch: dict[str, list[_Domain]] = {}
        for d in domains:
            by_switch.setdefault(d.tier_path[tier], []).append(d)
        switches.append(tuple(_switch(group) for group in by_switch.values()))
    switches.append((_switch(domains),))
    most = max((offer.capacity for d in domains for offer, _, _ in d.singles), default=0)
    largest = max([largest, *(d.largest for d in domains)])
    return DomainView(domains, tuple(switches), unhealthy, most, largest)


def _single_node(view: DomainView, workers: int) -> NodeShare | None:
    """Fastest node that holds the gang; then one in use, the busiest domain, the least left free."""
    if workers > view.most_workers:
        return None
    best: tuple[tuple[float, bool, int, int, int], NodeOffer, int] | None = None
    for domain in view.domains:
        for offer, is_used, node in domain.singles:
            if offer.capacity < workers:
                continue
            left = offer.free - sum(g.bit_count() for g in offer.groups[workers - 1])
            key = (round(offer.intra[workers - 1], 6), is_used, domain.in_use, -left, -node)
            if best is None or key > best[0]:
                best = (key, offer, node)
    return NodeShare(best[2], best[1].groups[workers - 1]) if best is not None else None


def _slice_sizes(workers: int, slice_size: int, parts: int) -> list[int] | None:
    """``parts`` per-domain slices of whole ``slice_size`` units, as even as they can be; None if impossible."""
    units = workers // slice_size
    if parts > units:
        return None
    return [u * slice_size for u in split_evenly(units, parts)]


def _fits(switch: _Switch, sizes: Sequence[int]) -> bool:
    """Whether the switch's domains take the slices, one each: for each slice size, at least as many domains
    with that much room as slices that large (the slices are even, so of at most two sizes)."""
    big, small = sizes[0], sizes[-1]
    if switch.with_room(small) < len(sizes):
        return False
    return big == small or switch.with_room(big) >= sizes.count(big)


def _assign(switch: _Switch, sizes: Sequence[int]) -> list[tuple[_Domain, int]]:
    """Each slice (largest first) to the domain with the least room that holds it (then the busiest, then by
    name); only called where ``_fits``."""
    taken: set[int] = set()
    out: list[tuple[_Domain, int]] = []
    i, last = 0, 0
    for size in sizes:
        if size != last:
            i, last = bisect_left(switch.rooms, size), size
        while i in taken:  # the larger slices' domains
            i += 1
        taken.add(i)
        out.append((switch.order[i], size))
        i += 1
    return out


def _place_slices(
    snapshot: Snapshot, request: Request, view: DomainView, sizes: Sequence[int]
) -> list[tuple[_Domain, int]] | None:
    """The slices on domains under one switch of the lowest tier that holds them all: the chosen domains with
    the least room left (best fit), then the busiest, then the switch with the least room left."""
    top = len(snapshot.tiers) if request.required_tier is None else request.required_tier
    workers = sum(sizes)
    parts = len(sizes)
    if not _fits(view.switches[-1][0], sizes):
        return None  # the whole cluster does not take them, so no switch does
    for tier in range(top + 1):
        best: tuple[tuple[int, int, int], list[tuple[_Domain, int]]] | None = None
        for switch in view.switches[tier]:
            if len(switch.order) < parts or switch.capacity < workers or not _fits(switch, sizes):
                continue
            assigned = _assign(switch, sizes)
            left = sum(d.capacity for d, _ in assigned) - workers
            key = (left, -sum(d.in_use for d, _ in assigned), switch.capacity - workers)
            if best is None or key < best[0]:
                best = (key, assigned)
        if best is not None:
            return best[1]
    return None


def _split_order(workers: int, unit: int, most: int) -> Iterator[list[int]]:
    """Per-domain slice sizes to try, fewest domains first: balanced ones (no two more than a rank apart, so
    equal when slices are larger than one rank), then the others, a slice apart."""
    for balanced in (True, False):
        for parts in range(1, most + 1):
            sizes = _slice_sizes(workers, unit, parts)
            if sizes is not None and (max(sizes) - min(sizes) <= 1) is balanced:
                yield sizes


def _split(snapshot: Snapshot, request: Request, view: DomainView) -> list[tuple[_Domain, int]] | None:
    """Equal slices over the fewest domains that hold them, else slices that differ by one ``slice_size``."""
    with_room = len(view.switches[-1][0].order)  # no split has more slices than domains with room
    for sizes in _split_order(request.workers, request.slice_size or 1, with_room):
        placed = _place_slices(snapshot, request, view, sizes)
        if placed is not None:
            return placed
    return None


def _listing(values: Sequence[int]) -> str:
    if len(values) < 2:
        return "".join(map(str, values))
    return ", ".join(map(str, values[:-1])) + f" and {values[-1]}"


def _refusal(snapshot: Snapshot, request: Request, view: DomainView) -> Unplaceable:
    """What the gang needs in domains (as if they were empty, under the cap) and the room the emptiest have."""
    workers, unit = request.workers, request.slice_size or 1
    noun = "tray" if view.largest_offer <= 1 else "worker"
    cap = snapshot.tiers.domain_node_cap
    room = max((min(cap, d.nodes) * view.largest_offer for d in view.domains), default=0)
    sizes = next((s for s in _split_order(workers, unit, workers // unit) if max(s) <= room), None)
    slices = f" in slices of {unit}" if unit > 1 else ""
    if sizes is None:
        head = f"needs {plural(workers, noun)}{slices}, more than the NVLink domains can split"
    else:
        head = f"needs {plural(workers, noun)}{slices} within {plural(len(sizes), 'NVLink domain')}"
    rooms = sorted((d.capacity for d in view.domains), reverse=True)[: max(len(sizes or ()), 3)]
    tail = f"the emptiest domains have {_listing(rooms)} free {noun}s" if rooms else "no NVLink domain has room"
    unhealthy = view.unhealthy
    details = (f"{plural(unhealthy, 'node')} left out for an unhealthy NVLink fabric",) if unhealthy else ()
    return Unplaceable(f"{head}; {tail}", details)


def plan_on_domains(snapshot: Snapshot, request: Request, view: DomainView) -> list[NodeShare] | Unplaceable:
    """The gang's node shares on NVLink domains (see the module's text), or why it does not fit."""
    workers = request.workers
    unit = request.slice_size or 1
    if unit <= workers and workers % unit == 0:
        single = _single_node(view, workers)  # one node splits no slice
        if single is not None:
            return [single]
        placed = _split(snapshot, request, view)
        if placed is not None:
            return [share for domain, size in placed for share in domain.take(size)]
    if workers % unit:
        return Unplaceable(f"sliceSize {unit} does not divide {plural(workers, 'worker')}")
    return _refusal(snapshot, request, view)
