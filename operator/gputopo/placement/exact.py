"""The exact reference: the highest estimated bus bandwidth any valid placement of the gang reaches.

Exhaustive, but decomposed so it stays cheap: a gang's figure is the minimum over its nodes of each node's
value (its ring, or its NICs over the tier's oversubscription), so the optimum inside one switch domain is
the highest θ at which the domain's nodes hold the gang with every node reaching θ. Per node class every
subset of free GPUs that splits into valid groups is enumerated once; per domain θ is searched over the
values those subsets reach. Nothing is greedy, so this is the optimum of the estimator over all
placements (the tests check it against brute force on small clusters).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.filters import filter_nodes
from gputopo.placement.groups import k_subsets, usable_mask
from gputopo.placement.scores import NodeScores
from gputopo.placement.types import Request, Snapshot
from gputopo.topology.memo import Table

__all__ = ["NodeChoices", "node_choices", "optimum"]


@dataclass(frozen=True, slots=True)
class NodeChoices:
    """For m = 1..: (intra, inter) of every GPU subset that splits into m valid groups."""

    by_workers: tuple[tuple[tuple[float, float], ...], ...]
    free: int


# Per (topology id, free GPUs, group size, intra-node rule): the node's choices.
_CHOICES: Table[tuple[int, int, int, IntraNode], NodeChoices] = Table("exact choices")
# Per (topology id, group size, intra-node rule): which GPU subsets split into valid groups.
_SPLITTABLE: Table[tuple[int, int, IntraNode], dict[int, bool]] = Table("splittable subsets")


def _splittable(scores: NodeScores, k: int, intra: IntraNode) -> dict[int, bool]:
    @cache
    def split(mask: int) -> bool:
        if mask == 0:
            return True
        low = mask & -mask
        rest = mask & ~low
        return any(scores.allowed(low | others, intra) and split(rest & ~others) for others in k_subsets(rest, k - 1))

    return {mask: split(mask) for mask in range(1 << scores.topology.gpu_count)}


def node_choices(snapshot: Snapshot, scores: NodeScores, free: int, k: int, intra: IntraNode) -> NodeChoices:
    memo = snapshot.cache.memo.table(_CHOICES)
    key = (id(scores.topology), free, k, intra)
    found = memo.get(key)
    if found is not None:
        return found
    splittable = snapshot.cache.memo.table(_SPLITTABLE)
    splits_key = (id(scores.topology), k, intra)
    splits = splittable.get(splits_key)
    if splits is None:
        splits = splittable[splits_key] = _splittable(scores, k, intra)
    by_m: dict[int, set[tuple[float, float]]] = defaultdict(set)
    sub = free
    while sub:
        size = sub.bit_count()
        if size % k == 0 and splits[sub]:
            by_m[size // k].add((scores.intra(sub), scores.inter(sub)))
        sub = (sub - 1) & free
    top = max(by_m, default=0)
    choices = NodeChoices(tuple(tuple(sorted(by_m[m])) for m in range(1, top + 1)), free.bit_count())
    memo[key] = choices
    return choices


def _values(choices: NodeChoices, factor: float) -> tuple[float, ...]:
    """Per m, the best value a node reaches with m workers inside a multi-node gang."""
    return tuple(max(min(a, b / factor) for a, b in pairs) if pairs else 0.0 for pairs in choices.by_workers)


def _slots(values: tuple[float, ...], theta: float) -> int:
    return max((m for m in range(1, len(values) + 1) if values[m - 1] >= theta), default=0)


def _threshold(members: Sequence[tuple[float, ...]], workers: int) -> float | None:
    thetas = sorted({v for values in members for v in values})
    lo, hi, found = 0, len(thetas) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        # A node may take fewer workers than its most; smaller subsets exist whenever larger ones do
        # only if values are monotone, so count exactly: any m with value >= θ can be used.
        if _holds(members, thetas[mid], workers):
            found, lo = thetas[mid], mid + 1
        else:
            hi = mid - 1
    return found


def _holds(members: Sequence[tuple[float, ...]], theta: float, workers: int) -> bool:
    """Whether some choice of per-node worker counts (each reaching θ) sums to exactly ``workers``."""
    reachable = 1  # bit j set: j workers placeable
    limit = (1 << (workers + 1)) - 1
    for values in members:
        options = [m for m in range(1, len(values) + 1) if values[m - 1] >= theta]
        if not options:
            continue
        step = reachable
        for m in options:
            step |= reachable << m
        reachable = step & limit
        if reachable >> workers & 1:
            return True
    return bool(reachable >> workers & 1)


def optimum(snapshot: Snapshot, request: Request) -> float | None:
    """The best estimated bus bandwidth of any valid placement, or None when none exists."""
    k, workers = request.gpus_per_worker, request.workers
    if snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier):
        return None
    result = filter_nodes(snapshot.nodes, request)
    sets: dict[tuple[str, str], list[tuple[int, NodeChoices]]] = defaultdict(list)
    for i in result.passed:
        node = snapshot.nodes[i]
        scores = snapshot.cache.scores(node.topology)
        choices = node_choices(snapshot, scores, usable_mask(node, scores), k, request.intra_node)
        if choices.by_workers:
            key = (node.gpu_model if request.same_model else "", node.driver_version if request.same_driver else "")
            sets[key].append((i, choices))
    best: float | None = None
    tiers = len(snapshot.tiers)
    top = tiers if request.required_tier is None else request.required_tier
    for members in sets.values():
        for _, choices in members:
            if len(choices.by_workers) >= workers:
                value = max(a for a, _ in choices.by_workers[workers - 1])
                best = value if best is None else max(best, value)
        if workers < 2:
            continue
        for tier in range(top + 1):
            factor = snapshot.tiers.oversubscription(tier)
            domains: dict[str, list[tuple[float, ...]]] = defaultdict(list)
            for i, choices in members:
                name = snapshot.domains[i][tier] if tier < tiers else "cluster"
                domains[name].append(_values(choices, factor))
            for values in domains.values():
                if len(values) < 2:
                    continue
                theta = _threshold(values, workers)
                if theta is not None and (best is None or theta > best):
                    best = theta
    return best
