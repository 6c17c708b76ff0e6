"""The reference: the highest estimated bus bandwidth any valid placement of the gang reaches, found without
the engine's method.

The engine decomposes a gang's figure and searches a threshold over its nodes' offers; a bug there would be
copied into a check that used the same search. This module shares only the estimator
(``gputopo.topology.estimate_node`` / ``estimate_gang``), the pair rule of a group (``pair_allowed``) and the
snapshot's eligibility filters and switch domains:

* ``exhaustive_optimum``: every choice, per eligible node, of a GPU subset that splits into valid groups
  (none on most nodes), every combination over the nodes that adds up to the gang, each scored by
  ``estimate_gang`` on its members at the oversubscription of the tier it spans. For small instances.
* ``ilp_optimum`` (``gputopo.placement.exact_ilp``): a mixed-integer program over the same per-node choices,
  per switch domain, solved by HiGHS. For medium instances, without multi-node NVLink domains (whose figure
  is not a minimum over nodes).

``optimum`` takes the exhaustive search when the instance is small enough, else the ILP.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations, product
from math import prod

from gputopo.api.trainingjob import IntraNode
from gputopo.placement.filters import filter_nodes
from gputopo.placement.types import NodeInfo, Request, Snapshot
from gputopo.topology.estimate import estimate_node
from gputopo.topology.gang import estimate_gang
from gputopo.topology.groups import pair_allowed
from gputopo.topology.model import Topology
from gputopo.topology.rails import inter_node_bandwidth

__all__ = ["EXHAUSTIVE_LIMIT", "SubsetChoice", "eligible_sets", "exhaustive_optimum", "optimum", "subset_choices"]

# Combinations of per-node choices the exhaustive search walks at most; larger instances go to the ILP.
EXHAUSTIVE_LIMIT = 20_000


@dataclass(frozen=True, slots=True)
class SubsetChoice:
    """A node's GPUs that split into ``workers`` valid groups of the gang, and what the estimator says of them."""

    workers: int
    gpus: tuple[int, ...]
    intra_gbps: float
    inter_gbps: float


def _splits(topology: Topology, k: int, intra: IntraNode) -> Callable[[tuple[int, ...]], bool]:
    @cache
    def splits(gpus: tuple[int, ...]) -> bool:
        """Whether the GPUs split into groups of k whose every pair meets the rule (the lowest GPU in each)."""
        if not gpus:
            return True
        first, rest = gpus[0], gpus[1:]
        for others in combinations(rest, k - 1):
            valid = all(pair_allowed(topology, a, b, intra) for a, b in combinations((first, *others), 2))
            if valid and splits(tuple(g for g in rest if g not in others)):
                return True
        return False

    return splits


def _free(node: NodeInfo) -> tuple[int, ...]:
    return tuple(g.index for g in node.topology.gpus if g.healthy and g.index not in node.used_gpus)


# Per (topology identity, free GPUs, group size, rule): the topology (to check identity) and its choices.
_MEMO: dict[tuple[int, tuple[int, ...], int, IntraNode], tuple[Topology, tuple[SubsetChoice, ...]]] = {}
_MEMO_LIMIT = 8192
# Per (topology identity, group size, rule): the topology and its memoised "splits into groups" test.
_SPLITS: dict[tuple[int, int, IntraNode], tuple[Topology, Callable[[tuple[int, ...]], bool]]] = {}


