"""The gang placement engine: ``place(snapshot, request) -> Placement | Unplaceable``.

1. Filter nodes (readiness, taints, selectors, affinity, GPU model) and split them by GPU model and
   driver when the gang must be uniform.
2. On each node class, take the best well-connected groups (``groups.node_offer``), or, when the device
   plugin picks a worker's GPUs (``request.gpu_choice``), the groups it will pick.
3. For each network tier from the lowest, and each switch domain of that tier, find the highest bus
   bandwidth θ such that the domain's nodes hold the gang with every node reaching θ (the gang figure is a
   minimum over nodes, so a threshold search is exact given the offers).
4. Keep the best domain: preferred tier first, then bus bandwidth, then the lowest tier, then best fit
   (the fullest domain that holds the gang), so large free domains stay whole. A gang on one node, and the
   choice between node classes (GPU models), take where bus bandwidth and fit tie the pick that breaks the
   smallest free NVLink domain (``NodeScores.broken``): two GPUs go to an NVLink pair before a whole NVSwitch
   node, which stays for an 8-GPU gang.
5. Fill it: fullest lower-tier switches first, the last one best fit; ranks ordered by switch.

Nodes in multi-node NVLink domains (NVL72 racks) are placed by ``nvlink_domains.plan_on_domains`` instead of
steps 2-5: one domain when the gang fits, a node cap per domain, balanced slices across domains.

Steps 1-2, and the NVLink domains' summary, depend only on the snapshot and the gang's shape (filters, GPUs per
worker, who picks them): they are kept in the snapshot's memo, so a gang placed again on the same snapshot (a
queue retried after nothing changed) starts at step 3.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gputopo.placement.explain import intra_words, refusal
from gputopo.placement.filters import filter_nodes
from gputopo.placement.gang import NodeShare, assemble
from gputopo.placement.groups import Candidate, NodeOffer, node_offer, usable_mask
from gputopo.placement.nvlink_domains import DomainView, domain_view, plan_on_domains
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable, plural
from gputopo.topology.memo import Table

__all__ = ["candidates", "intra_words", "place"]

_CLUSTER = "cluster"


def _candidate_sets(snapshot: Snapshot, request: Request) -> tuple[list[_NodeSet], tuple[str, ...]]:
    nodes = snapshot.nodes
    result = filter_nodes(nodes, request)
    sets: dict[tuple[str, str], _NodeSet] = {}
    short = 0
    k, intra, choice = request.gpus_per_worker, request.intra_node, request.gpu_choice
    same_model, same_driver = request.same_model, request.same_driver
    # Nodes of one class (topology object, used GPUs) share an offer and a model: look each class up once.
    classes: dict[tuple[int, frozenset[int]], tuple[NodeOffer, str]] = {}
    for i in result.passed:
        node = nodes[i]
        kind = (id(node.topology), node.used_gpus)
        found = classes.get(kind)
        if found is None:
            offer = node_offer(snapshot, node, k, intra, choice)
            found = classes[kind] = (offer, node.gpu_model if same_model else "")
        offer, model = found
        if not offer.groups:
            short += 1
            continue
        key = (model, node.driver_version if same_driver else "")
        target = sets.get(key)
        if target is None:
            target = sets[key] = _NodeSet([], [])
        target.nodes.append(i)
        target.offers.append(offer)
    details = result.describe()
    if short:
        words = intra_words(request.intra_node)
        lack = "lacks" if short == 1 else "lack"
        gpus = plural(request.gpus_per_worker, f"free healthy{words} GPU")
        details = (*details, f"{plural(short, 'node')} {lack} {gpus}")
    return list(sets.values()), details


def candidates(snapshot: Snapshot, request: Request) -> tuple[list[list[Candidate]], tuple[str, ...]]:
    """Nodes that can take at least one worker, split into uniform sets (model, driver)."""
    sets, details = _candidate_sets(snapshot, request)
    return [s.candidates() for s in sets], details


@dataclass(frozen=True, slots=True)
class _NodeSet:
    """A uniform set of candidate nodes as two lists, their indices and their offers: one object per set, not
    per node, until the generic planner asks for ``Candidate``s."""

    nodes: list[int]
    offers: list[NodeOffer]

    def candidates(self) -> list[Candidate]:
        return [Candidate(i, offer) for i, offer in zip(self.nodes, self.offers, strict=True)]


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A snapshot's candidates for one gang shape: per uniform set, the summary of its NVLink domains when it
    lies in them, else its candidates (a domain set places or refuses in its own words, so nothing else
    reads its candidates)."""

    sets: tuple[tuple[DomainView | None, list[Candidate]], ...]
    details: tuple[str, ...]


