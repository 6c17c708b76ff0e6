"""The reference: the highest estimated bus bandwidth any valid placement of the gang reaches, found without
the engine's method.

The engine decomposes a gang's figure and searches a threshold over its nodes' offers; a bug there would be
copied into a check that used the same search. This module shares only the estimator
(``gputopo.topology.estimate_node`` / ``estimate_gang``), the pair rule of a group (``pair_allowed``) and the
snapshot's eligibility filters and switch domains; a node's subset choices are ``gputopo.sim.choices``:

* ``exhaustive_optimum``: every choice, per eligible node, of a GPU subset that splits into valid groups
  (none on most nodes), every combination over the nodes that adds up to the gang, each scored by
  ``estimate_gang`` on its members at the oversubscription of the tier it spans. For small instances.
* ``ilp_optimum`` (``gputopo.sim.exact_ilp``): a mixed-integer program over the same per-node choices,
  per switch domain, solved by HiGHS. For medium instances, without multi-node NVLink domains (whose figure
  is not a minimum over nodes).

``optimum`` takes the exhaustive search when the instance is small enough, else the ILP.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import product
from math import prod

from gputopo.placement.types import Request, Snapshot
from gputopo.sim.choices import SubsetChoice, eligible_sets, subset_choices
from gputopo.sim.exact_ilp import ilp_optimum
from gputopo.topology.estimate import estimate_node
from gputopo.topology.gang import estimate_gang

__all__ = ["EXHAUSTIVE_LIMIT", "exhaustive_optimum", "exhaustive_size", "optimum"]

# Combinations of per-node choices the exhaustive search walks at most; larger instances go to the ILP.
EXHAUSTIVE_LIMIT = 20_000


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
    return ilp_optimum(snapshot, request)