def _choices(topology: Topology, free: tuple[int, ...], k: int, intra: IntraNode) -> tuple[SubsetChoice, ...]:
    key = (id(topology), free, k, intra)
    found = _MEMO.get(key)
    if found is not None and found[0] is topology:
        return found[1]
    found_splits = _SPLITS.get((id(topology), k, intra))
    if found_splits is None or found_splits[0] is not topology:
        found_splits = _SPLITS[(id(topology), k, intra)] = (topology, _splits(topology, k, intra))
    splits = found_splits[1]
    out = []
    for m in range(1, len(free) // k + 1):
        for gpus in combinations(free, m * k):
            if splits(gpus):
                intra_bw = estimate_node(topology, gpus).busbw_gbps
                out.append(SubsetChoice(m, gpus, intra_bw, inter_node_bandwidth(topology, gpus).busbw_gbps))
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
        _SPLITS.clear()
    _MEMO[key] = (topology, tuple(out))
    return tuple(out)


def subset_choices(node: NodeInfo, request: Request) -> tuple[SubsetChoice, ...]:
    """Every subset of the node's free, healthy GPUs that splits into valid groups of the gang."""
    return _choices(node.topology, _free(node), request.gpus_per_worker, IntraNode(request.intra_node))


def eligible_sets(snapshot: Snapshot, request: Request) -> list[list[int]]:
    """Nodes (by index) that pass the filters and can take a worker, split into the sets a gang may mix."""
    sets: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in filter_nodes(snapshot.nodes, request).passed:
        node = snapshot.nodes[i]
        if subset_choices(node, request):
            key = (node.gpu_model if request.same_model else "", node.driver_version if request.same_driver else "")
            sets[key].append(i)
    return list(sets.values())


def spanned_tier(snapshot: Snapshot, nodes: Sequence[int]) -> int:
    """The lowest tier whose one switch is above every node (``len(tiers)``: none is)."""
    for tier in range(len(snapshot.tiers)):
        if len({snapshot.domains[i][tier] for i in nodes}) == 1:
            return tier
    return len(snapshot.tiers)


def _gang_value(snapshot: Snapshot, picks: Sequence[tuple[int, SubsetChoice]], top: int) -> float | None:
    nodes = [i for i, _ in picks]
    if len(nodes) == 1:
        i, choice = picks[0]
        return estimate_node(snapshot.nodes[i].topology, choice.gpus).busbw_gbps
    tier = spanned_tier(snapshot, nodes)
    if tier > top:
        return None
    members = [(snapshot.nodes[i].topology, choice.gpus) for i, choice in picks]
    domains = [snapshot.nvlink_domains[i] for i in nodes]
    factor = snapshot.tiers.oversubscription(tier)
    return estimate_gang(members, oversubscription=factor, domains=domains).busbw_gbps


def _combinations(snapshot: Snapshot, request: Request, nodes: list[int]) -> Iterator[list[tuple[int, SubsetChoice]]]:
    options = [[None, *subset_choices(snapshot.nodes[i], request)] for i in nodes]
    for combo in product(*options):
        picks = [(i, c) for i, c in zip(nodes, combo, strict=True) if c is not None]
        if picks and sum(c.workers for _, c in picks) == request.workers:
            yield picks


def exhaustive_size(snapshot: Snapshot, request: Request) -> int:
    """How many combinations ``exhaustive_optimum`` would walk."""
    return sum(
        prod(len(subset_choices(snapshot.nodes[i], request)) + 1 for i in nodes)
        for nodes in eligible_sets(snapshot, request)
    )


def exhaustive_optimum(snapshot: Snapshot, request: Request) -> float | None:
    """The best figure over every combination of per-node subset choices (small instances only)."""
    if snapshot.tiers.unknown_tiers(request.required_tier, request.preferred_tier):
        return None
    top = len(snapshot.tiers) if request.required_tier is None else request.required_tier
    best: float | None = None
    for nodes in eligible_sets(snapshot, request):
        for picks in _combinations(snapshot, request, nodes):
            value = _gang_value(snapshot, picks, top)
            if value is not None and (best is None or value > best):
                best = value
    return best


def optimum(snapshot: Snapshot, request: Request) -> float | None:
    """The best estimated bus bandwidth of any valid placement, or None when none exists."""
    if exhaustive_size(snapshot, request) <= EXHAUSTIVE_LIMIT:
        return exhaustive_optimum(snapshot, request)
    from gputopo.placement.exact_ilp import ilp_optimum

    return ilp_optimum(snapshot, request)