# What of a request decides its candidates: the filters, the worker's GPUs and who picks them, uniformity.
_Shape = tuple[object, ...]
# Per snapshot (its own memo: candidates depend on which GPUs are used), per gang shape.
_PREPARED: Table[_Shape, _Prepared] = Table("candidates by gang shape")


def _shape(request: Request) -> _Shape:
    return (
        request.gpus_per_worker,
        request.intra_node,
        request.gpu_choice,
        request.same_model,
        request.same_driver,
        request.gpu_model,
        tuple(sorted(request.node_selector.items())),
        request.affinity_terms,
        request.tolerations,
    )


def _prepared(snapshot: Snapshot, request: Request) -> _Prepared:
    table = snapshot.memo.table(_PREPARED)
    shape = _shape(request)
    found = table.get(shape)
    if found is None:
        node_sets, details = _candidate_sets(snapshot, request)
        sets: list[tuple[DomainView | None, list[Candidate]]] = []
        for node_set in node_sets:
            view = domain_view(snapshot, node_set.nodes, node_set.offers)
            sets.append((view, [] if view is not None else node_set.candidates()))
        found = table[shape] = _Prepared(tuple(sets), details)
    return found


def _values(offer: NodeOffer, factor: float) -> tuple[float, ...]:
    return tuple(min(a, b / factor) for a, b in zip(offer.intra, offer.inter, strict=True))


def _slots(values: tuple[float, ...], theta: float) -> int:
    for m in range(len(values), 0, -1):
        if values[m - 1] >= theta:
            return m
    return 0


def _options(values: tuple[float, ...], theta: float) -> list[int]:
    """Worker counts at which a node reaches θ (the NICs of more GPUs can make more workers faster)."""
    return [m for m in range(1, len(values) + 1) if values[m - 1] >= theta]


def _reachable(option_lists: Sequence[list[int]], workers: int) -> list[int]:
    """suffix[j]: bit w set when nodes j.. can take exactly w workers."""
    limit = (1 << (workers + 1)) - 1
    suffix = [1] * (len(option_lists) + 1)
    for j in range(len(option_lists) - 1, -1, -1):
        bits = suffix[j + 1]
        for m in option_lists[j]:
            bits |= suffix[j + 1] << m
        suffix[j] = bits & limit
    return suffix


@dataclass(frozen=True, slots=True)
class _NodeClass:
    """The nodes of one switch domain with the same offer, and what one of them reaches per worker count.

    ``values[m-1]`` is the bus bandwidth a node reaches with m workers: its ring, or its NICs over the
    tier's oversubscription, whichever is lower.
    """

    values: tuple[float, ...]
    nodes: list[Candidate]

    @property
    def offer(self) -> NodeOffer:
        return self.nodes[0].offer


class _Merit(NamedTuple):
    """How a choice ranks against another, field by field; greater is better."""

    preferred: bool  # within the request's preferred tier (a single node always is)
    busbw_gbps: float  # the gang's bus bandwidth, rounded so float noise does not decide
    lowness: int  # minus the spanned tier: lower tiers first (a single node counts as tier 0)
    fit: int  # minus the free GPUs (of the domain; of the node after the gang): best fit first


@dataclass(frozen=True, slots=True)
class _DomainChoice:
    """One switch domain of one tier that holds the gang with every node reaching ``theta``."""

    merit: _Merit
    tier: int
    theta: float
    classes: list[_NodeClass]


@dataclass(frozen=True, slots=True)
class _SingleNode:
    """The gang on one node."""

    merit: _Merit
    share: NodeShare


@dataclass(frozen=True, slots=True)
class _Member:
    """A node of the chosen domain: its class, and the free GPUs it keeps when it takes its most workers."""

    left: int
    cand: Candidate
    node_class: _NodeClass


@dataclass(eq=False, slots=True)
class _SwitchPool:
    """The members under one lower-tier switch, fullest node first, and how many workers they take."""

    switch: tuple[str, ...]  # the switch at each tier below the chosen one, lowest first
    members: list[_Member] = field(default_factory=list)
    slots: int = 0


