"""The gang placement engine: ``place(snapshot, request) -> Placement | Unplaceable``.

1. Filter nodes (readiness, taints, selectors, affinity, GPU model) and split them by GPU model and
   driver when the gang must be uniform.
2. On each node class, take the best well-connected groups (``groups.node_offer``).
3. For each network tier from the lowest, and each switch domain of that tier, find the highest bus
   bandwidth θ such that the domain's nodes hold the gang with every node reaching θ (the gang figure is a
   minimum over nodes, so a threshold search is exact given the offers).
4. Keep the best domain: preferred tier first, then bus bandwidth, then the lowest tier, then best fit
   (the fullest domain that holds the gang), so large free domains stay whole.
5. Fill it: fullest lower-tier switches first, the last one best fit; ranks ordered by switch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from gputopo.placement.explain import intra_words, refusal
from gputopo.placement.filters import filter_nodes
from gputopo.placement.gang import NodeShare, assemble
from gputopo.placement.groups import Candidate, NodeOffer, node_offer
from gputopo.placement.types import Placement, Request, Snapshot, Unplaceable, plural

__all__ = ["candidates", "intra_words", "place"]

_CLUSTER = "cluster"


def candidates(snapshot: Snapshot, request: Request) -> tuple[list[list[Candidate]], tuple[str, ...]]:
    """Nodes that can take at least one worker, split into uniform sets (model, driver)."""
    result = filter_nodes(snapshot.nodes, request)
    sets: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    short = 0
    for i in result.passed:
        node = snapshot.nodes[i]
        offer = node_offer(snapshot, node, request.gpus_per_worker, request.intra_node)
        if offer.capacity == 0:
            short += 1
            continue
        key = (
            node.gpu_model if request.same_model else "",
            node.driver_version if request.same_driver else "",
        )
        sets[key].append(Candidate(i, offer))
    details = result.describe()
    if short:
        words = intra_words(request.intra_node)
        lack = "lacks" if short == 1 else "lack"
        gpus = plural(request.gpus_per_worker, f"free healthy{words} GPU")
        details = (*details, f"{plural(short, 'node')} {lack} {gpus}")
    return list(sets.values()), details


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


# Nodes of one switch domain with the same offer (node class): the offer's values and its nodes.
_Class = tuple[tuple[float, ...], list[Candidate]]


def _holds(classes: Sequence[_Class], theta: float, workers: int) -> bool:
    """Whether the classes' nodes, each reaching θ, can take exactly ``workers`` workers."""
    if sum(_slots(values, theta) * len(nodes) for values, nodes in classes) < workers:
        return False
    limit = (1 << (workers + 1)) - 1
    bits = 1
    for values, nodes in classes:
        options = _options(values, theta)
        if not options:
            continue
        # Identical nodes: add one at a time until the reachable counts stop growing.
        for _ in range(min(len(nodes), workers)):
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


def _threshold(classes: Sequence[_Class], workers: int) -> float | None:
    """The highest θ at which the classes' nodes hold exactly ``workers`` workers, each node reaching θ."""
    thetas = sorted({v for values, _ in classes for v in values})
    lo, hi, found = 0, len(thetas) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if _holds(classes, thetas[mid], workers):
            found, lo = thetas[mid], mid + 1
        else:
            hi = mid - 1
    return found


def _fill(
    snapshot: Snapshot,
    members: Sequence[tuple[Candidate, tuple[float, ...]]],
    tier: int,
    theta: float,
    workers: int,
) -> list[NodeShare] | None:
    subs: dict[tuple[str, ...], list[tuple[int, Candidate, tuple[float, ...]]]] = defaultdict(list)
    for cand, values in members:
        slots = _slots(values, theta)
        if slots:
            left = cand.offer.free - sum(g.bit_count() for g in cand.offer.groups[slots - 1])
            subs[snapshot.domains[cand.node][:tier]].append((left, cand, values))
    pools = []
    for key, entries in subs.items():
        entries.sort(key=lambda e: (e[0], e[1].node))
        pools.append((sum(_slots(v, theta) for _, _, v in entries), key, entries))
    # Preference order: fullest lower-tier switches first, the last one best fit.
    order: list[tuple[Candidate, tuple[float, ...]]] = []
    need = workers
    while pools:
        fitting = [p for p in pools if p[0] >= need] if need > 0 else []
        pool = min(fitting, key=lambda p: (p[0], p[1])) if fitting else max(pools, key=lambda p: (p[0], p[1]))
        pools.remove(pool)
        order.extend((cand, values) for _, cand, values in pool[2])
        need -= pool[0]
    options = [_options(values, theta) for _, values in order]
    suffix = _reachable(options, workers)
    if not suffix[0] >> workers & 1:
        return None
    shares: list[NodeShare] = []
    need = workers
    for j, (cand, _) in enumerate(order):
        if need == 0:
            break
        # The most workers this node can take while the rest can still make up the gang exactly.
        take = next((m for m in sorted(options[j], reverse=True) if m <= need and suffix[j + 1] >> (need - m) & 1), 0)
        if take:
            shares.append(NodeShare(cand.node, cand.offer.groups[take - 1]))
            need -= take
    return shares if need == 0 else None


def _single_node(cands: Sequence[Candidate], workers: int) -> tuple[tuple[float, ...], list[NodeShare]] | None:
    best: tuple[tuple[float, ...], list[NodeShare]] | None = None
    for cand in cands:
        offer = cand.offer
        if offer.capacity >= workers:
            left = offer.free - sum(g.bit_count() for g in offer.groups[workers - 1])
            key = (round(offer.intra[workers - 1], 6), 0.0, -float(left), -float(cand.node))
            if best is None or key > best[0]:
                best = (key, [NodeShare(cand.node, offer.groups[workers - 1])])
    return best


def _solve(snapshot: Snapshot, request: Request, cands: Sequence[Candidate]) -> list[NodeShare] | None:
    workers = request.workers
    single = _single_node(cands, workers)
    options: list[tuple[tuple[float, ...], int, float, list[tuple[Candidate, tuple[float, ...]]]]] = []
    top = len(snapshot.tiers) if request.required_tier is None else request.required_tier
    preferred = request.preferred_tier
    if workers >= 2:
        all_domains = snapshot.domains
        by_offer: dict[int, list[Candidate]] = defaultdict(list)
        for cand in cands:
            by_offer[id(cand.offer)].append(cand)
        for tier in range(top + 1):
            factor = snapshot.tiers.oversubscription(tier)
            domains: dict[str, dict[int, _Class]] = defaultdict(dict)
            for offer_id, same in by_offer.items():
                values = _values(same[0].offer, factor)
                for cand in same:
                    name = all_domains[cand.node][tier] if tier < len(snapshot.tiers) else _CLUSTER
                    entry = domains[name].get(offer_id)
                    if entry is None:
                        entry = domains[name][offer_id] = (values, [])
                    entry[1].append(cand)
            for per_class in domains.values():
                classes = list(per_class.values())
                nodes = sum(len(c[1]) for c in classes)
                if nodes < 2 or sum(c[1][0].offer.capacity * len(c[1]) for c in classes) < workers:
                    continue
                theta = _threshold(classes, workers)
                if theta is None:
                    continue
                free = sum(c[1][0].offer.free * len(c[1]) for c in classes)
                ok = 1.0 if preferred is None or tier <= preferred else 0.0
                members = [(cand, values) for values, same in classes for cand in same]
                options.append(((ok, round(theta, 6), -float(tier), -float(free)), tier, theta, members))
    options.sort(key=lambda o: o[0], reverse=True)
    if single is not None:
        key = (1.0, *single[0])
        if not options or key >= options[0][0]:
            return single[1]
    for _, tier, theta, members in options:
        shares = _fill(snapshot, members, tier, theta, workers)
        if shares is not None:
            return shares
    return single[1] if single is not None else None


def place(snapshot: Snapshot, request: Request) -> Placement | Unplaceable:
    """Place the whole gang or nothing."""
    unknown = snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier)
    if unknown:
        return Unplaceable(unknown[0], unknown[1:])
    sets, details = candidates(snapshot, request)
    best: Placement | None = None
    for cands in sets:
        shares = _solve(snapshot, request, cands)
        if shares is None:
            continue
        placement = assemble(snapshot, shares)
        if best is None or placement.busbw_gbps > best.busbw_gbps:
            best = placement
    if best is None:
        return refusal(snapshot, request, sets, details)
    if best.busbw_gbps < request.min_busbw_gbps:
        return Unplaceable(
            f"the best placement reaches {best.busbw_gbps:.0f} GB/s, below the required "
            f"{request.min_busbw_gbps:.0f} GB/s (limited by {best.bottleneck})",
            details,
        )
    return best