def _holds(classes: Sequence[_NodeClass], theta: float, workers: int) -> bool:
    """Whether the classes' nodes, each reaching θ, can take exactly ``workers`` workers."""
    if sum(_slots(c.values, theta) * len(c.nodes) for c in classes) < workers:
        return False
    limit = (1 << (workers + 1)) - 1
    bits = 1
    for node_class in classes:
        options = _options(node_class.values, theta)
        if not options:
            continue
        # Identical nodes: add one at a time until the reachable counts stop growing.
        for _ in range(min(len(node_class.nodes), workers)):
            step = bits
            for m in options:
                step |= bits << m
            step &= limit
            if step == bits:
                break
            bits = step
        if bits >> workers & 1:
            return True
    return bool(bits >> workers & 1)


def _threshold(classes: Sequence[_NodeClass], workers: int) -> float | None:
    """The highest θ at which the classes' nodes hold exactly ``workers`` workers, each node reaching θ."""
    thetas = sorted({v for c in classes for v in c.values})
    lo, hi, found = 0, len(thetas) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if _holds(classes, thetas[mid], workers):
            found, lo = thetas[mid], mid + 1
        else:
            hi = mid - 1
    return found


def _pools(snapshot: Snapshot, choice: _DomainChoice) -> list[_SwitchPool]:
    """The domain's nodes that reach θ, by their switches below the chosen tier."""
    pools: dict[tuple[str, ...], _SwitchPool] = {}
    for node_class in choice.classes:
        slots = _slots(node_class.values, choice.theta)
        if not slots:
            continue
        offer = node_class.offer
        left = offer.free - sum(g.bit_count() for g in offer.groups[slots - 1])
        for cand in node_class.nodes:
            switch = snapshot.domains[cand.node][: choice.tier]
            pool = pools.get(switch)
            if pool is None:
                pool = pools[switch] = _SwitchPool(switch)
            pool.members.append(_Member(left, cand, node_class))
            pool.slots += slots
    for pool in pools.values():
        pool.members.sort(key=lambda m: (m.left, m.cand.node))
    return list(pools.values())


def _pool_rank(pool: _SwitchPool) -> tuple[int, tuple[str, ...]]:
    return pool.slots, pool.switch


def _fill(snapshot: Snapshot, choice: _DomainChoice, workers: int) -> list[NodeShare] | None:
    pools = _pools(snapshot, choice)
    # Preference order: fullest lower-tier switches first, the last one best fit.
    order: list[_Member] = []
    need = workers
    while pools:
        fitting = [p for p in pools if p.slots >= need] if need > 0 else []
        pool = min(fitting, key=_pool_rank) if fitting else max(pools, key=_pool_rank)
        pools.remove(pool)
        order.extend(pool.members)
        need -= pool.slots
    options = [_options(m.node_class.values, choice.theta) for m in order]
    suffix = _reachable(options, workers)
    if not suffix[0] >> workers & 1:
        return None
    shares: list[NodeShare] = []
    need = workers
    for j, member in enumerate(order):
        if need == 0:
            break
        # The most workers this node can take while the rest can still make up the gang exactly.
        take = next((m for m in sorted(options[j], reverse=True) if m <= need and suffix[j + 1] >> (need - m) & 1), 0)
        if take:
            shares.append(NodeShare(member.cand.node, member.cand.offer.groups[take - 1]))
            need -= take
    return shares if need == 0 else None


def _cut(snapshot: Snapshot, shares: Sequence[NodeShare]) -> tuple[int, int]:
    """What the shares leave: the free GPUs left on their nodes, and the largest free NVLink domain they make
    smaller (``NodeScores.broken``)."""
    left = most = 0
    for share in shares:
        node = snapshot.nodes[share.node]
        scores = snapshot.cache.scores(node.topology)
        free = usable_mask(node, scores)
        left += (free & ~share.union).bit_count()
        most = max(most, scores.broken(free, share.union))
    return left, most


def _single_node(snapshot: Snapshot, cands: Sequence[Candidate], workers: int) -> _SingleNode | None:
    """The best node that holds the whole gang: fastest, then best fit, then the one whose largest free NVLink
    domain the gang breaks least, then first in the snapshot."""
    best: _SingleNode | None = None
    best_key: tuple[float, int, int] = (0.0, 0, 0)
    broken: dict[int, int] = {}  # per offer (a node class): its nodes' free GPUs are the same
    for cand in cands:
        offer = cand.offer
        if offer.capacity < workers:
            continue
        share = NodeShare(cand.node, offer.groups[workers - 1])
        left = offer.free - share.union.bit_count()
        merit = _Merit(True, round(offer.intra[workers - 1], 6), 0, -left)
        if best is not None and merit.busbw_gbps < best.merit.busbw_gbps:
            continue
        cut = broken.get(id(offer))
        if cut is None:
            cut = broken[id(offer)] = _cut(snapshot, (share,))[1]
        key = (merit.busbw_gbps, merit.fit, -cut)
        if best is None or key > best_key or (key == best_key and cand.node < best.share.node):
            best, best_key = _SingleNode(merit, share), key
    return best


def _domain_choices(snapshot: Snapshot, request: Request, cands: Sequence[Candidate]) -> list[_DomainChoice]:
    """Every switch domain of every allowed tier that holds the gang on two or more nodes."""
    workers = request.workers
    top = len(snapshot.tiers) if request.required_tier is None else request.required_tier
    preferred = request.preferred_tier
    choices: list[_DomainChoice] = []
    all_domains = snapshot.domains
    by_offer: dict[int, list[Candidate]] = defaultdict(list)
    for cand in cands:
        by_offer[id(cand.offer)].append(cand)
    for tier in range(top + 1):
        factor = snapshot.tiers.oversubscription(tier)
        domains: dict[str, dict[int, _NodeClass]] = defaultdict(dict)
        for offer_id, same in by_offer.items():
            values = _values(same[0].offer, factor)
            for cand in same:
                name = all_domains[cand.node][tier] if tier < len(snapshot.tiers) else _CLUSTER
                node_class = domains[name].get(offer_id)
                if node_class is None:
                    node_class = domains[name][offer_id] = _NodeClass(values, [])
                node_class.nodes.append(cand)
        for per_offer in domains.values():
            classes = list(per_offer.values())
            nodes = sum(len(c.nodes) for c in classes)
            if nodes < 2 or sum(c.offer.capacity * len(c.nodes) for c in classes) < workers:
                continue
            theta = _threshold(classes, workers)
            if theta is None:
                continue
            free = sum(c.offer.free * len(c.nodes) for c in classes)
            merit = _Merit(preferred is None or tier <= preferred, round(theta, 6), -tier, -free)
            choices.append(_DomainChoice(merit, tier, theta, classes))
    return choices


def _solve(snapshot: Snapshot, request: Request, cands: Sequence[Candidate]) -> list[NodeShare] | None:
    workers = request.workers
    single = _single_node(snapshot, cands, workers)
    choices = _domain_choices(snapshot, request, cands) if workers >= 2 else []
    choices.sort(key=lambda c: c.merit, reverse=True)
    # A single node wins a tie: it needs no network at all.
    if single is not None and (not choices or single.merit >= choices[0].merit):
        return [single.share]
    for choice in choices:
        shares = _fill(snapshot, choice, workers)
        if shares is not None:
            return shares
    return [single.share] if single is not None else None


def place(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    """Place the whole gang or nothing."""
    unknown = snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier)
    if unknown:
        return Unplaceable(unknown[0], unknown[1:])
    prepared = _prepared(snapshot, request)
    details = prepared.details
    best: Placement | None = None
    best_key: tuple[float, int, int] = (0.0, 0, 0)
    domain_refusal: Unplaceable | None = None
    for view, cands in prepared.sets:
        if view is not None:
            planned = plan_on_domains(snapshot, request, view)
            if isinstance(planned, Unplaceable):
                domain_refusal = domain_refusal or planned
                continue
            shares: list[NodeShare] | None = planned
        else:
            shares = _solve(snapshot, request, cands)
        if shares is None:
            continue
        placement = assemble(snapshot, shares)
        # Between node classes: the faster; on a tie, best fit, then the one breaking the smaller NVLink domain.
        left, cut = _cut(snapshot, shares)
        key = (round(placement.busbw_gbps, 6), -left, -cut)
        if best is None or key > best_key:
            best, best_key = placement, key
    if best is None:
        if domain_refusal is not None:
            return Unplaceable(domain_refusal.reason, (*domain_refusal.details, *details))
        return refusal(snapshot, request, [cands for _, cands in prepared.sets], details)
    if best.busbw_gbps < request.min_busbw_gbps:
        return Unplaceable(
            f"the best placement reaches {best.busbw_gbps:.0f} GB/s, below the required "
            f"{request.min_busbw_gbps:.0f} GB/s (limited by {best.bottleneck})",
            details,
        )
    return best
